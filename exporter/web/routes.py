"""What the server answers a request head: the route, content negotiation, the pages' bodies.

Pure of connections (connection.py holds those): a request head in, an Answer (status, content
type, body, more header lines) or a Render (a body to make in a worker thread first) out.
"""

from __future__ import annotations

import asyncio
import functools
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from exporter.exposition.published import Published
from exporter.exposition.render import CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE
from exporter.web.http1 import Answer, header

_QVALUE = re.compile(rb"0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?")
METHODS = (b"GET", b"HEAD")
BAD_REQUEST: Answer = (400, "text/plain", b"bad request\n", [])
NOT_ALLOWED: Answer = (405, "text/plain", b"only GET and HEAD\n", ["Allow: GET, HEAD"])
NOT_FOUND: Answer = (404, "text/plain", b"not found\n", [])
NO_SNAPSHOT: Answer = (503, "text/plain", b"no snapshot yet\n", [])


class Page:
    """A page made from one snapshot: made when first asked for (in a worker thread), served
    from memory after. `made_at`: when it was made (time.monotonic), None before."""

    def __init__(self, make: Callable[[], bytes], content_type: str) -> None:
        self.make, self.content_type = make, content_type
        self.body: bytes | None = None
        self.made_at: float | None = None
        self.making: asyncio.Future[bytes] | None = None  # (the server's, once asked for)
        self.failed = False
        self._lock = threading.Lock()

    def made(self) -> bytes:
        with self._lock:
            if self.body is None:
                self.body = self.make()
                self.made_at = time.monotonic()
            return self.body


@dataclass
class Site:
    """What the server serves at each path: the daemon swaps `metrics`, `status` and `api` in,
    and sets `ready`."""

    metrics: Published | None = None  # /metrics
    status: Page | None = None  # / (HTML)
    api: Page | None = None  # /api/status (JSON)
    ready: Callable[[], bool] = lambda: False  # /-/ready


@dataclass(frozen=True)
class Render:
    """An answer whose body is not made yet: made in a worker thread, then answered (a page:
    once, in the pages' thread, for every request that asks for it meanwhile)."""

    make: Callable[[], bytes]
    answer: Callable[[bytes], Answer]
    page: Page | None = None


def route(site: Site, head: bytes) -> Answer | Render:
    """The answer to a request head (the request line and headers, CRLF between)."""
    request_line, _, header_text = head.partition(b"\r\n")
    parts = request_line.split(b" ")
    if len(parts) != 3:
        return BAD_REQUEST
    method, target = parts[0], parts[1].split(b"?", 1)[0]
    if method not in METHODS:
        return NOT_ALLOWED
    answer = PATHS.get(target)
    return NOT_FOUND if answer is None else answer(site, header_text)


def metrics(site: Site, header_text: bytes) -> Answer | Render:
    """/metrics: the published snapshot's exposition, in the format and encoding asked for."""
    published = site.metrics
    if published is None:
        return NO_SNAPSHOT
    gzipped = accepts_gzip(header(header_text, b"accept-encoding"))
    openmetrics = wants_openmetrics(header(header_text, b"accept"))
    body = published.ready(gzipped, openmetrics)
    answer = functools.partial(metrics_answer, gzipped=gzipped, openmetrics=openmetrics)
    if body is None:
        return Render(functools.partial(published.body, gzipped, openmetrics), answer)
    return answer(body)


def healthy(site: Site, header_text: bytes) -> Answer:
    """/-/healthy: the server answers."""
    return 200, "text/plain", b"OK\n", []


def ready(site: Site, header_text: bytes) -> Answer:
    """/-/ready: every source has started."""
    if site.ready():
        return 200, "text/plain", b"ready\n", []
    return 503, "text/plain", b"not ready: sources starting\n", []


def status(site: Site, header_text: bytes) -> Answer | Render:
    """/: the status page."""
    return page_answer(site.status)


