"""Soak the daemon: 10,000,000 llama-server lines appended to its dump while /metrics is scraped.

    .venv/bin/python bench/soak.py                      # 10,000,000 lines at 60,000 lines/s
    .venv/bin/python bench/soak.py --lines 500000       # a quick check (about 15 s)
    .venv/bin/python bench/soak.py --rate 30000 --csv soak.csv   # slower; every scrape to a file

The lines are bench/ingest.py's real workload (`_workload.real_workload`: what a current, era D,
llama-server writes with three slots busy at once: per request its launch line, its timing block
and its release line, every line behind the elapsed-time and level prefix, the start-up lines
first), deterministic (`--random-seed`), printed as `journalctl -o short-iso-precise` prints
them (UTC; checked line for line against journalctl's own output of the first 2,000 entries,
written through systemd-journal-remote, when this machine has both). They are generated into a
file first (not timed), `--lines` of them and then on to the next moment every slot is idle, so
that no request is left half-written at the end.

The daemon runs as its own process (`sm-llm-exporter run --config CFG`: one `source: file` node
on the dump, `since` before its first line, a fresh `state_dir`), started on an empty dump.
Then the lines are appended at `--rate` lines a second, in chunks: each chunk once the daemon
has read the one before (its read position, /proc/PID/fdinfo, at the dump's end) and ending
just after a launch line, so that the daemon never sees a dump that ends where no request is in
flight (see below). Meanwhile a thread scrapes /metrics every second (a fresh connection each
time, gzip accepted as Prometheus asks), timed from the request to the end of the body, and
reads the daemon's resident memory (VmRSS, /proc/PID/status) after each scrape, and the
machine's CPU pressure over it (/proc/pressure/cpu: how long some task waited for a CPU, so that
a scrape slowed by a busy machine can be told from one the daemon slowed). Once every
line is appended it goes on scraping until the daemon has read them all (the entries counter
at the line count, the watermark past the last line), with a deadline; that last scrape is
compared, counter by counter, with `sm-llm-exporter report --input node0=DUMP --format json`
over [since, the daemon's watermark] (requests and tokens per node and kind, request seconds
per kind, busy seconds, concurrency and mix seconds, parse errors: all exactly equal) and with
what was generated (requests, tokens, request seconds), and the daemon is stopped with SIGTERM
(it must exit 0). Our processes run as an installed package runs them (bytecode compiled
beforehand, into the temporary directory).

Why `max_request_seconds` is set to the replay's age: the lines are months of a node's journal
replayed in minutes, so each one the daemon reads is long past by its clock. A source that has
read everything vouches for "nothing unread up to now - 2 s", and with the default 600 s the
watermark would move past the next chunk's lines before they arrive, making them late
(`smllm_late_intervals_total`: their busy seconds never counted), as it rightly would for a
live node. With `max_request_seconds` reaching back over the whole replay, the watermark waits
for the oldest request in flight instead (a chunk ends after a launch line), which is where a
live node's stream would hold it; the final chunk ends with every slot idle, so the watermark
then passes every line.

Goals, each PASS or FAIL (exit 1 on any FAIL): resident memory grows under 5% after the
warm-up (`--warm-up`, default the first 10% of the lines): the least-squares line of RSS over
the lines appended, fitted to every scrape from the warm-up's end to the last append, rises by
under 5% of its value at the warm-up's end (a line through all of them, since the RSS of one
scrape moves by several MB with the batch the daemon holds at that moment; not judged on a run
with under MIN_TREND_SCRAPES scrapes after the warm-up); no scrape takes 50 ms or more (and
none fails); the daemon's final counters equal the report's. Printed too: the median and the
floor (the lowest scrape: what the daemon holds between batches) of the RSS over each tenth of
the lines, those of the tenth after the warm-up and of the last tenth, the RSS once every line
is read (the median of that scrape and IDLE_SCRAPES more, the daemon idle) and the peak after
the warm-up; `--csv` writes every scrape.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _common import installed, machine, run_process
from _daemon import Daemon, Samples, Scrape, exporter_command, scrape, total
from _proc import ReadPosition, cpu_seconds, cpu_stall_us, rss_kb
from _soak_figures import (
    IDLE_SCRAPES,
    KB_PER_MB,
    WINDOW,
    Compared,
    Point,
    compare,
    counters_table,
    results,
    timeline,
    write_csv,
)
from _soak_stream import Stream, check_format, write_stream
from _workload import NODE

from exporter.base.times import SECOND, iso

DEFAULT_LINES = 10_000_000
MIN_LINES = 10_000
DEFAULT_RATE = 60_000  # lines a second appended
SCRAPE_EVERY_S = 1.0
WRITE_POLL_S = 0.01  # how often the appender looks at the clock and the daemon's position
SLOWEST = 6  # scrapes listed with the CPU pressure during them
READ_ALL_TIMEOUT_S = 180.0  # after the last append, for the daemon to read everything
STALL_TIMEOUT_S = 120.0  # the daemon's read position not moving while a chunk waits
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
WRITE_BLOCK = 8 << 20  # bytes per write() of a chunk
NOTE_EVERY = 0.1  # a progress line each time this share of the lines more is appended
REPLAY_AHEAD_S = 86_400  # max_request_seconds reaches this much further back than the replay
HOUR = 3600 * SECOND


# -- the scraper -------------------------------------------------------------------------------


class Scraper:
    """Scrapes `url` every SCRAPE_EVERY_S in a thread and reads the daemon's RSS after each."""

    def __init__(self, url: str, pid: int, appended: Callable[[], int]) -> None:
        self.url, self.pid, self.appended = url, pid, appended
        self.points: list[Point] = []
        self.errors: list[str] = []
        self.start = time.monotonic()
        self.fresh = threading.Condition()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scraper", daemon=True)

    def _loop(self) -> None:
        k = 0
        while not self._halt.is_set():
            appended = self.appended()
            stall = cpu_stall_us()
            began = time.monotonic()
            got: Scrape | None = None
            try:
                got = scrape(self.url)
            except Exception as e:  # a failed scrape is a result, not the end of the run
                self.errors.append(f"{began - self.start:.1f} s: {type(e).__name__}: {e}")
            stall = cpu_stall_us() - stall
            rss = rss_kb(self.pid)
            point = Point(
                began - self.start,
                None if got is None else got.seconds * 1000,
                rss,
                appended,
                None if got is None else got.samples,
                stall / 1000,
            )
            with self.fresh:
                self.points.append(point)
                self.fresh.notify_all()
            k = max(k + 1, math.ceil((time.monotonic() - self.start) / SCRAPE_EVERY_S))
            self._halt.wait(max(0.0, self.start + k * SCRAPE_EVERY_S - time.monotonic()))

    def next_point(self, timeout: float) -> Point | None:
        """The next scrape's point (None if none came within `timeout`)."""
        with self.fresh:
            n = len(self.points)
            self.fresh.wait_for(lambda: len(self.points) > n, timeout)
            return self.points[-1] if len(self.points) > n else None

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join(30)


