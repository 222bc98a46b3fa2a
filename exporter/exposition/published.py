"""A snapshot as /metrics is to show it: rendered when first scraped, then served from memory."""

from __future__ import annotations

import gzip
import threading

from exporter.accounting.figures import Snapshot
from exporter.exposition.render import Renderer

GZIP_LEVEL = 1  # a scrape may wait for it: 2.5 times quicker than level 5, 15% bigger


# The form of body a scrape asks for: (OpenMetrics?, gzipped?)
_Form = tuple[bool, bool]


class Published:
    """A snapshot as /metrics is to show it: rendered when a scrape first asks for it (most of
    the snapshots, one a second, are never scraped), in the format it asks for, gzipped when one
    first accepts gzip, and served from memory after. A scraper that came for the snapshot
    before is likely to come again: for it this one is made ahead (`prepare_like`), and while
    that is under way scrapes are answered with the one before, already made."""

    def __init__(
        self,
        renderer: Renderer,
        snapshot: Snapshot,
        checkpoint_errors: int,
        previous: Published | None = None,
    ) -> None:
        self.renderer = renderer
        self.snapshot = snapshot
        self.checkpoint_errors = checkpoint_errors
        self.bodies: dict[_Form, bytes] = {}  # each body once made, by (OpenMetrics?, gzipped?)
        self.scraped: _Form | None = None  # what a scrape asked for last
        self._previous = previous if previous is not None and previous.scraped is not None else None
        if previous is not None:
            previous._previous = None  # no chain of old snapshots
        self._making = False
        self._lock = threading.Lock()

    @property
    def plain(self) -> bytes | None:
        """The text-format body, once rendered."""
        return self.bodies.get((False, False))

    @property
    def gzipped(self) -> bytes | None:
        """The text-format body gzipped, once asked for."""
        return self.bodies.get((False, True))

    def ready(self, gzipped: bool, openmetrics: bool = False) -> bytes | None:
        """For a scrape: the body if it is made already (or, while it is being made, the one
        before), else None: then call `body`."""
        form = self.scraped = (openmetrics, gzipped)
        body = self.bodies.get(form)
        before = self._previous
        if body is None and self._making and before is not None:
            body = before.bodies.get(form)
        return body

    def body(self, gzipped: bool, openmetrics: bool = False) -> bytes:
        """For a scrape: the body, made on the first call that needs it (milliseconds: call it
        from a worker thread), from memory after."""
        form = self.scraped = (openmetrics, gzipped)
        return self._make(form)

    def prepare_like(self, previous: Published) -> None:
        """Make now what a scrape asked of `previous`, if one did."""
        if previous.scraped is not None:
            self._make(previous.scraped)

    def _make(self, form: _Form) -> bytes:
        openmetrics, gzipped = form
        with self._lock:
            self._making = True
            try:
                plain = self.bodies.get((openmetrics, False))
                if plain is None:
                    render = (
                        self.renderer.render_openmetrics if openmetrics else self.renderer.render
                    )
                    plain = render(self.snapshot, self.checkpoint_errors).body
                    self.bodies[openmetrics, False] = plain
                if not gzipped:
                    return plain
                zipped = self.bodies.get(form)
                if zipped is None:
                    zipped = gzip.compress(plain, compresslevel=GZIP_LEVEL)
                    self.bodies[form] = zipped
                self._previous = None  # made, both ways: the one before is not needed
                return zipped
            finally:
                self._making = False
