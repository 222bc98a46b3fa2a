"""The local journal source on real journal files: written by Debian's systemd-journal-remote
from export format (no journald needed) and read through systemd-python, as in production.

Covered: what `step` reads (only the unit's entries, counts, newest time, cursor, caught-up),
`since`, resuming after a cursor (the entry at the cursor is not read twice), a vacuumed cursor
(resumes from its time, with a warning and a gap, inventing nothing), other units interleaved,
non-UTF-8 and binary MESSAGE, `run()` following a directory while journal-remote appends and a
second file appears, the daemon killed with SIGKILL mid-stream and started again, and `report`
on journal nodes against `--input` dumps of the same entries.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import Batch, Interval
from exporter.base.times import SECOND
from exporter.config.schema import Config
from exporter.daemon.daemon import Daemon
from exporter.parse.parser import Parser
from exporter.sources.journal import JournalNode

from support.dumps import dump_lines, report_of_dumps, window_batches
from support.journals import (
    BOOT_ID,
    IDLE,
    LAUNCH,
    NOISE,
    OTHER,
    RELEASE,
    T0,
    UNIT,
    UNIT_B,
    Entry,
    JournalWriter,
    compare,
    ent,
    era_c_block,
    era_d_total,
    iso,
    journal_json,
    lines_of,
    relevant,
    require_journal_tools,
    workload,
    write_journal,
)
from support.scrape import Samples, http_get, parse_metrics, sample
from support.tools import free_port, wait_for

if TYPE_CHECKING:
    from exporter.sources.journalreader import JournalSource

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def journal_tools() -> None:
    """systemd-journal-remote, journalctl and systemd-python, or fail in CI / skip elsewhere."""
    require_journal_tools()


# -- journal files written by systemd-journal-remote ------------------------------------------


# -- realistic llama.cpp lines ------------------------------------------------------------------


# -- the source, driven step by step ----------------------------------------------------------


def journal_source(**kw: Any) -> JournalSource:
    from exporter.sources.journalreader import JournalSource

    kw.setdefault("since_us", 0)
    return JournalSource(kw.pop("node", "n"), kw.pop("unit", UNIT), **kw)


@contextlib.contextmanager
def opened(src: JournalSource) -> Iterator[JournalSource]:
    src.open()
    try:
        yield src
    finally:
        src.close()


def read_through(src: JournalSource) -> list[Batch]:
    """Batches until the source says it has read everything its journal holds."""
    out: list[Batch] = []
    for _ in range(10_000):
        batch = src.step()
        if batch is None:
            return out
        out.append(batch)
        if batch.caught_up:
            return out
    pytest.fail("the source never caught up")


def small_journal() -> list[Entry]:
    """Two requests of the unit (era D and era C), a progress line, noise, and another unit's
    timing lines in between; one entry with no _PID."""
    t = T0
    return [
        ent(t, LAUNCH.format(36)),
        ent(
            t + 10, "slot print_timing: id  0 | task 36 | prompt processing, n_tokens = 512", OTHER
        ),
        ent(t + 20, NOISE),
        ent(t + 4_535_450, era_d_total(36, 505, 453_545)),
        ent(t + 4_535_460, era_d_total(99, 900, 100_000), OTHER, pid=999),
        ent(t + 4_535_480, RELEASE.format(36, 505)),
        ent(t + 5 * SECOND, IDLE, pid=None),
        ent(t + 6 * SECOND, LAUNCH.format(37)),
        ent(t + 6 * SECOND + 10, "slot update_slots: id  0 | task 37 | n_gen = 1"),
        *(
            ent(t + 9 * SECOND + 10 * i, m)
            for i, m in enumerate([RELEASE.format(37, 129), *era_c_block(37, 110, 19, 300_000)])
        ),
        ent(t + 9 * SECOND + 100, LAUNCH.format(5), OTHER),
        ent(t + 10 * SECOND, IDLE),
    ]


def unit_cursors(*args: str, unit: str = UNIT) -> list[str]:
    return [str(r["__CURSOR"]) for r in journal_json(*args, f"_SYSTEMD_UNIT={unit}")]


# -- 0. the test journals are what they claim to be -----------------------------------------


def test_journal_remote_stores_every_field_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "n.journal"
    first = [
        ent(T0, "plain text"),
        ent(T0 + 1, "caf\u00e9 UTF-8"),
        ent(T0 + 2, b"not UTF-8 \xff\xfe"),
        ent(T0 + 3, b"with a NUL \x00 and \r\n a CR LF"),
        ent(T0 + 4, "two\nlines", OTHER, pid=None),
    ]
    write_journal(path, first)
    got = journal_json("--file", str(path))
    for e, rec in zip(first, got, strict=True):
        msg = rec["MESSAGE"]
        assert (msg.encode() if isinstance(msg, str) else bytes(msg)) == e.message
        assert int(rec["__REALTIME_TIMESTAMP"]) == e.time_us
        assert rec["_SYSTEMD_UNIT"] == e.unit and rec["_BOOT_ID"] == BOOT_ID
        assert rec.get("_PID") == (None if e.pid is None else str(e.pid))
    # A second run of journal-remote on the same output file appends to it: same file
    # (seqnum id), the first entries untouched, the new ones after them.
    write_journal(path, [ent(T0 + 10, "appended 1"), ent(T0 + 11, "appended 2")])
    again = journal_json("--file", str(path))
    assert [r["__CURSOR"] for r in again[:5]] == [r["__CURSOR"] for r in got]
    assert [r["MESSAGE"] for r in again[5:]] == ["appended 1", "appended 2"]
    assert len({r["__CURSOR"].split(";")[0] for r in again}) == 1


# -- 1. step: the unit only, counts, newest time, cursor, caught up; since ----------------------


@pytest.mark.parametrize("batch", [1, 3, 100])
def test_step_reads_the_unit_only_with_counts_time_and_cursor(tmp_path: Path, batch: int) -> None:
    path = tmp_path / "n.journal"
    entries = small_journal()
    write_journal(path, entries)
    mine = [e for e in entries if e.unit == UNIT]
    cursors = unit_cursors("--file", str(path))
    assert len(cursors) == len(mine)

    with opened(journal_source(files=(path,), batch=batch)) as src:
        batches = read_through(src)
        assert src.step() is None  # nothing new, and it said so already
    read = 0
    for b in batches:
        assert b.node == "n" and b.up and not b.gap
        assert b.entries == min(batch, len(mine) - read)
        read += b.entries
        assert b.caught_up == (b.entries < batch)
        if not b.entries:  # a full batch cannot know it was the last: an empty one says so
            assert b is batches[-1] and b.newest_us is None and not b.lines
            assert b.position == cursors[-1]
            continue
        assert b.newest_us == mine[read - 1].time_us
        assert b.position == cursors[read - 1]
        got = [x.time_us for x in b.lines]
        assert got == [e.time_us for e in mine[read - b.entries : read] if relevant(e.message)]
    assert read == len(mine)
    assert batches[-1].caught_up
    assert [x for b in batches for x in b.lines] == lines_of(entries)


def test_since_seeks_to_the_window(tmp_path: Path) -> None:
    path = tmp_path / "n.journal"
    entries = small_journal()
    write_journal(path, entries)
    mine = [e for e in entries if e.unit == UNIT]
    for k in (0, 3, len(mine) - 1):
        for since in (mine[k].time_us, mine[k].time_us - 1):  # on an entry, or just before
            with opened(journal_source(files=(path,), since_us=since)) as src:
                batches = read_through(src)
            assert sum(b.entries for b in batches) == len(mine) - k
            assert [x for b in batches for x in b.lines] == lines_of(mine[k:])
    with opened(journal_source(files=(path,), since_us=mine[-1].time_us + 1)) as src:
        (empty,) = read_through(src)
    assert empty.entries == 0 and empty.caught_up and empty.newest_us is None
    assert empty.position == ""


def test_cursor_time() -> None:
    from exporter.sources.entries import cursor_time_us

    cursor = (
        "s=feaca734ee334e8585f11b39e52fb8f1;i=5;b=0123456789abcdef0123456789abcdef;"
        "m=3ec;t=65bfeda62e900;x=b0d948beb432a498"
    )
    assert cursor_time_us(cursor) == 1_790_000_004_000_000
    assert cursor_time_us("s=1;i=2;t=zz") is None
    assert cursor_time_us("s=1;i=2") is None


# -- 2. resuming after a cursor -----------------------------------------------------------------


@pytest.mark.parametrize("where", ["files", "directory"])
def test_resume_after_the_cursor_reads_nothing_twice(tmp_path: Path, where: str) -> None:
    path = tmp_path / "n.journal"
    entries = small_journal()
    write_journal(path, entries)
    mine = [e for e in entries if e.unit == UNIT]
    at: dict[str, Any] = {"files": (path,)} if where == "files" else {"directory": tmp_path}
    for k in range(1, len(mine) + 1):
        with opened(journal_source(batch=k, **at)) as src:
            first = src.step()
        assert first is not None and first.entries == k
        # `since` is ignored once there is a position: it is where a node without one starts
        with opened(journal_source(position=first.position, since_us=T0 * 2, **at)) as src:
            rest = read_through(src)
        assert not any(b.gap for b in rest)
        assert sum(b.entries for b in rest) == len(mine) - k
        assert [*first.lines, *(x for b in rest for x in b.lines)] == lines_of(entries)
        assert rest[-1].position == (
            first.position if k == len(mine) else unit_cursors("--file", str(path))[-1]
        )

    # resumed on the newest entry, then the journal grows: only the new entries come
    later = [ent(T0 + 20 * SECOND, LAUNCH.format(38)), ent(T0 + 21 * SECOND, NOISE, OTHER)]
    with opened(journal_source(**at)) as src:
        last = read_through(src)[-1].position
    write_journal(path, later)
    with opened(journal_source(position=last, **at)) as src:
        (b,) = read_through(src)
    assert b.entries == 1 and b.lines == tuple(lines_of(later)) and not b.gap


# -- 3. a cursor that no longer exists ----------------------------------------------------------


def numbered(n: int, start: int = 0) -> list[Entry]:
    """Era D requests, one a second, each with another unit's entry at the same time."""
    out = []
    for i in range(start, start + n):
        t = T0 + i * SECOND
        out += [ent(t, era_d_total(100 + i, 700, 250_000)), ent(t, NOISE, OTHER)]
    return out


