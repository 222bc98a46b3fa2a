"""What comes from outside cannot take the daemon down: hostile clocks, clients and configs, and a
careless operator (issue 14). Each case runs the real daemon as a process where it is about the
process (its exit, its log), and the pure parts directly where it is about a value."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.accounting.accounting import Accounting
from exporter.accounting.settings import CLOCK_ALLOWANCE_US
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import Batch, Event, EventKind, Interval, LogLine, Record
from exporter.base.times import MAX_TIME_US, SECOND, iso
from exporter.checkpoint.codec import encode, state_of
from exporter.checkpoint.store import NAME as CHECKPOINT_NAME
from exporter.commands.demo import DemoLine, short_iso
from exporter.config.errors import ConfigError
from exporter.config.load import parse
from exporter.config.schema import Config
from exporter.daemon.daemon import Daemon
from exporter.ingest.step import apply_batch
from exporter.parse.parser import PID_GONE_US, Parser
from exporter.sources.file import FileNode
from exporter.web.routes import Site, accepts_gzip
from exporter.web.server import HttpServer

from support.daemon_process import DaemonProcess, file_nodes
from support.scrape import Samples, sample, total
from support.settings import default_settings
from support.tools import wait_for

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
    acc = Accounting([NODE], default_settings(Kinds(DEFAULT_RULES)), origin_us=T0)
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


def test_an_entry_stamped_years_ahead_never_moves_the_watermark_past_now() -> None:
    """Before, the watermark jumped ten years ahead with it, and every request after was late:
    4.5 s of 18 s kept."""
    acc = Accounting([NODE], default_settings(Kinds(DEFAULT_RULES)), origin_us=T0)
    now = T0 + 60 * SECOND
    acc.source_state(NODE, up=True, caught_up=True, now_us=now)
    acc.add_all(request(T0 + 10 * SECOND, 5, 1))  # (a server that logs launch lines)
    future = now + AHEAD_10Y
    acc.add_all([Interval(NODE, future - SECOND, future, 7, slot=1, task=2, pid=4242)])
    acc.line_read(NODE, future, now_us=now)
    acc.advance(now)
    assert acc.watermark_us <= now + CLOCK_ALLOWANCE_US
    later = now + 30 * SECOND  # then an 18 s request, logged in line with the clock
    acc.add_all(request(now + 12 * SECOND, 18, 3))
    acc.line_read(NODE, later, now_us=later)
    acc.advance(later)
    snap = acc.snapshot()
    assert snap.nodes[0].late == 0
    assert snap.nodes[0].busy_us == 23 * SECOND  # all of both (none of the future one yet)
    assert acc.watermark_us <= later + CLOCK_ALLOWANCE_US
    assert sum(snap.concurrency_us) == acc.watermark_us - T0  # no idle seconds from the future


def test_a_node_logging_ten_years_ahead_leaves_the_others_and_its_own_requests_exact(
    tmp_path: Path,
) -> None:
    """The daemon as a process: node0's journal holds one entry stamped ten years ahead between
    requests logged in line with the clock. Every request of both nodes is counted, their busy
    seconds are exact, the watermark stays at the clock, and the log says it once."""
    now = int(time.time()) * SECOND
    start = now - 20 * 60 * SECOND
    dumps = {n: tmp_path / f"{n}.log" for n in (NODE, "node1")}
    busy: dict[str, int] = {}
    for k, (node, path) in enumerate(dumps.items()):
        lines = []
        for i in range(10):  # a 5 s request every minute
            end = start + (i + 1) * 60 * SECOND + k * SECOND
            lines += [
                DemoLine(end - 5 * SECOND, 4242, LAUNCH.format(s=0, t=i)),
                DemoLine(end, 4242, TOTAL.format(s=0, t=i).replace("1000.00", "5000.00")),
                DemoLine(end + 1000, 4242, RELEASE.format(s=0, t=i)),
            ]
            if node == NODE and i == 4:  # the broken clock
                lines.append(DemoLine(end + AHEAD_10Y, 4242, TOTAL.format(s=1, t=99)))
        busy[node] = 10 * 5 * SECOND
        path.write_text("".join(short_iso(node, line) + "\n" for line in lines))
    settings = {"nodes": file_nodes(dumps), "since": iso(start)}
    with DaemonProcess(tmp_path / "d", settings) as d:
        d.start()

        def settled() -> Samples | None:
            m = d.metrics()
            wm = sample(m, "smllm_accounted_until_timestamp_seconds") or 0
            return m if wm * SECOND > start + 11 * 60 * SECOND else None

        m = wait_for(settled, 30, "the watermark past both nodes' requests")
        assert (sample(m, "smllm_accounted_until_timestamp_seconds") or 0) < time.time() + 5
        assert total(m, "smllm_requests_total", node=NODE) == 11  # the future one too
        assert total(m, "smllm_requests_total", node="node1") == 10
        for node, us in busy.items():
            assert sample(m, "smllm_node_busy_seconds_total", node=node) == us / SECOND
            assert sample(m, "smllm_late_intervals_total", node=node) == 0
        assert (sample(m, "smllm_source_clock_skew_seconds", node=NODE) or 0) > 9 * 365 * 86_400
        # its idle alert still works: its last request end is no later than the clock
        last_end = sample(m, "smllm_node_last_request_end_timestamp_seconds", node=NODE)
        assert last_end is not None and last_end < time.time() + 5
        assert d.ready_or_gone() == "ready"  # still running
        said = [line for line in d.log_text().splitlines() if "ahead of this clock" in line]
        assert len(said) == 1, d.log_text()


# -- two PIDs under one unit, and state that would grow without bound ---------------------------

LAUNCH = "slot launch_slot_: id  {s} | task {t} | processing task, is_child = 0"
TOTAL = "slot print_timing: id  {s} | task {t} |       total time =    1000.00 ms /   500 tokens"
RELEASE = "slot      release: id  {s} | task {t} | stop processing: n_tokens = 500, truncated = 0"


def _through(lines: list[tuple[int, int, str]], flush_at_us: int) -> Accounting:
    """(ms, pid, message) lines of NODE through its parser and the accounting, one batch a
    line, time passing and the watermark moving after each as the daemon's ticks do."""
    parser, acc = (
        Parser(NODE),
        Accounting([NODE], default_settings(Kinds(DEFAULT_RULES)), origin_us=T0),
    )
    for ms, pid, msg in lines:
        line = LogLine(NODE, T0 + ms * 1000, "", pid, msg)
        acc.add_all(parser.feed_all((line,)))
        acc.line_read(NODE, line.time_us)
        acc.add_all(parser.flush(line.time_us))
        acc.advance(line.time_us)
    acc.add_all(parser.flush(flush_at_us))
    return acc