def api(site: Site, header_text: bytes) -> Answer | Render:
    """/api/status: the status page's data."""
    return page_answer(site.api)


PATHS: dict[bytes, Callable[[Site, bytes], Answer | Render]] = {
    b"/metrics": metrics,
    b"/-/healthy": healthy,
    b"/-/ready": ready,
    b"/": status,
    b"/api/status": api,
}


# The status pages load and run nothing (defence in depth: what they show is escaped).
PAGE_HEADERS = [
    "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'",
    "X-Content-Type-Options: nosniff",
]


def page_answer(page: Page | None) -> Answer | Render:
    if page is None:
        return NO_SNAPSHOT
    ctype = page.content_type
    if page.body is not None:
        return 200, ctype, page.body, PAGE_HEADERS
    return Render(page.made, lambda body: (200, ctype, body, PAGE_HEADERS), page)


def metrics_answer(body: bytes, gzipped: bool, openmetrics: bool) -> Answer:
    ctype = OPENMETRICS_CONTENT_TYPE if openmetrics else CONTENT_TYPE
    return 200, ctype, body, ["Content-Encoding: gzip"] if gzipped else []


def accepts_gzip(value: bytes) -> bool:
    """Does an Accept-Encoding value (lower case) accept gzip (RFC 9110 12.5.3)? `gzip` (or
    `x-gzip`, else `*`) with a q-value above 0; a malformed q-value accepts nothing."""
    star: bool | None = None
    for item in value.split(b","):
        coding, *params = (p.strip() for p in item.split(b";"))
        accepted = True
        for param in params:
            key, _, q = param.partition(b"=")
            if key.strip() == b"q":
                q = q.strip()
                accepted = _QVALUE.fullmatch(q) is not None and float(q) > 0
        if coding in (b"gzip", b"x-gzip"):
            return accepted
        if coding == b"*":
            star = accepted
    return bool(star)


_OPENMETRICS = (b"application", b"openmetrics-text", (b"1.0.0", b"0.0.1"))  # 0.0.1: its draft
_TEXT = (b"text", b"plain", (b"0.0.4",))


def wants_openmetrics(value: bytes) -> bool:
    """Does an Accept value (lower case) prefer OpenMetrics 1.0.0 to the text format 0.0.4
    (RFC 9110 12.5.1)? Each format takes the q-value of the most specific media range that
    matches it (`*/*`, then `type/*`, then the type, then the type with a version it is:
    OpenMetrics 1.0.0 or 0.0.1, text 0.0.4; a range naming another version does not match).
    OpenMetrics when its q-value is above 0 and above the text format's, or equal to it and
    OpenMetrics named by its own type; the text format otherwise (no Accept, `*/*`, neither
    accepted). A malformed q-value accepts nothing."""
    best = {True: (-1, 0.0), False: (-1, 0.0)}  # by OpenMetrics?: (specificity, q-value)
    for item in value.split(b","):
        media, *params = (p.strip() for p in item.split(b";"))
        q, version = 1.0, b""
        for param in params:
            key, _, v = param.partition(b"=")
            key, v = key.strip(), v.strip().strip(b'"')
            if key == b"q":
                q = float(v) if _QVALUE.fullmatch(v) is not None else 0.0
            elif key == b"version":
                version = v
        kind, _, sub = (m.strip() for m in media.partition(b"/"))
        for openmetrics, (want_kind, want_sub, versions) in ((True, _OPENMETRICS), (False, _TEXT)):
            if kind == b"*" and sub == b"*":
                specificity = 0
            elif kind == want_kind and sub == b"*":
                specificity = 1
            elif kind == want_kind and sub == want_sub and (not version or version in versions):
                specificity = 3 if version else 2
            else:
                continue
            was, was_q = best[openmetrics]
            if specificity > was or (specificity == was and q > was_q):
                best[openmetrics] = (specificity, q)
    (specificity, q), (_, text_q) = best[True], best[False]
    return q > 0 and (q > text_q or (q == text_q and specificity >= 2))