@pytest.mark.parametrize(
    ("kept_from", "why"),
    [
        (7, "vacuumed: the entries up to the cursor and two after it are gone"),
        (2, "re-imported into a new file: the same entries, other cursors"),
    ],
)
def test_vacuumed_cursor_resumes_from_its_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kept_from: int, why: str
) -> None:
    old = tmp_path / "old.journal"
    write_journal(old, numbered(10))
    with opened(journal_source(directory=tmp_path, batch=5)) as src:
        first = src.step()
    assert first is not None and first.entries == 5
    cursor_t = T0 + 4 * SECOND
    old.unlink()  # rotated away and vacuumed
    write_journal(tmp_path / "new.journal", numbered(15 - kept_from, start=kept_from))

    caplog.set_level(logging.INFO, logger="exporter.sources.journalreader")
    with opened(journal_source(directory=tmp_path, position=first.position)) as src:
        batches = read_through(src)
    assert batches[0].gap, why
    assert not any(b.gap for b in batches[1:])
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no longer" in warnings[0].getMessage(), why
    got = [x for b in batches for x in b.lines]
    # from the cursor's time on, what is still there, once; nothing before it, nothing invented
    want = [e for e in numbered(15 - kept_from, start=kept_from) if e.time_us > cursor_t]
    assert got == lines_of(want), why
    assert sum(b.entries for b in batches) == len(got)