def test_two_pids_interleaving_are_one_restart_and_nothing_aborted() -> None:
    """Before: three restarts that aborted two requests which both completed."""
    old, new = 1111, 2222
    long_total = TOTAL.format(s=0, t=57).replace("1000.00", "30000.00")
    acc = _through(
        [
            (0, old, LAUNCH.format(s=0, t=57)),  # a 30 s request
            (5, new, LAUNCH.format(s=0, t=0)),  # the new server's first line
            (1005, new, TOTAL.format(s=0, t=0)),
            (1006, new, RELEASE.format(s=0, t=0)),
            (2000, new, LAUNCH.format(s=0, t=1)),
            (3000, new, TOTAL.format(s=0, t=1)),
            (30_000, old, long_total),  # the old one's last block, long after
            (30_001, old, RELEASE.format(s=0, t=57)),
        ],
        T0 + 60 * SECOND,  # (and a minute passes)
    )
    ns = acc.nodes[NODE]
    untimed = sum(n for n, _ in ns.untimed.values())  # (cancelled, error, untimed, lost)
    assert (ns.restarts, ns.aborted, untimed, ns.late) == (1, 0, 0, 0)
    assert sum(c.requests for c in ns.kinds.values()) == 3 and not ns.in_flight


def test_an_old_pid_that_has_gone_aborts_what_it_held_once() -> None:
    acc = _through(
        [(0, 1111, LAUNCH.format(s=0, t=57)), (5, 2222, LAUNCH.format(s=0, t=0))],
        T0 + 5000 + PID_GONE_US + 1,  # (silent since the new one's first line)
    )
    ns = acc.nodes[NODE]
    assert (ns.restarts, ns.aborted) == (1, 1)
    assert list(ns.in_flight) == [(0, 0)]  # the new server's request is still running


