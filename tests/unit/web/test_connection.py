"""exporter.web.connection: one connection's requests answered in turn over a stand-in transport
(no socket): keep-alive, pipelining, Connection: close, HEAD, a head too long, an answer the
client does not take at once, and where each leaves the connection's deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from exporter.exposition.published import Published
from exporter.web.connection import WRITE_CHUNK, Connection
from exporter.web.deadlines import HEAD, IDLE, WRITE, Deadlines, Phase
from exporter.web.gate import Gate
from exporter.web.routes import Page, Site

from support.tools import turn

HEALTHY = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n"
    b"Connection: keep-alive\r\n\r\nOK\n"
)


class Transport:
    """What a connection hands its answers to; `taking` False: the kernel takes no more."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.sent = bytearray()
        self.taking = True
        self.closed = self.aborted = self.reading_paused = False

    def write(self, data: bytes | memoryview) -> None:
        self.sent += data
        if not self.taking:
            self.conn.pause_writing()

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        self.reading_paused = False


class NoTimers:
    def call_later(self, delay: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return cast(asyncio.TimerHandle, cast(Any, Handle()))


class Handle:
    def cancel(self) -> None:
        pass


class Host:
    def __init__(self, site: Site) -> None:
        self.site = site
        self.gate = Gate()
        self.deadlines = Deadlines(lambda: 0.0)
        self.deadlines.loop = cast(asyncio.AbstractEventLoop, cast(Any, NoTimers()))
        self.closing = False
        self.gone: list[Connection] = []

    def making(self, page: Page) -> asyncio.Future[bytes]:
        raise AssertionError("no page is made here")

    def lost(self, conn: Connection) -> None:
        self.gone.append(conn)


class Made:
    """/metrics of `size` bytes, rendered already."""

    def __init__(self, size: int) -> None:
        self.made = b"x" * size

    def ready(self, gzipped: bool, openmetrics: bool = False) -> bytes:
        return self.made


def phase(conn: Connection) -> Phase:
    """(Read through a call: what each step changed is looked at afresh.)"""
    return conn.phase


async def resumed(conn: Connection) -> None:
    """The transport takes writes again: resume_writing, and the loop's turn that goes on."""
    conn.resume_writing()
    await turn()


def connected(site: Site | None = None) -> tuple[Connection, Transport]:
    host = Host(site or Site(ready=lambda: True))
    conn = Connection(host, whole=False)
    host.deadlines.enter(conn, HEAD)
    transport = Transport(conn)
    conn.connection_made(cast(asyncio.Transport, cast(Any, transport)))
    return conn, transport


def test_a_request_is_answered_and_the_connection_kept_idle() -> None:
    conn, transport = connected()
    conn.data_received(b"GET /-/healthy HTTP/1.1\r\n")
    assert transport.sent == b"" and phase(conn) == HEAD
    conn.data_received(b"\r\n")
    assert transport.sent == HEALTHY
    assert phase(conn) == IDLE and not transport.closed


def test_pipelined_requests_are_answered_in_turn() -> None:
    conn, transport = connected()
    conn.data_received(b"GET /-/healthy HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\n")
    first, _, second = bytes(transport.sent).partition(b"OK\n")
    assert first + b"OK\n" == HEALTHY
    assert second.startswith(b"HTTP/1.1 404 Not Found\r\n") and second.endswith(b"not found\n")


def test_connection_close_closes_after_the_answer() -> None:
    conn, transport = connected()
    conn.data_received(b"GET /-/ready HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert b"Connection: close\r\n" in transport.sent and transport.sent.endswith(b"ready\n")
    assert transport.closed and phase(conn) == WRITE  # (its FIN under write_seconds)


def test_head_gets_no_body() -> None:
    conn, transport = connected()
    conn.data_received(b"HEAD /-/healthy HTTP/1.1\r\n\r\n")
    assert transport.sent == HEALTHY.removesuffix(b"OK\n")


def test_a_head_too_long_is_cut_unanswered() -> None:
    conn, transport = connected()
    conn.data_received(b"GET / HTTP/1.1\r\nX: " + b"v" * 20_000)
    assert transport.aborted and transport.sent == b"" and conn.gone


def test_a_client_that_is_done_sending_gets_its_answers_then_the_end() -> None:
    conn, transport = connected()
    conn.data_received(b"GET /-/healthy HTTP/1.1\r\n\r\nGET /-/he")
    assert conn.eof_received()  # (plain HTTP: kept open for the answers)
    assert transport.sent == HEALTHY and transport.closed


def test_an_answer_not_taken_waits_in_write_then_goes_on() -> None:
    size = 3 * WRITE_CHUNK
    conn, transport = connected(Site(metrics=cast(Published, Made(size)), ready=lambda: True))
    transport.taking = False
    conn.data_received(b"GET /metrics HTTP/1.1\r\n\r\nGET /-/healthy HTTP/1.1\r\n\r\n")
    assert phase(conn) == WRITE and len(transport.sent) == WRITE_CHUNK  # one piece only
    transport.taking = True
    asyncio.run(resumed(conn))
    head, _, rest = bytes(transport.sent).partition(b"\r\n\r\n")
    assert f"Content-Length: {size}".encode() in head
    assert rest == b"x" * size + HEALTHY  # (then the pipelined one)
    assert phase(conn) == IDLE


def test_lost_cancels_what_is_under_way_and_tells_the_host() -> None:
    conn, _ = connected()
    conn.connection_lost(None)
    host = cast(Host, conn.host)
    assert conn.gone and host.gone == [conn]