def test_cursor_of_a_file_no_longer_listed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = tmp_path / "a.journal", tmp_path / "b.journal"
    write_journal(a, numbered(4))
    write_journal(b, numbered(4, start=2))
    with opened(journal_source(files=(a,))) as src:
        position = read_through(src)[-1].position
    with opened(journal_source(files=(b,), position=position)) as src:
        batches = read_through(src)
    assert batches[0].gap and "no longer" in caplog.text
    assert [x for b_ in batches for x in b_.lines] == lines_of(numbered(2, start=4))


def test_the_daemon_counts_a_gap_and_nothing_twice(tmp_path: Path) -> None:
    from support.daemon_thread import DaemonThread

    journals = tmp_path / "journal"
    journals.mkdir()
    write_journal(journals / "old.journal", numbered(10))
    cfg = Config(
        state_dir=tmp_path / "state",
        listen_host="127.0.0.1",
        listen_port=0,
        since=iso(T0 - SECOND),
        nodes=(JournalNode("n", UNIT, directory=journals),),
    )

    def served(want: int) -> Samples | None:
        s = parse_metrics(d.metrics())
        return s if sample(s, "smllm_source_entries_total", node="n") == want else None

    with DaemonThread(Daemon(cfg, publish_seconds=0.1)) as d:
        before = wait_for(lambda: served(10), 20, "the 10 entries read")
    assert sample(before, "smllm_source_gaps_total", node="n") == 0
    (journals / "old.journal").unlink()  # vacuumed; the new file keeps two old requests
    write_journal(journals / "new.journal", numbered(8, start=8))
    with DaemonThread(Daemon(cfg, publish_seconds=0.1)) as d:
        after = wait_for(lambda: served(10 + 6), 20, "the 6 new entries read")
    assert sample(after, "smllm_source_gaps_total", node="n") == 1
    assert sample(after, "smllm_requests_total", node="n", kind="extraction") == 16


