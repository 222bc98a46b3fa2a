"""A small asyncio HTTP server: /metrics from memory, /-/healthy, /-/ready, and an index page.

A published snapshot is rendered when the first scrape asks for it, and gzipped when the first
scrape that accepts gzip does (in a worker thread: other requests are answered meanwhile), then
served from memory.

It sheds load instead of falling over. At most `max_connections` are open at once (never more
than the file descriptors left after a reserve for checkpoints and sources). When a new one
comes at the cap, the one that has waited longest without sending a whole request head is cut,
else the longest idle keep-alive one, else the one stalled longest on its answer, else the new
one: a scraper, which sends its request at once, gets in whatever else holds connections. A
request head has `head_seconds` to arrive, an answer `write_seconds` to be taken, a kept-alive
connection `idle_seconds` between requests. Shed connections and accept errors are logged at
most once per LOG_EVERY_S, with their count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.collector import CONTENT_TYPE, Published

log = logging.getLogger(__name__)

MAX_HEAD = 16 * 1024  # request line and headers, bytes: a scraper sends a few hundred
MAX_CONNECTIONS = 64
FD_RESERVE = 64  # file descriptors kept for checkpoints, sources and worker threads
HEAD_S, WRITE_S, IDLE_S = 5.0, 10.0, 30.0
REQUESTS_PER_CONNECTION = 1000
LOG_EVERY_S = 10.0
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}
_INDEX = (
    b"<!doctype html><title>sm-llm-exporter</title><h1>sm-llm-exporter</h1>"
    b'<p><a href="/metrics">/metrics</a> <a href="/-/healthy">/-/healthy</a> '
    b'<a href="/-/ready">/-/ready</a></p>\n'
)
# How the cap picks a connection to cut: lower first (a request being answered is never cut).
_HEAD, _IDLE, _WRITE, _ANSWER = range(4)
_QVALUE = re.compile(rb"0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?")


@dataclass
class Pages:
    """What the server shows; the daemon swaps `metrics` in and sets `ready`."""

    metrics: Published | None = None
    ready: Callable[[], bool] = lambda: False


@dataclass
class _Connection:
    transport: asyncio.WriteTransport
    phase: int = _HEAD
    since: float = 0.0


@dataclass
class _Tally:
    """Occurrences logged at most once per LOG_EVERY_S, with how many there were."""

    what: str
    clock: Callable[[], float]
    count: int = 0
    logged_at: float | None = None

    def add(self, detail: str = "") -> None:
        self.count += 1
        now = self.clock()
        if self.logged_at is None or now - self.logged_at >= LOG_EVERY_S:
            suffix = f" ({detail})" if detail else ""
            log.warning("http: %s: %d since the last such line%s", self.what, self.count, suffix)
            self.count, self.logged_at = 0, now


def fd_budget(reserve: int = FD_RESERVE) -> int:
    """Connections the process can hold: its soft file-descriptor limit (raised to the hard
    one first, as far as it may be) less a reserve."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
    return max(1, soft - reserve)