# -- the run -----------------------------------------------------------------------------------


@dataclass
class Run:
    """What one soak measured."""

    stream: Stream
    dump: Path
    rate: int
    since_us: int
    max_request_s: int
    appended: int = 0  # lines, read by the scraper's thread
    points: list[Point] = field(default_factory=list)
    scrape_errors: list[str] = field(default_factory=list)
    stream_s: float = math.nan  # first append to last
    read_all_s: float = math.nan  # last append to the scrape that showed every line read
    chunks: int = 0
    behind_max: int = 0  # lines the appends fell behind the schedule, at most
    cpu_s: float = math.nan  # the daemon's CPU over the stream and the read-out
    stall_s: float = math.nan  # meanwhile, how long some task on the machine waited for a CPU
    final: Point | None = None  # the scrape that showed every line read
    problems: list[str] = field(default_factory=list)
    log_notes: list[str] = field(default_factory=list)  # the daemon's warnings and errors


def read_everything(samples: Samples | None, s: Stream) -> bool:
    """Has the daemon counted every line and accounted past the last one?"""
    if samples is None:
        return False
    entries: float = total(samples, "smllm_source_entries_total", node=NODE)
    watermark: float = total(samples, "smllm_accounted_until_timestamp_seconds")
    return entries >= s.lines and round(watermark * SECOND) >= s.last_us


def append(run: Run, position: ReadPosition, scraper: Scraper) -> None:
    """Copy the stream into the dump on schedule, a chunk at a time, each once the daemon has
    read the one before (its read position at the dump's end)."""
    s = run.stream
    bytes_done = 0
    with s.path.open("rb") as src, run.dump.open("ab") as out:
        start = time.monotonic()
        moved = start
        last_pos: int | None = -1
        next_note = NOTE_EVERY
        while run.appended < s.lines:
            time.sleep(WRITE_POLL_S)
            now = time.monotonic()
            due = min(s.lines, int(run.rate * (now - start)))
            k = (
                len(s.cut_lines) - 1
                if due >= s.lines
                else bisect.bisect_right(s.cut_lines, due) - 1
            )
            if k < 0 or s.cut_lines[k] <= run.appended:
                continue
            pos = position()
            if pos != last_pos:
                last_pos, moved = pos, now
            if pos is None or pos < bytes_done:  # still reading the chunk before
                if now - moved > STALL_TIMEOUT_S:
                    raise RuntimeError(f"the daemon read nothing for {STALL_TIMEOUT_S:.0f} s")
                continue
            run.behind_max = max(run.behind_max, due - s.cut_lines[k])
            end = s.cut_bytes[k]
            src.seek(bytes_done)
            while bytes_done < end:
                data = src.read(min(WRITE_BLOCK, end - bytes_done))
                out.write(data)
                out.flush()
                bytes_done += len(data)
            run.appended = s.cut_lines[k]
            run.chunks += 1
            if run.appended >= next_note * s.lines:
                last = scraper.points[-1] if scraper.points else None
                rss = f", RSS {last.rss_kb / KB_PER_MB:.1f} MB" if last else ""
                _log(
                    f"  appended {run.appended:,} lines ({100 * run.appended / s.lines:.0f}%){rss}"
                )
                next_note += NOTE_EVERY
        run.stream_s = time.monotonic() - start