@pytest.mark.parametrize("position", ["2049:1311:4096", "s=zz;i=1", "garbage"])
def test_a_position_that_is_not_a_cursor_is_a_gap_from_since(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, position: str
) -> None:
    """A file source's `dev:ino:offset` after the node changed its source, or garbage."""
    path = tmp_path / "n.journal"
    write_journal(path, numbered(5))
    since = T0 + 2 * SECOND
    with opened(journal_source(files=(path,), position=position, since_us=since)) as src:
        batches = read_through(src)
    assert batches[0].gap and not any(b.gap for b in batches[1:])
    assert "not a journal cursor" in caplog.text
    assert [x for b in batches for x in b.lines] == lines_of(numbered(3, start=2))


# -- 4. other units, non-UTF-8 and binary MESSAGE ---------------------------------------------


def test_other_units_ignored_and_odd_bytes_decoded_and_parsed(tmp_path: Path) -> None:
    t = T0
    total = era_d_total(41, 1010, 2_000_000)
    block = era_c_block(42, 400, 30, 1_234_567)
    entries = [
        ent(t, LAUNCH.format(41)),
        ent(t + 1, total.replace("41", "77"), OTHER, pid=5),  # same shape, other unit
        ent(t + 20 * SECOND, total.encode() + b"\r"),  # a CR at the end
        ent(t + 20 * SECOND + 10, RELEASE.format(41, 1010).encode() + b" \xff"),
        ent(t + 30 * SECOND, LAUNCH.format(42)),
        ent(t + 40 * SECOND, block[0]),
        ent(t + 40 * SECOND + 10, block[1].encode() + b" \xc3\x28 \x80"),  # invalid UTF-8
        ent(t + 40 * SECOND + 20, block[2].encode() + b"\x00\x01\x02 binary"),  # NUL inside
        ent(t + 40 * SECOND + 25, block[2], OTHER, pid=5),
        ent(t + 40 * SECOND + 30, block[3].encode() + b"\r\n"),
        ent(t + 41 * SECOND, b"\x00\xff\xfe release total time"),  # binary, keyword-ish
        ent(t + 41 * SECOND + 1, b"\x89PNG\r\n\x1a\n\x00\x00"),  # binary, no keyword
    ]
    path = tmp_path / "n.journal"
    write_journal(path, entries)
    with opened(journal_source(files=(path,))) as src:
        (b,) = read_through(src)
    assert b.entries == sum(e.unit == UNIT for e in entries)
    assert list(b.lines) == lines_of(entries)
    assert b.lines[1].message == total + "\r"
    assert b.lines[2].message.endswith(" \ufffd")
    assert b.lines[5].message.endswith(" \ufffd( \ufffd")
    assert b.lines[6].message.endswith("\x00\x01\x02 binary")
    assert b.lines[8].message == "\x00\ufffd\ufffd release total time"
    # the same text a json dump of the unit gives (non-UTF-8 fields come as byte arrays)
    dump = tmp_path / "n.json"
    dump.write_text(
        "".join(
            json.dumps(r) + "\n" for r in journal_json("--file", str(path), f"_SYSTEMD_UNIT={UNIT}")
        )
    )
    from_dump = [x for x in dump_lines(dump, "n") if relevant(x.message.encode())]
    assert [x.message for x in from_dump] == [x.message for x in b.lines]

    parser = Parser("n")
    out = [r for line in b.lines for r in parser.feed(line)]
    intervals = [r for r in out if isinstance(r, Interval)]
    assert [(i.task, i.tokens, i.duration_us, i.end_us) for i in intervals] == [
        (41, 1010, 20_000_000, t + 20 * SECOND),
        (42, 430, 12_345_670, t + 40 * SECOND + 30),
    ]
    assert (intervals[1].prompt_tokens, intervals[1].generated_tokens) == (400, 30)


