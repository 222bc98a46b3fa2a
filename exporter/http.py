"""A small asyncio HTTP server: /metrics from memory, /-/healthy, /-/ready, and an index page.

A published snapshot is rendered when the first scrape asks for it, and gzipped when the first
scrape that accepts gzip does (in a worker thread: other requests are answered meanwhile), then
served from memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from exporter.collector import CONTENT_TYPE, Published

log = logging.getLogger(__name__)

MAX_HEAD = 16 * 1024  # request line and headers, bytes: a scraper sends a few hundred
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


@dataclass
class Pages:
    """What the server shows; the daemon swaps `metrics` in and sets `ready`."""

    metrics: Published | None = None
    ready: Callable[[], bool] = lambda: False


class HttpServer:
    def __init__(self, pages: Pages, host: str, port: int) -> None:
        self.pages = pages
        self.host, self.port = host, port
        self._server: asyncio.Server | None = None

    async def start(self) -> tuple[str, int]:
        """Bind and serve in the background; returns the address bound (port 0 picks one)."""
        self._server = await asyncio.start_server(
            self._client, self.host or None, self.port, reuse_address=True
        )
        sock = self._server.sockets[0].getsockname()
        self.port = sock[1]
        return str(sock[0]), int(sock[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(_read_head(reader), 10)
            status, ctype, body, extra = await self._answer(head)
            method = head.split(b" ", 1)[0]
            headers = [
                f"HTTP/1.1 {status} {_REASONS[status]}",
                f"Content-Type: {ctype}",
                f"Content-Length: {len(body)}",
                "Connection: close",
                *extra,
            ]
            writer.write(("\r\n".join(headers) + "\r\n\r\n").encode())
            if method != b"HEAD":
                writer.write(body)
            await writer.drain()
        except asyncio.CancelledError:
            pass  # shutting down: close quietly (3.11 logs a cancelled handler as an error)
        except (
            TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            ValueError,  # a line longer than the reader's limit
        ):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

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
            gzipped = b"gzip" in _header(header_text, b"accept-encoding")
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