def soak(run: Run, directory: Path, env: Mapping[str, str]) -> None:
    """Start the daemon on the empty dump, stream into it while scraped, wait until it has
    read everything, stop it."""
    s = run.stream
    run.dump.write_bytes(b"")
    config = {
        "since": iso(run.since_us),
        "max_request_seconds": run.max_request_s,
        "nodes": [{"name": NODE, "source": "file", "path": str(run.dump)}],
    }
    daemon = Daemon(directory, config, env=env)
    try:
        daemon.start(START_TIMEOUT_S)
        pid = daemon.pid
        position = ReadPosition(pid, run.dump)
        deadline = time.monotonic() + 30
        while position() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        cpu0, stall0 = cpu_seconds(pid), cpu_stall_us()
        with Scraper(daemon.url + "/metrics", pid, lambda: run.appended) as scraper:
            _log(f"streaming {s.lines:,} lines at {run.rate:,} lines/s into {run.dump}")
            append(run, position, scraper)
            done = time.monotonic() - scraper.start
            deadline = time.monotonic() + READ_ALL_TIMEOUT_S
            while time.monotonic() < deadline:
                point = scraper.next_point(10)
                if point is not None and read_everything(point.samples, s):
                    run.final = point
                    run.read_all_s = point.at - done
                    break
            else:
                run.problems.append(
                    f"the daemon had not read every line {READ_ALL_TIMEOUT_S:.0f} s after the last"
                    " append"
                )
            run.cpu_s = cpu_seconds(pid) - cpu0
            run.stall_s = (cpu_stall_us() - stall0) / SECOND
            for _ in range(IDLE_SCRAPES if run.final is not None else 0):  # the daemon idle
                scraper.next_point(10)
        run.points = list(scraper.points)
        run.scrape_errors = list(scraper.errors)
        try:
            text = daemon.stop(STOP_TIMEOUT_S)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            run.problems.append(f"the daemon did not stop cleanly on SIGTERM: {str(e)[-2000:]}")
            text = daemon.log_text()
        run.log_notes = [ln for ln in text.splitlines() if " WARNING " in ln or " ERROR " in ln]
    finally:
        daemon.close(grace=20)


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- the comparison ----------------------------------------------------------------------------


