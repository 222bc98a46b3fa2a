"""HTTP/1.1 framing: request heads taken from what a client sent, answer heads written.

Pure of connections and of what is answered (connection.py and routes.py): bytes in, bytes out.
A request head is the request line and its header lines, up to the empty line that ends it
(CRLF, or a bare LF: RFC 9112 2.2), handed on with CRLF between its lines. No request body is
read: a request that announces one is answered, then its connection closed (`keep_alive`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_HEAD = 16 * 1024  # request line and headers, bytes: a scraper sends a few hundred
# The status codes this server answers with, and their reason phrases.
REASON_PHRASES = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_HEAD_END = re.compile(rb"(?:^|\n)\r*\n")

Answer = tuple[int, str, bytes, list[str]]  # status, content type, body, more header lines


class HeadTooLong(ValueError):
    """A request head longer than MAX_HEAD: its connection is cut, nothing answered."""


def take_head(buffer: bytearray) -> bytes | None:
    """The first whole request head in `buffer`, taken off it (its lines joined by CRLF); None
    while it is not all in. HeadTooLong when it is, or would be, longer than MAX_HEAD."""
    end = _HEAD_END.search(buffer)
    if end is None or end.end() > MAX_HEAD:
        if end is not None or len(buffer) > MAX_HEAD:
            raise HeadTooLong
        return None
    lines = bytes(buffer[: end.start()]).split(b"\n")
    del buffer[: end.end()]
    return b"\r\n".join(line.rstrip(b"\r\n") for line in lines)


def holds_head(data: bytes) -> bool:
    """Does `data` (the first bytes a client sent) hold a whole request head?"""
    return _HEAD_END.search(data) is not None


def answer_head(
    status: int, content_type: str, length: int, keep: bool, extra: Iterable[str]
) -> bytes:
    """An answer's status line and header lines, and the empty line after them."""
    lines = [
        f"HTTP/1.1 {status} {REASON_PHRASES[status]}",
        f"Content-Type: {content_type}",
        f"Content-Length: {length}",
        "Connection: keep-alive" if keep else "Connection: close",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def header(text: bytes, name: bytes, lower: bool = True) -> bytes:
    """The value of header `name` (lower case) in a head's header lines (CRLF between them),
    stripped, and lowered unless `lower` is False; b"" when it is absent."""
    for line in text.split(b"\r\n"):
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip().lower() if lower else value.strip()
    return b""


def keep_alive(head: bytes) -> bool:
    """Does the client want the connection kept (HTTP/1.1 unless `close`; 1.0 when asked), and
    can it be (no request body this server would have to skip)?"""
    request_line, _, header_text = head.partition(b"\r\n")
    version = request_line.rsplit(b" ", 1)[-1]
    tokens = {t.strip() for t in header(header_text, b"connection").split(b",")}
    if header(header_text, b"content-length") not in (b"", b"0"):
        return False
    if header(header_text, b"transfer-encoding"):
        return False
    if version == b"HTTP/1.1":
        return b"close" not in tokens
    return version == b"HTTP/1.0" and b"keep-alive" in tokens