def test_one_line_stamped_years_ahead_decides_no_stop_and_no_server_gone() -> None:
    """Stops wait 1 s for their timing block, older PIDs 10 minutes for their lines: a line
    stamped ten years ahead must not make that time pass (the daemon bounds it by its now)."""
    parser, acc = (
        Parser(NODE),
        Accounting([NODE], default_settings(Kinds(DEFAULT_RULES)), origin_us=T0),
    )
    now = T0 + 60 * SECOND

    def batch(*lines: tuple[int, int, str]) -> None:
        log = tuple(LogLine(NODE, t, "", pid, msg) for t, pid, msg in lines)
        apply_batch(Batch(NODE, log, entries=len(log), newest_us=log[-1].time_us), parser, acc, now)

    batch((now - 3000, 1111, LAUNCH.format(s=1, t=57)))
    batch((now - 2000, 2222, LAUNCH.format(s=0, t=1)), (now - 1000, 2222, RELEASE.format(s=0, t=1)))
    batch((now + AHEAD_10Y, 2222, TOTAL.format(s=2, t=9)))  # the broken clock
    batch((now, 2222, TOTAL.format(s=0, t=1)), (now + 1, 1111, TOTAL.format(s=1, t=57)))
    ns = acc.nodes[NODE]
    untimed = sum(n for n, _ in ns.untimed.values())  # (no release decided untimed)
    assert (untimed, ns.aborted, ns.restarts) == (0, 0, 1)
    assert sum(c.requests for c in ns.kinds.values()) == 3
    # and the future request's busy time waits in no list (nor the checkpoint) for ten years
    assert all(s <= now + CLOCK_ALLOWANCE_US for s, _, _, _ in state_of(acc)["pending"])


def test_launches_whose_ends_never_come_stay_within_the_slots() -> None:
    """50,000 launch lines whose timing lines never parse: in flight stays within the slots
    the server logged (plus a margin), not 50,000."""
    lines = [(0, 1111, "srv    load_model: initializing slots, n_slots = 1")]
    for k in range(50_000):
        lines.append((1 + 2 * k, 1111, LAUNCH.format(s=0, t=k)))
        lines.append((2 + 2 * k, 1111, TOTAL.format(s=0, t=k).replace("1000.00", "1x00.00")))
    acc = _through(lines, T0 + 200 * SECOND)
    ns = acc.nodes[NODE]
    assert len(ns.in_flight) == 1 and ns.parse_errors == 50_000


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
def test_a_request_body_quoting_slot_lines_is_no_request(compiled: bool) -> None:
    """A debug line logs a client's request whose text quotes a launch, a timing and a release
    line (the client pasted a log): only a slot line that opens its line (after the elapsed or
    wall-clock prefix) is a request."""
    quoted = " ".join(f(s=0, t=7) for f in (LAUNCH.format, TOTAL.format, RELEASE.format))
    lines = [
        f'srv  log_server_r: request:  {{"messages": [{{"content": "{quoted}"}}]}}',
        f"0.01.302.306 D srv  log_server_r: request body: {quoted}",
        f"0.01.302.307 I {TOTAL.format(s=0, t=8)}",  # the elapsed prefix: a request
        TOTAL.format(s=1, t=9),  # no prefix: a request
    ]
    parser = Parser(NODE)
    feed = parser.feed_all if compiled else parser.feed_reference
    out = feed(tuple(LogLine(NODE, T0 + i * SECOND, "", 4242, m) for i, m in enumerate(lines)))
    out += parser.flush(T0 + 60 * SECOND)
    assert [(type(r), r.task) for r in out] == [(Interval, 8), (Interval, 9)]


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
    (tmp_path / "state" / CHECKPOINT_NAME).write_bytes(encode(state))
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
        Site(ready=lambda: True), "127.0.0.1", 0, max_connections=cap, head_seconds=60
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
        slow: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        try:
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
            for _, writer in slow:
                writer.close()
            await server.close()

    asyncio.run(main())


def test_a_head_that_does_not_come_in_time_is_cut() -> None:
    async def main() -> None:
        server = HttpServer(Site(), "127.0.0.1", 0, head_seconds=0.2)
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


def test_slots_the_clock_allowance_and_the_number_of_kinds_are_bounded() -> None:
    """2**kinds mix series exist from start-up: 30 kinds would be a billion of them."""
    kinds = "".join(f"  - {{name: k{i}, min_tokens: {i}}}\n" for i in range(9))
    text = (
        "slots: 0\nclock_allowance_seconds: 100000000\nkinds:\n"
        + kinds
        + "nodes:\n  - {name: a, source: file, path: /x}\n"
    )
    with pytest.raises(ConfigError) as e:
        parse(text, "c.yaml")
    assert [p.split(": ")[1] for p in e.value.problems] == [
        "slots",
        "clock_allowance_seconds",
        "kinds",
    ]
    assert "at most 8 kinds, got 9" in e.value.problems[2]
    ok = parse("slots: 3\nclock_allowance_seconds: 60\nnodes: [{name: a, source: file, path: /x}]")
    assert (ok.slots, ok.clock_allowance_seconds) == (3, 60)