# -- 5. run(): following a directory while it grows ---------------------------------------------


def test_run_follows_live_appends_and_a_new_file_without_blocking(tmp_path: Path) -> None:
    entries = [e for i in range(40) for e in numbered(1, start=i)]
    parts = [entries[:20], entries[20:40], entries[40:60], entries[60:]]
    want = [len(lines_of(p)) for p in parts]

    async def main() -> tuple[list[Batch], float, JournalSource, asyncio.Task[None]]:
        queue: asyncio.Queue[Batch] = asyncio.Queue()
        src = journal_source(directory=tmp_path)  # empty so far
        task = asyncio.create_task(src.run(queue))
        got: list[Batch] = []
        gaps = [0.0]

        async def ticker() -> None:  # the loop must keep turning while the source waits
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps[0] = max(gaps[0], now - last)
                last = now

        async def until(n: int, what: str) -> None:
            deadline = time.monotonic() + 10
            while sum(len(b.lines) for b in got) < n:
                left = deadline - time.monotonic()
                if left <= 0 or task.done():
                    pytest.fail(f"timed out waiting for {what}: {len(got)} batches {got[-3:]}")
                with contextlib.suppress(TimeoutError):
                    got.append(await asyncio.wait_for(queue.get(), min(left, 0.2)))

        tick = asyncio.create_task(ticker())
        live = await asyncio.to_thread(JournalWriter, tmp_path / "a.journal")
        try:
            await asyncio.to_thread(live.write, parts[0])
            await until(want[0], "the first entries, journal-remote still running")
            await asyncio.to_thread(live.write, parts[1])
            await until(sum(want[:2]), "entries appended live")
            await asyncio.to_thread(live.close)
        finally:
            live.kill()
        await asyncio.to_thread(write_journal, tmp_path / "a.journal", parts[2])
        await until(sum(want[:3]), "entries appended by a second run of journal-remote")
        await asyncio.to_thread(write_journal, tmp_path / "b.journal", parts[3])
        await until(sum(want), "the entries of a second file in the directory")
        while not queue.empty():
            got.append(queue.get_nowait())
        task.cancel()
        await asyncio.wait({task}, timeout=5)
        tick.cancel()
        return got, gaps[0], src, task

    got, gap, src, task = asyncio.run(main())
    assert task.cancelled(), "run() did not end on cancellation"
    assert not src.is_open, "the Reader was not closed"
    assert [x for b in got for x in b.lines] == lines_of(entries)  # all, once, in order
    assert sum(b.entries for b in got) == len(lines_of(entries))
    newest = [b.newest_us for b in got if b.newest_us is not None]
    assert newest == sorted(newest)
    assert gap < 0.5, f"the event loop stood still for {gap:.2f} s"


