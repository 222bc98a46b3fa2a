"""The status pages a publish serves: a new snapshot's, unless the page served was made less
than PAGES_EVERY_S ago (however often a client reloads, a page is made at most that often)."""

from __future__ import annotations

import time

from exporter.daemon.publish import PAGES_EVERY_S, fresh_page
from exporter.web.routes import Page


def test_a_page_not_made_yet_is_replaced_by_the_new_snapshots() -> None:
    served = Page(lambda: b"old", "text/html")
    fresh = fresh_page(served, lambda: b"new", "text/html")
    assert fresh is not served and fresh.made() == b"new"


def test_a_page_made_moments_ago_is_served_on_then_replaced() -> None:
    served = Page(lambda: b"old", "text/html")
    assert served.made() == b"old" and served.made_at is not None
    assert fresh_page(served, lambda: b"new", "text/html") is served
    served.made_at = time.monotonic() - PAGES_EVERY_S - 0.001  # (made that long ago)
    fresh = fresh_page(served, lambda: b"new", "text/html")
    assert fresh is not served and fresh.made() == b"new"


def test_the_first_publish_makes_a_page() -> None:
    assert fresh_page(None, lambda: b"new", "text/html").made() == b"new"