class HttpServer:
    def __init__(
        self,
        pages: Pages,
        host: str,
        port: int,
        *,
        max_connections: int = MAX_CONNECTIONS,
        head_seconds: float = HEAD_S,
        write_seconds: float = WRITE_S,
        idle_seconds: float = IDLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pages = pages
        self.host, self.port = host, port
        self.max_connections = max_connections
        self.head_seconds, self.write_seconds = head_seconds, write_seconds
        self.idle_seconds = idle_seconds
        self.clock = clock
        self._server: asyncio.Server | None = None
        self._open: dict[asyncio.WriteTransport, _Connection] = {}
        self._shed = _Tally("connections cut at the connection cap", clock)
        self._accept_errors = _Tally("cannot accept a connection", clock)

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._open)

    async def start(self) -> tuple[str, int]:
        """Bind and serve in the background; returns the address bound (port 0 picks one)."""
        self.max_connections = min(self.max_connections, fd_budget())
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()

        def on_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            if "accept" in str(context.get("message", "")):  # EMFILE and the like: counted
                self._accept_errors.add(str(context.get("exception", "")))
            elif previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(on_error)
        self._server = await asyncio.start_server(
            self._client, self.host or None, self.port, reuse_address=True, limit=MAX_HEAD
        )
        sock = self._server.sockets[0].getsockname()
        self.port = sock[1]
        return str(sock[0]), int(sock[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for transport in list(self._open):
                transport.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def _admit(self, transport: asyncio.WriteTransport) -> _Connection | None:
        """Register a new connection, cutting one at the cap; None when this one is cut."""
        if len(self._open) >= self.max_connections:
            victim = min(
                (c for c in self._open.values() if c.phase != _ANSWER),
                key=lambda c: (c.phase, c.since),
                default=None,
            )
            self._shed.add(f"cap {self.max_connections}")
            if victim is None:
                transport.abort()
                return None
            victim.transport.abort()
            self._open.pop(victim.transport, None)
        conn = _Connection(transport, _HEAD, self.clock())
        self._open[transport] = conn
        return conn

    def _phase(self, conn: _Connection, phase: int) -> None:
        conn.phase, conn.since = phase, self.clock()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = self._admit(writer.transport)
        if conn is None:
            return
        try:
            for served in range(REQUESTS_PER_CONNECTION):
                wait = self.head_seconds if served == 0 else self.idle_seconds
                head = await asyncio.wait_for(_read_head(reader), wait)
                self._phase(conn, _ANSWER)
                status, ctype, body, extra = await self._answer(head)
                keep = _keep_alive(head) and served + 1 < REQUESTS_PER_CONNECTION
                method = head.split(b" ", 1)[0]
                headers = [
                    f"HTTP/1.1 {status} {_REASONS[status]}",
                    f"Content-Type: {ctype}",
                    f"Content-Length: {len(body)}",
                    "Connection: keep-alive" if keep else "Connection: close",
                    *extra,
                ]
                self._phase(conn, _WRITE)
                writer.write(("\r\n".join(headers) + "\r\n\r\n").encode())
                if method != b"HEAD":
                    writer.write(body)
                await asyncio.wait_for(writer.drain(), self.write_seconds)
                if not keep:
                    break
                self._phase(conn, _IDLE)
        except asyncio.CancelledError:
            pass  # shutting down: close quietly (3.11 logs a cancelled handler as an error)
        except (
            TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            OSError,
            ValueError,  # a line longer than the reader's limit
        ):
            writer.transport.abort()  # a client too slow or gone: no lingering close
        finally:
            self._open.pop(writer.transport, None)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _answer(self, head: bytes) -> tuple[int, str, bytes, list[str]]:
        request_line, _, header_text = head.partition(b"\r\n")
        parts = request_line.split(b" ")
        if len(parts) != 3:
            return 400, "text/plain", b"bad request\n", []
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if method not in (b"GET", b"HEAD"):
            return 405, "text/plain", b"only GET and HEAD\n", ["Allow: GET, HEAD"]
        if target == b"/metrics":
            published = self.pages.metrics
            if published is None:
                return 503, "text/plain", b"no snapshot yet\n", []
            gzipped = accepts_gzip(_header(header_text, b"accept-encoding"))
            body = published.ready(gzipped)
            if body is None:
                body = await asyncio.to_thread(published.body, gzipped)
            return 200, CONTENT_TYPE, body, ["Content-Encoding: gzip"] if gzipped else []
        if target == b"/-/healthy":
            return 200, "text/plain", b"OK\n", []
        if target == b"/-/ready":
            if self.pages.ready():
                return 200, "text/plain", b"ready\n", []
            return 503, "text/plain", b"not ready: sources starting\n", []
        if target == b"/":
            return 200, "text/html; charset=utf-8", _INDEX, []
        return 404, "text/plain", b"not found\n", []


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """The request line and headers, up to the empty line, joined by CRLF; lines may end in a
    bare LF too (RFC 9112 2.2)."""
    lines: list[bytes] = []
    size = 0
    while True:
        line = await reader.readline()
        if not line.endswith(b"\n"):
            raise asyncio.IncompleteReadError(line, None)
        size += len(line)
        if size > MAX_HEAD:
            raise asyncio.LimitOverrunError("request head too long", size)
        line = line.rstrip(b"\r\n")
        if not line:
            return b"\r\n".join(lines)
        lines.append(line)


def _header(text: bytes, name: bytes) -> bytes:
    for line in text.split(b"\r\n"):
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip().lower()
    return b""


def _keep_alive(head: bytes) -> bool:
    """Does the client want the connection kept (HTTP/1.1 unless `close`; 1.0 when asked), and
    can it be (no request body this server would have to skip)?"""
    request_line, _, header_text = head.partition(b"\r\n")
    version = request_line.rsplit(b" ", 1)[-1]
    tokens = {t.strip() for t in _header(header_text, b"connection").split(b",")}
    if _header(header_text, b"content-length") not in (b"", b"0"):
        return False
    if _header(header_text, b"transfer-encoding"):
        return False
    if version == b"HTTP/1.1":
        return b"close" not in tokens
    return version == b"HTTP/1.0" and b"keep-alive" in tokens


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