# -- 6. the daemon killed with SIGKILL mid-stream -------------------------------------------------

MONOTONE = re.compile(r"smllm_\w+_(total|bucket|count|sum)|smllm_accounted_until_timestamp_seconds")


class NeverBack:
    """Every scrape of every run: no counter (nor the watermark) ever goes down."""

    def __init__(self) -> None:
        self.high: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.errors: list[str] = []
        self.scrapes = 0
        self.lock = threading.Lock()
        # a scrape and its check, one at a time: a scrape answered earlier (older values) but
        # checked after one answered later would read as values going back
        self.order = threading.Lock()

    def scraped(self, d: DaemonProcess) -> Samples | None:
        """A scrape of `d`, checked in the order the scrapes were answered; None if none."""
        with self.order:
            samples = d.scrape()
            if samples is not None:
                self.check(samples, d.runs)
            return samples

    def check(self, samples: Samples, run: int) -> None:
        with self.lock:
            self.scrapes += 1
            for key, value in samples.items():
                if not MONOTONE.fullmatch(key[0]):
                    continue
                before = self.high.get(key)
                if before is not None and value < before:
                    self.errors.append(f"run {run}: {key} went from {before} to {value}")
                self.high[key] = max(value, before or value)


class Feeder(threading.Thread):
    """Streams the workload through journal-remote at a pace (into a first file, then a second
    one as after a rotation) until told to hurry; then writes the rest at once."""

    def __init__(self, directory: Path, entries: Sequence[Entry]) -> None:
        super().__init__(daemon=True)
        self.directory = directory
        self.entries = entries
        self.hurry = threading.Event()
        self.split = len(entries) // 8  # the rotation comes while the daemon is being killed
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            halves = (self.entries[: self.split], self.entries[self.split :])
            for name, part in zip(("remote-a.journal", "remote-b.journal"), halves, strict=True):
                writer = JournalWriter(self.directory / name)
                try:
                    i = 0
                    while i < len(part):
                        chunk = part[i : i + (500 if self.hurry.is_set() else 15)]
                        writer.write(chunk)
                        i += len(chunk)
                        self.written += len(chunk)
                        self.hurry.wait(0.05)  # the pace of a busy node's journal
                    writer.close()
                finally:
                    writer.kill()
        except BaseException as e:
            self.error = e


class DaemonProcess:
    """`python -m exporter run --config CFG`, started again and again on the same state."""

    def __init__(self, cfg: Path, port: int, logs: Path) -> None:
        self.cfg, self.port, self.logs = cfg, port, logs
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self) -> None:
        self.runs += 1
        with (self.logs / f"run{self.runs}.log").open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "exporter", "run", "--config", str(self.cfg)],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def scrape(self) -> Samples | None:
        try:
            status, body, _ = http_get(f"http://127.0.0.1:{self.port}/metrics")
        except OSError:
            return None
        return parse_metrics(body.decode()) if status == 200 else None

    def ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"run {self.runs} exited with {self.proc.returncode}: {self.log()}")
        try:
            return http_get(f"http://127.0.0.1:{self.port}/-/ready")[0] == 200
        except OSError:
            return False

    def log(self) -> str:
        return (self.logs / f"run{self.runs}.log").read_text(errors="replace")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=10) == -signal.SIGKILL

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=15) == 0, self.log()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


