"""A published snapshot is rendered when a scrape first asks for it, in the format and encoding
it asks for, then served from memory; ahead only for a scraper that came before, and while that
is under way scrapes get the one before. And which format a scrape's Accept header asks for."""

from __future__ import annotations

import gzip
import random
import threading

import pytest

from exporter.accounting.figures import Snapshot
from exporter.exposition.published import Published
from exporter.exposition.render import Exposition, Renderer
from exporter.web.routes import wants_openmetrics

from support.dumps import START
from support.exposition import PROMETHEUS_ACCEPT, reference, rich_accounting, snapshot, traffic


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        (PROMETHEUS_ACCEPT, True),
        ("application/openmetrics-text; version=1.0.0", True),
        ("application/openmetrics-text", True),
        ("Application/OpenMetrics-Text; Version=1.0.0", True),  # (as _header lowers it)
        ('application/openmetrics-text;version="1.0.0"', True),
        ("application/openmetrics-text;version=0.0.1", True),  # the draft: the same text
        # Prometheus >= 2.49, scrape_protocols: [OpenMetricsText1.0.0, PrometheusText0.0.4]
        (
            "application/openmetrics-text;version=1.0.0;q=0.5,"
            "text/plain;version=0.0.4;q=0.4,*/*;q=0.3",
            True,
        ),
        # Prometheus 3's default: protobuf first (not served), OpenMetrics next
        (
            "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
            "encoding=delimited;q=0.5,application/openmetrics-text;version=1.0.0;"
            "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
            True,
        ),
        ("application/openmetrics-text, */*", True),  # named beats a wildcard at equal q
        ("application/openmetrics-text, text/plain", True),
        ("application/*", True),  # the only format it takes
        ("text/plain;version=0.0.4;q=0.5, application/openmetrics-text;q=0.6", True),
        ("", False),  # no Accept: curl, a browser's first look, old scrapers
        ("*/*", False),
        ("text/plain", False),
        ("text/plain;version=0.0.4", False),
        ("text/*, application/openmetrics-text;q=0.9", False),
        ("application/openmetrics-text;q=0.5, text/plain", False),
        ("application/openmetrics-text;q=0.5, */*", False),
        ("application/openmetrics-text;q=0", False),
        ("application/openmetrics-text;q=0.000, text/plain;q=0.001", False),
        ("application/openmetrics-text;q=2", False),  # malformed q-values accept nothing
        ("application/openmetrics-text;q=x", False),
        ("application/openmetrics-text;version=2.0.0", False),  # a version not served
        ("application/openmetrics-text;version=2.0.0, */*;q=0.1", False),
        ("application/json", False),  # accepts neither: the text format all the same
        (",;=,", False),
    ],
)
def test_openmetrics_is_served_when_preferred(accept: str, openmetrics: bool) -> None:
    assert wants_openmetrics(accept.lower().encode()) is openmetrics


def test_each_format_and_encoding_is_made_once_and_kept() -> None:
    renderer = Renderer("1.2.3")
    published = Published(renderer, snapshot(requests=20), 0)
    assert published.ready(gzipped=False, openmetrics=True) is None
    om = published.body(gzipped=False, openmetrics=True)
    assert om.endswith(b"# EOF\n") and published.plain is None  # the text format: not made
    assert published.ready(gzipped=False, openmetrics=True) is om
    zipped = published.body(gzipped=True, openmetrics=True)
    assert gzip.decompress(zipped) == om
    assert published.body(gzipped=True, openmetrics=True) is zipped
    plain = published.body(gzipped=False)
    assert b"# EOF" not in plain and plain == published.plain and published.gzipped is None
    # a scraper that asked for OpenMetrics gzipped finds the next snapshot made that way
    published.ready(gzipped=True, openmetrics=True)
    following = Published(renderer, snapshot(requests=21), 0, published)
    following.prepare_like(published)
    assert set(following.bodies) == {(True, False), (True, True)}


def test_a_snapshot_is_rendered_when_scraped_and_ahead_only_for_a_frequent_scraper() -> None:
    acc, names = rich_accounting()
    renderer = Renderer("1.2.3")
    traffic(acc, names, random.Random(5), 50, START)
    first = Published(renderer, acc.snapshot(), 0)
    assert first.plain is None and first.ready(gzipped=False) is None  # nothing made yet
    assert first.body(gzipped=True) == first.ready(gzipped=True)
    assert gzip.decompress(first.body(gzipped=True)) == first.plain
    assert first.plain is not None and first.plain.startswith(reference(first.snapshot, 0).encode())
    second = Published(renderer, acc.snapshot(), 0)
    second.prepare_like(first)  # `first` was scraped (gzipped): `second` made ahead
    assert second.plain is not None and second.gzipped is not None and second.scraped is None
    third = Published(renderer, acc.snapshot(), 0)
    third.prepare_like(second)  # made ahead, never scraped: nothing made
    assert third.plain is None and third.gzipped is None


class HeldRenderer(Renderer):
    """A renderer whose renders wait until the test lets them finish."""

    def __init__(self) -> None:
        super().__init__("1.2.3")
        self.started, self.go = threading.Event(), threading.Event()

    def render(self, snapshot: Snapshot, checkpoint_errors: int = 0) -> Exposition:
        self.started.set()
        assert self.go.wait(10)
        return super().render(snapshot, checkpoint_errors)


def test_while_a_snapshot_is_made_ahead_scrapes_get_the_one_before() -> None:
    acc, names = rich_accounting()
    renderer = HeldRenderer()
    renderer.go.set()
    traffic(acc, names, random.Random(6), 50, START)
    first = Published(renderer, acc.snapshot(), 0)
    old = first.body(gzipped=False)  # scraped
    renderer.go.clear()
    renderer.started.clear()
    second = Published(renderer, acc.snapshot(), 1, first)
    ahead = threading.Thread(target=second.prepare_like, args=(first,))
    ahead.start()
    assert renderer.started.wait(10)
    assert second.ready(gzipped=False) == old  # being made: the one before, at once
    assert second.ready(gzipped=True) is None  # the one before has no gzipped body
    renderer.go.set()
    ahead.join(10)
    new = second.ready(gzipped=False)
    assert new is not None and new != old and b"smllm_checkpoint_errors_total 1.0" in new
    third = Published(renderer, acc.snapshot(), 2, second)
    assert third.ready(gzipped=False) is None  # not being made: nothing to show in its place
