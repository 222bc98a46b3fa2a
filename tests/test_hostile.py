"""What comes from outside cannot take the daemon down: hostile clocks, clients and configs, and a
careless operator (issue 14). Each case runs the real daemon as a process where it is about the
process (its exit, its log), and the pure parts directly where it is about a value."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.accounting import SECOND, Accounting
from exporter.checkpoint import NAME as CHECKPOINT_NAME
from exporter.checkpoint import Checkpoint
from exporter.config import Config, FileNode
from exporter.daemon import Daemon
from exporter.http import HttpServer, Pages, accepts_gzip
from exporter.kinds import DEFAULT_RULES, Kinds
from exporter.logline import Event, EventKind, Interval, Record
from exporter.times import MAX_TIME_US

from support.daemon_process import DaemonProcess, file_nodes

NODE = "node0"

# -- one daemon per state directory -----------------------------------------------------------


def test_a_second_daemon_on_the_same_state_dir_exits_naming_the_first(tmp_path: Path) -> None:
    dump = tmp_path / "node0.log"
    dump.write_text("")
    settings = {"nodes": file_nodes({"node0": dump}), "state_dir": str(tmp_path / "state")}
    with DaemonProcess(tmp_path / "first", settings) as first:
        first.start()
        with DaemonProcess(tmp_path / "second", settings) as second:
            proc = second.launch()
            assert proc.wait(30) == 1
            text = second.log_text()
            said = [line for line in text.splitlines() if "in use" in line]
            assert len(said) == 1, text
            assert f"PID {first.pid}" in said[0] and str(tmp_path / "state") in said[0]
            assert "Traceback" not in text and "serving" not in text
        assert first.metrics()  # the first one serves on, untouched
        first.stop()
        with DaemonProcess(tmp_path / "third", settings) as third:
            third.start()  # the lock went with the first one
            third.stop()


# -- clocks ------------------------------------------------------------------------------------

T0 = 1_790_062_375_000_000  # 2026-09-22T07:32:55Z
AHEAD_10Y = 10 * 365 * 86_400 * SECOND


def request(start_us: int, seconds: float, task: int) -> list[Record]:
    end_us = start_us + int(seconds * SECOND)
    return [
        Event(NODE, start_us, EventKind.STARTED, 4242, 0, task),
        Interval(NODE, start_us, end_us, 100, slot=0, task=task, pid=4242),
    ]


def test_an_entry_stamped_years_ahead_shows_as_clock_skew_until_the_times_are_in_line() -> None:
    acc = Accounting([NODE], Kinds(DEFAULT_RULES), origin_us=T0)
    now = T0 + 60 * SECOND
    acc.add_all(request(T0 + 10 * SECOND, 5, 1))
    acc.line_read(NODE, now + 4 * SECOND, now_us=now)  # within the allowance: in line
    assert acc.snapshot().nodes[0].clock_skew_us == 0
    future = now + AHEAD_10Y  # one entry from a broken clock
    acc.add_all([Interval(NODE, future - SECOND, future, 7, slot=1, task=2, pid=4242)])
    acc.line_read(NODE, future, now_us=now)
    assert [n.clock_skew_us for n in acc.snapshot().nodes] == [AHEAD_10Y]
    acc.line_read(NODE, now + SECOND, now_us=now + SECOND)  # the next batch is in line
    assert acc.snapshot().nodes[0].clock_skew_us == 0
    assert sum(c.requests for c in acc.nodes[NODE].kinds.values()) == 2  # counted as it is


@pytest.mark.parametrize(
    "field, value",
    [
        ("watermark_us", 2**64),
        ("watermark_us", MAX_TIME_US + 1),
        ("origin_us", -(10**17)),
        ("watermark_us", "1790062375000000"),
    ],
)
def test_a_checkpoint_time_out_of_range_is_set_aside_not_crashed_on(
    tmp_path: Path, field: str, value: object
) -> None:
    dump = tmp_path / "node0.log"
    dump.write_text("")
    cfg = Config(nodes=(FileNode(NODE, dump),), state_dir=tmp_path / "state", listen_port=0)
    first = Daemon(cfg)
    (tmp_path / "state").mkdir()
    state = json.loads(first.state())
    state["accounting"][field] = value
    (tmp_path / "state" / CHECKPOINT_NAME).write_bytes(Checkpoint.encode(state))
    again = Daemon(cfg)
    again.resume()  # never raises
    assert again.acc.watermark_us == again.since_us
    aside = list((tmp_path / "state").glob(f"{CHECKPOINT_NAME}.unusable-*"))
    assert len(aside) == 1 and not (tmp_path / "state" / CHECKPOINT_NAME).exists()


# -- HTTP ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, gzip",
    [
        (b"gzip", True),
        (b"gzip, deflate, br", True),
        (b"deflate, gzip;q=0.5", True),
        (b"gzip;q=0", False),
        (b"gzip;q=0, identity;q=1", False),
        (b"gzip; q=0.000", False),
        (b"gzip;q=0.001", True),
        (b"*", True),
        (b"*;q=0", False),
        (b"gzip;q=0, *", False),  # gzip named: the star does not bring it back
        (b"identity", False),
        (b"", False),
        (b"gzip;q=2", False),  # malformed: not accepted
        (b"gzip;q=nan", False),
        (b"x-gzip", True),
        (b"gzipx", False),
    ],
)
def test_accept_encoding_is_read_with_its_q_values(value: bytes, gzip: bool) -> None:
    assert accepts_gzip(value) is gzip


async def _serve(cap: int) -> tuple[HttpServer, int]:
    server = HttpServer(
        Pages(ready=lambda: True), "127.0.0.1", 0, max_connections=cap, head_seconds=60
    )
    _, port = await server.start()
    return server, port


async def _get(port: int, target: bytes, extra: bytes = b"") -> tuple[bytes, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + extra + b"\r\n"
    )
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


def test_at_the_connection_cap_the_slowest_head_is_cut_and_a_scraper_gets_in() -> None:
    async def main() -> None:
        server, port = await _serve(4)
        try:
            slow = []
            for _ in range(4):  # four clients that never finish their request head
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET /-/ready HTTP/1.1\r\n")
                slow.append((reader, writer))
            await asyncio.wait_for(_until(lambda: server.connections == 4), 5)
            for _ in range(10):  # a scraper, again and again: always answered
                head, body = await _get(port, b"/-/ready")
                assert head.startswith(b"HTTP/1.1 200") and body == b"ready\n"
                assert server.connections <= 4
            # the first scraper cut the oldest slow one (closed without an answer); the rest
            # found room: the other slow ones are still open
            assert await asyncio.wait_for(slow[0][0].read(), 5) == b""
            await asyncio.wait_for(_until(lambda: server.connections == 3), 5)
            assert not any(r.at_eof() for r, _ in slow[1:])
        finally:
            await server.close()

    asyncio.run(main())


def test_a_head_that_does_not_come_in_time_is_cut() -> None:
    async def main() -> None:
        server = HttpServer(Pages(), "127.0.0.1", 0, head_seconds=0.2)
        _, port = await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\n")  # and nothing more
            assert await asyncio.wait_for(reader.read(), 5) == b""
            await asyncio.wait_for(_until(lambda: server.connections == 0), 5)
            writer.close()
        finally:
            await server.close()

    asyncio.run(main())


def test_a_well_behaved_scraper_keeps_its_connection_alive() -> None:
    async def main() -> None:
        server, port = await _serve(4)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(3):  # HTTP/1.1: one connection, three answers
                writer.write(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                assert b"Connection: keep-alive" in head and b"Content-Length: 3" in head
                assert await reader.readexactly(3) == b"OK\n"
            writer.write(b"GET /-/healthy HTTP/1.0\r\n\r\n")  # 1.0 without keep-alive: closed
            data = await asyncio.wait_for(reader.read(), 5)
            assert b"Connection: close" in data and data.endswith(b"OK\n")
            writer.close()
        finally:
            await server.close()

    asyncio.run(main())


async def _until(check: Callable[[], bool]) -> None:
    while not check():
        await asyncio.sleep(0.01)