class Scraper(threading.Thread):
    def __init__(self, daemon: DaemonProcess, never_back: NeverBack) -> None:
        super().__init__(daemon=True)
        self.d, self.never_back = daemon, never_back
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.02):
            self.never_back.scraped(self.d)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of `name` over the series that have `labels`."""
    want = set(labels.items())
    return sum(v for (n, lbl), v in samples.items() if n == name and want <= set(lbl))


KILLS = 4


@pytest.mark.slow
def test_sigkill_mid_stream_never_goes_back_and_ends_exact(tmp_path: Path) -> None:
    start = (int(time.time()) + 86_400) * SECOND  # ahead of the clock: nothing is ever late
    end = start + 3 * 3600 * SECOND
    t_end = end + 10 * SECOND  # the idle lines that end each node's journal
    entries = workload(11, start, end)
    expected = {n: sum(e.unit == u for e in entries) for n, u in (("a", UNIT), ("b", UNIT_B))}
    journals, state = tmp_path / "journal", tmp_path / "state"
    journals.mkdir()
    port = free_port()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f'listen: "127.0.0.1:{port}"\nsince: "{iso(start)}"\nstate_dir: {state}\n'
        f"clock_allowance_seconds: {2 * 86_400}\n"  # (the entries are ahead of the clock)
        "nodes:\n"
        f"  - {{name: a, source: journal, directory: {journals}, unit: {UNIT}}}\n"
        f"  - {{name: b, source: journal, directory: {journals}, unit: {UNIT_B}}}\n"
    )
    d = DaemonProcess(cfg, port, tmp_path)
    never_back = NeverBack()
    scraper = Scraper(d, never_back)
    feeder = Feeder(journals, entries)
    rng = random.Random(5)
    mid_stream: list[bool] = []
    written: list[int] = []  # entries in the journal at each kill

    def progressed(base: float, more: int) -> Samples | None:
        s = never_back.scraped(d)
        if s is None:
            return None
        return s if total(s, "smllm_source_entries_total") >= base + more else None

    try:
        feeder.start()
        scraper.start()
        for _ in range(KILLS):
            d.start()
            wait_for(d.ready, 20, f"run {d.runs} ready")
            base = total(wait_for(d.scrape, 10, "a scrape"), "smllm_source_entries_total")
            # a checkpoint holding new entries was served: kill it as the journal grows
            wait_for(functools.partial(progressed, base, rng.randrange(1, 300)), 20, "progress")
            mid_stream.append(feeder.is_alive() and not feeder.hurry.is_set())
            written.append(feeder.written)
            d.kill()
        feeder.hurry.set()  # the rest comes while the last run reads
        d.start()
        feeder.join(60)
        assert not feeder.is_alive() and feeder.error is None, feeder.error

        def final() -> Samples | None:
            s = never_back.scraped(d)
            if s is None:
                return None
            done = all(
                sample(s, "smllm_source_entries_total", node=n) == want
                for n, want in expected.items()
            )
            wm = sample(s, "smllm_accounted_until_timestamp_seconds")
            return s if done and wm is not None and round(wm * SECOND) == t_end else None

        samples = wait_for(final, 30, "every entry read and the watermark at the last one")
        # no scrape in flight at SIGTERM: on Python 3.11 web/connection.py logs a traceback for one
        scraper.done.set()
        scraper.join(5)
        d.stop()
        assert "Traceback" not in d.log()
    finally:
        feeder.hurry.set()
        scraper.done.set()
        d.close()
    scraper.join(5)
    assert mid_stream == [True] * KILLS, "the workload ran out before the kills"
    assert written[-1] > feeder.split, "no kill after the rotation"
    assert never_back.scrapes > 20
    assert not never_back.errors, never_back.errors[:10]

    # a from-scratch count of the same entries, as `journalctl -u UNIT -o json` dumps them
    streams: dict[str, Path] = {}
    for node, unit in (("a", UNIT), ("b", UNIT_B)):
        rows = journal_json("--directory", str(journals), "-u", unit)
        assert len(rows) == expected[node]
        dump = tmp_path / f"{node}.json"
        dump.write_text("".join(json.dumps(r) + "\n" for r in rows))
        streams[node] = dump
    snap = report_of_dumps(streams, Kinds(DEFAULT_RULES), start, t_end).snapshot
    assert snap.watermark_us == t_end
    problems = compare(samples, snap)
    assert not problems, problems
    assert sum(c.requests for n in snap.nodes for c in n.kinds.values()) > 500
    assert {n.name: (n.restarts, n.aborted) for n in snap.nodes} == {"a": (0, 0), "b": (1, 1)}
    b = next(n for n in snap.nodes if n.name == "b")
    assert b.untimed["cancelled"][0] > 3 and b.untimed["cancelled"][1] > 0
    assert b.slot_busy_us >= b.busy_us > 0


# -- 7. report on journal nodes = report on dumps of the same entries -------------------------


def test_report_on_journal_nodes_equals_report_on_dumps(tmp_path: Path) -> None:
    start = T0
    end = start + 3600 * SECOND
    entries = workload(3, start, end)
    journals = tmp_path / "journal"
    journals.mkdir()
    half = len(entries) // 2
    files = (journals / "remote-a.journal", journals / "remote-b.journal")
    write_journal(files[0], entries[:half])
    write_journal(files[1], entries[half:])
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"state_dir: {tmp_path / 'state'}\nnodes:\n"
        f"  - {{name: a, source: journal, directory: {journals}, unit: {UNIT}}}\n"
        f"  - {{name: b, source: journal, files: [{files[0]}, {files[1]}], unit: {UNIT_B}}}\n"
    )
    # a window that cuts through requests at both ends
    parser = Parser("a")
    intervals = [
        r for line in lines_of(entries, "a") for r in parser.feed(line) if isinstance(r, Interval)
    ]
    first, last = intervals[len(intervals) // 4], intervals[len(intervals) * 3 // 4]
    since = (first.start_us + first.end_us) // 2 + 7
    until = (last.start_us + last.end_us) // 2 + 3
    assert first.start_us < since < first.end_us and last.start_us < until < last.end_us

    dumps: dict[str, list[str]] = {"json": [], "short": []}
    env = {**os.environ, "TZ": "UTC"}
    for node, unit in (("a", UNIT), ("b", UNIT_B)):
        for fmt, args in (("json", ["-o", "json"]), ("short", ["-o", "short-iso-precise", "-a"])):
            path = tmp_path / f"{node}.{fmt}"
            with path.open("wb") as dump_file:
                subprocess.run(
                    [
                        "journalctl",
                        "--no-pager",
                        "-q",
                        "--directory",
                        str(journals),
                        "-u",
                        unit,
                        *args,
                    ],
                    stdout=dump_file,
                    check=True,
                    env=env,
                    timeout=30,
                )
            dumps[fmt] += ["--input", f"{node}={path}"]
    window = ["--since", iso(since), "--until", iso(until)]
    runs = {
        (src, fmt): subprocess.Popen(
            [sys.executable, "-m", "exporter", "report", *window, "--format", fmt, *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for src, args in (("config", ["--config", str(cfg)]), *dumps.items())
        for fmt in ("text", "json")
    }
    outputs = {}
    for key, proc in runs.items():
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, (key, err.decode(errors="replace"))
        outputs[key] = out
    for fmt in ("text", "json"):
        assert outputs["config", fmt] == outputs["json", fmt], fmt
        assert outputs["config", fmt] == outputs["short", fmt], fmt
    figures = json.loads(outputs["config", "json"])
    assert figures["nodes"]["a"]["requests"] > 20 and figures["nodes"]["b"]["requests"] > 20
    assert figures["since"] == since / SECOND and figures["until"] == until / SECOND

    # the journal is sought to the window: nothing before `since` is read
    batches = window_batches(JournalNode("a", UNIT, directory=journals), since, until)
    got = [x for b in batches for x in b.lines if x.time_us <= until]
    assert got == [x for x in lines_of(entries, "a") if since <= x.time_us <= until]
