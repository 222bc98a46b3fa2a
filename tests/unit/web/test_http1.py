"""exporter.web.http1: request heads taken from a buffer (CRLF or bare LF, pipelined, too long),
answer heads written, header values and keep-alive read as RFC 9112 says."""

from __future__ import annotations

import pytest

from exporter.web.http1 import (
    MAX_HEAD,
    HeadTooLong,
    answer_head,
    header,
    holds_head,
    keep_alive,
    take_head,
)


def test_a_head_is_taken_whole_with_crlf_between_its_lines() -> None:
    buffer = bytearray(b"GET / HTTP/1.1\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\n")
    assert take_head(buffer) == b"GET / HTTP/1.1\r\nHost: x"
    assert buffer == b"GET /metrics HTTP/1.1\r\n"  # (the next, pipelined: not all in yet)
    assert take_head(buffer) is None
    buffer += b"\n"  # a bare LF ends it too
    assert take_head(buffer) == b"GET /metrics HTTP/1.1"
    assert buffer == b""


def test_an_empty_line_alone_is_an_empty_head() -> None:
    buffer = bytearray(b"\r\n")
    assert take_head(buffer) == b""
    assert buffer == b""


def test_a_head_longer_than_max_head_is_refused_whole_or_not() -> None:
    with pytest.raises(HeadTooLong):
        take_head(bytearray(b"GET / HTTP/1.1\r\nX: " + b"v" * MAX_HEAD))  # (not all in)
    with pytest.raises(HeadTooLong):
        take_head(bytearray(b"GET / HTTP/1.1\r\nX: " + b"v" * MAX_HEAD + b"\r\n\r\n"))
    fits = b"GET / HTTP/1.1\r\nX: " + b"v" * (MAX_HEAD - 40) + b"\r\n\r\n"
    assert take_head(bytearray(fits)) is not None


def test_holds_head() -> None:
    assert holds_head(b"GET / HTTP/1.1\r\n\r\n")
    assert holds_head(b"GET / HTTP/1.1\n\n")
    assert not holds_head(b"GET / HTTP/1.1\r\nHost: x\r\n")


def test_an_answer_head() -> None:
    assert answer_head(200, "text/plain", 3, True, ["X-A: 1"]) == (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n"
        b"Connection: keep-alive\r\nX-A: 1\r\n\r\n"
    )
    assert answer_head(503, "text/plain", 0, False, []).endswith(
        b"Content-Length: 0\r\nConnection: close\r\n\r\n"
    )


def test_a_header_value_is_found_by_its_name_in_any_case() -> None:
    text = b"Host: x\r\nACCEPT-Encoding:  GZip \r\nAuthorization: Basic QQ=="
    assert header(text, b"accept-encoding") == b"gzip"
    assert header(text, b"authorization", False) == b"Basic QQ=="
    assert header(text, b"accept") == b""


@pytest.mark.parametrize(
    ("head", "kept"),
    [
        (b"GET / HTTP/1.1", True),
        (b"GET / HTTP/1.1\r\nConnection: close", False),
        (b"GET / HTTP/1.1\r\nConnection: Upgrade, close", False),
        (b"GET / HTTP/1.0", False),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive", True),
        (b"GET / HTTP/1.1\r\nContent-Length: 0", True),
        (b"GET / HTTP/1.1\r\nContent-Length: 5", False),  # (a body this server does not read)
        (b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked", False),
        (b"GET / HTTP/2", False),
    ],
)
def test_keep_alive(head: bytes, kept: bool) -> None:
    assert keep_alive(head) is kept