def report_json(run: Run, until_us: int, env: Mapping[str, str]) -> dict[str, Any]:
    """`sm-llm-exporter report --format json` over [since, until_us] of the dump."""
    until = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=until_us)).isoformat()
    command = [*exporter_command(), "report", "--since", iso(run.since_us), "--until", until]
    command += ["--input", f"{NODE}={run.dump}", "--format", "json"]
    done = run_process(command, env=env).value
    if done.returncode != 0:
        raise RuntimeError(f"report exited {done.returncode}: {done.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def compare_final(run: Run, env: Mapping[str, str]) -> list[Compared]:
    """The daemon's last scrape against the report of [since, its watermark] (none when it
    never read every line); late intervals are a problem of the run."""
    final = None if run.final is None else run.final.samples
    if final is None:
        return []
    watermark_us = round(total(final, "smllm_accounted_until_timestamp_seconds") * SECOND)
    late = total(final, "smllm_late_intervals_total", node=NODE)
    if late:
        run.problems.append(f"{late:.0f} late intervals (their busy seconds not counted)")
    return compare(final, report_json(run, watermark_us, env), run.stream)


def summary(run: Run, rate: int, load: str, checked: str, generated_s: float) -> list[str]:
    """What was streamed, how fast, and how busy the daemon and the machine were."""
    s = run.stream
    busy = run.stream_s + run.read_all_s
    return [
        f"bench/soak: {s.lines:,} lines of one node ({s.requests:,} requests,"
        f" {s.size / 1e6:,.0f} MB short-iso-precise, {iso(s.first_us)} to {iso(s.last_us)})"
        f" appended at {rate:,} lines/s, /metrics scraped every {SCRAPE_EVERY_S:g} s;"
        f" python {sys.version.split()[0]}, {load}",
        f"format: {checked}; generated in {generated_s:.1f} s",
        f"stream: {run.stream_s:.1f} s ({s.lines / run.stream_s:,.0f} lines/s),"
        f" {run.chunks:,} chunks, at most {run.behind_max:,} lines behind the schedule;"
        f" every line read {run.read_all_s:.1f} s after the last append; the daemon's CPU"
        f" {100 * run.cpu_s / busy:.1f}% of one core"
        f" (max_request_seconds {run.max_request_s:,})",
        f"machine: some task waited for a CPU {100 * run.stall_s / busy:.0f}% of that time"
        " (/proc/pressure/cpu)",
        timeline(run.points, s.lines),
    ]


def notes(run: Run) -> list[str]:
    """The daemon's warnings, the slowest scrapes, the failed ones, the problems."""
    out = []
    if run.log_notes:
        out.append(f"\nthe daemon logged {len(run.log_notes)} warnings or errors, the first:")
        out += [f"  {note}" for note in run.log_notes[:5]]
    slowest = sorted((p for p in run.points if p.ms is not None), key=lambda p: -(p.ms or 0))
    out.append(
        "\nthe slowest scrapes (ms; meanwhile some task waited for a CPU, ms): "
        + ", ".join(f"{p.ms:.1f} ({p.stall_ms:.1f}) at {p.at:.0f} s" for p in slowest[:SLOWEST])
    )
    out += [f"  scrape failed: {e}" for e in run.scrape_errors[:5]]
    out += [f"  PROBLEM: {p}" for p in run.problems]
    return out


# -- main --------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--lines",
        type=int,
        default=DEFAULT_LINES,
        metavar="N",
        help=f"lines to stream, then on to the next idle moment (default {DEFAULT_LINES:,})",
    )
    ap.add_argument(
        "--rate",
        type=int,
        default=DEFAULT_RATE,
        metavar="R",
        help=f"lines appended a second (default {DEFAULT_RATE:,})",
    )
    ap.add_argument(
        "--warm-up",
        type=float,
        default=WINDOW,
        metavar="F",
        help="the share of the lines appended before resident memory is taken as the base "
        f"(default {WINDOW:g})",
    )
    ap.add_argument("--random-seed", type=int, default=1, metavar="S", help="workload seed")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="write the dump to DIR and keep it")
    ap.add_argument(
        "--csv", type=Path, metavar="FILE", help="write every scrape (time, lines, ms, RSS) to FILE"
    )
    return ap


def prepared(args: argparse.Namespace, tmp: Path, where: Path) -> tuple[Run, float]:
    """The lines generated into a file, and the run that will append them: the seconds it took."""
    # the replay ends long before now: two seconds a line back from the workload's epoch
    shift_us = -2 * args.lines * SECOND
    _log(f"generating {args.lines:,} lines")
    t = time.monotonic()
    s = write_stream(tmp / "stream.log", args.lines, args.random_seed, shift_us, _log)
    generated_s = time.monotonic() - t
    if s.last_us >= time.time() * SECOND - HOUR:
        raise RuntimeError(f"the replay ends at {iso(s.last_us)}, not an hour before now")
    since_us = s.first_us // SECOND * SECOND - SECOND
    max_request_s = math.ceil(time.time() - since_us / SECOND) + REPLAY_AHEAD_S
    return Run(s, where / f"{NODE}.log", args.rate, since_us, max_request_s), generated_s


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.lines < MIN_LINES:
        ap.error(f"--lines must be at least {MIN_LINES:,}")
    if args.rate <= 0 or not 0 < args.warm_up <= 1 - 2 * WINDOW:
        ap.error(f"--rate must be positive and --warm-up between 0 and {1 - 2 * WINDOW:g}")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp_name:
        tmp = Path(tmp_name)
        where = args.keep or tmp
        where.mkdir(parents=True, exist_ok=True)
        checked = check_format(tmp / "format", args.random_seed)
        run, generated_s = prepared(args, tmp, where)
        env = installed(tmp / "pycache")  # our processes, with bytecode as installed
        started = os.getloadavg()
        soak(run, tmp / "daemon", env)
        compared = compare_final(run, env)
        load = machine(started)
    lines, fails = results(run.points, run.stream.lines, run.final, args.warm_up, compared)
    if args.csv:
        write_csv(args.csv, run.points)
    out = [*summary(run, args.rate, load, checked, generated_s), "", *lines]
    if compared:
        out += ["", *counters_table(compared)]
    for line in [*out, *notes(run)]:
        print(line)
    ok = not fails and not run.problems
    print(f"\n{'PASS' if ok else 'FAIL'} ({time.monotonic() - began:.0f} s in all)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
