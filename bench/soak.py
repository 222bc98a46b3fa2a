"""Soak the daemon: 10,000,000 llama-server lines appended to its dump while /metrics is scraped.

    .venv/bin/python bench/soak.py                      # 10,000,000 lines at 60,000 lines/s
    .venv/bin/python bench/soak.py --lines 500000       # a quick check (about 15 s)
    .venv/bin/python bench/soak.py --rate 30000 --csv soak.csv   # slower; every scrape to a file

The lines are bench/ingest.py's real workload (`real_workload`: what a current, era D,
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
import random
import statistics
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))  # support/, shared
from _common import JOURNAL_REMOTE, installed, machine, run_process, verdict
from ingest import NODE, PID, Entry, real_workload, write_dump, write_journal

from exporter.accounting.accounting import SECOND
from exporter.base.times import iso

from support.daemon_process import DaemonProcess, file_nodes
from support.scrape import Samples, Scrape, scrape, total

DEFAULT_LINES = 10_000_000
MIN_LINES = 10_000
DEFAULT_RATE = 60_000  # lines a second appended
SCRAPE_EVERY_S = 1.0
WRITE_POLL_S = 0.01  # how often the appender looks at the clock and the daemon's position
CUT_EVERY = 1_000  # a chunk may end at the first launch line after every CUT_EVERY lines
FORMAT_CHECK_LINES = 2_000
GOAL_GROWTH_PCT = 5.0
WINDOW = 0.1  # RSS is the median over the scrapes of a tenth of the lines
MIN_TREND_SCRAPES = 20  # fewer after the warm-up (a short run): the memory goal is not judged
SLOWEST = 6  # scrapes listed with the CPU pressure during them
IDLE_SCRAPES = 5  # more scrapes once every line is read: the daemon's idle RSS
TREND_PER = 1_000_000  # the RSS trend, per this many lines
GOAL_SCRAPE_MS = 50.0
READ_ALL_TIMEOUT_S = 180.0  # after the last append, for the daemon to read everything
STALL_TIMEOUT_S = 120.0  # the daemon's read position not moving while a chunk waits
WRITE_BLOCK = 8 << 20  # bytes per write() of a chunk
IDLE = "all slots are idle"
LAUNCH = "launch_slot_"
SYSTEMD_PID = 1
SOURCE_LAG_US = 37  # PID 1's entries carry _SOURCE_REALTIME_TIMESTAMP, which journalctl prints


# -- the lines ---------------------------------------------------------------------------------


class ShortIso:
    """Entries as `journalctl -o short-iso-precise` prints them in UTC, times moved by
    `shift_us` (a whole number of seconds)."""

    def __init__(self, shift_us: int = 0) -> None:
        self.shift_us = shift_us
        self._second = -1
        self._stamp = ""
        self._who = {
            PID: f"+0000 {NODE} sm-llm[{PID}]: ",
            SYSTEMD_PID: f"+0000 {NODE} systemd[{SYSTEMD_PID}]: ",
        }

    def time_us(self, e: Entry) -> int:
        """The time journalctl prints for `e`."""
        return e.time_us + self.shift_us - (SOURCE_LAG_US if e.pid == SYSTEMD_PID else 0)

    def line(self, e: Entry) -> str:
        t = self.time_us(e)
        second = t // SECOND
        if second != self._second:
            self._second = second
            self._stamp = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        return f"{self._stamp}{t % SECOND:06d}{self._who[e.pid]}{e.message}\n"


@dataclass
class Stream:
    """The generated lines, in a file, with where a chunk may end and what they hold."""

    path: Path
    lines: int = 0
    size: int = 0
    first_us: int = 0  # journal time of the first line and the last
    last_us: int = 0
    requests: int = 0
    tokens: int = 0
    request_us: int = 0
    cut_lines: array[int] = field(default_factory=lambda: array("q"))  # lines up to a cut
    cut_bytes: array[int] = field(default_factory=lambda: array("q"))  # bytes up to a cut


def write_stream(
    path: Path, lines: int, seed: int, shift_us: int, log: Callable[[str], None]
) -> Stream:
    """`lines` lines of the real workload into `path`, and on to the next `all slots are idle`
    line: the file the appender copies from."""
    s = Stream(path)
    fmt = ShortIso(shift_us)
    gen = real_workload(random.Random(f"{seed}:real"))
    buf: list[str] = []
    next_cut = CUT_EVERY
    report_every = max(lines // 10, 1)
    with path.open("w", encoding="ascii") as out:
        for e in gen:
            text = fmt.line(e)
            buf.append(text)
            s.lines += 1
            s.size += len(text)  # (ASCII: one byte a character; the encoding insists)
            if e.request is not None:
                s.requests += 1
                s.request_us += e.request[0] * 10
                s.tokens += e.request[1]
            message = e.message
            if s.lines >= lines and IDLE in message:
                break
            if s.lines >= next_cut and LAUNCH in message:
                s.cut_lines.append(s.lines)
                s.cut_bytes.append(s.size)
                next_cut = s.lines + CUT_EVERY
            if len(buf) >= 16_384:
                out.write("".join(buf))
                buf.clear()
            if s.lines % report_every == 0:
                log(f"  generated {s.lines:,} lines")
            if s.lines == 1:
                s.first_us = fmt.time_us(e)
        out.write("".join(buf))
        s.last_us = fmt.time_us(e)
    s.cut_lines.append(s.lines)
    s.cut_bytes.append(s.size)
    if path.stat().st_size != s.size:
        raise RuntimeError(f"{path}: {path.stat().st_size:,} bytes written, {s.size:,} counted")
    return s


def check_format(directory: Path, seed: int) -> str:
    """Our lines against journalctl's for the first FORMAT_CHECK_LINES entries (through
    systemd-journal-remote, as bench/ingest.py writes them): what was found."""
    if not JOURNAL_REMOTE.exists():
        return f"not checked against journalctl ({JOURNAL_REMOTE} missing)"
    j = write_journal("real", directory / "journal", FORMAT_CHECK_LINES, seed)
    dump = write_dump(j, "short-iso-precise", directory / "journalctl.log")
    theirs = dump.path.read_text().splitlines(keepends=True)
    fmt = ShortIso()
    gen = real_workload(random.Random(f"{seed}:real"))
    ours = [fmt.line(next(gen)) for _ in range(FORMAT_CHECK_LINES)]
    for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a != b:
            raise RuntimeError(
                f"line {k + 1} differs from journalctl's:\n  ours   {a!r}\n  theirs {b!r}"
            )
    return f"the first {FORMAT_CHECK_LINES:,} lines equal journalctl's own"


# -- the daemon's process ----------------------------------------------------------------------


def exporter_command() -> list[str]:
    """sm-llm-exporter as installed beside this interpreter (the venv's console script)."""
    script = Path(sys.executable).with_name("sm-llm-exporter")
    return [str(script)] if script.exists() else [sys.executable, "-m", "exporter"]


def rss_kb(pid: int) -> int:
    """The process's resident memory (VmRSS), in kB; 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_stall_us() -> int:
    """Microseconds so far in which some task on the machine waited for a CPU (the kernel's
    pressure stall information, "some" line); 0 where the kernel does not keep it."""
    try:
        first = Path("/proc/pressure/cpu").read_text().split("\n", 1)[0]
    except OSError:
        return 0
    return int(first.rpartition("total=")[2] or 0)


class ReadPosition:
    """How far the daemon has read the dump: the position of its descriptor on the file
    (/proc/PID/fdinfo), found again if it reopens the file."""

    def __init__(self, pid: int, path: Path) -> None:
        self.pid, self.target = pid, str(path.resolve())
        self.fd: int | None = None

    def _find(self) -> int | None:
        try:
            names = os.listdir(f"/proc/{self.pid}/fd")
        except OSError:
            return None
        for name in names:
            try:
                if os.readlink(f"/proc/{self.pid}/fd/{name}") == self.target:
                    return int(name)
            except OSError:
                continue
        return None

    def __call__(self) -> int | None:
        """The byte it has read up to, or None while it has the file closed."""
        for _ in range(2):
            if self.fd is None:
                self.fd = self._find()
                if self.fd is None:
                    return None
            try:
                if os.readlink(f"/proc/{self.pid}/fd/{self.fd}") == self.target:
                    info = Path(f"/proc/{self.pid}/fdinfo/{self.fd}").read_text()
                    return int(info.split("\n", 1)[0].split()[1])  # "pos:\t1234"
            except (OSError, ValueError, IndexError):
                pass
            self.fd = None
        return None


# -- the scraper -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Point:
    """One scrape: when (seconds into the stream), how long it took (None: it failed), the
    daemon's RSS after it, the lines appended when it began, and for how long meanwhile some
    task on the machine waited for a CPU (its CPU pressure, /proc/pressure/cpu)."""

    at: float
    ms: float | None
    rss_kb: int
    appended: int
    samples: Samples | None
    stall_ms: float


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
        next_note = 0.1
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
                rss = f", RSS {last.rss_kb / 1024:.1f} MB" if last else ""
                _log(
                    f"  appended {run.appended:,} lines ({100 * run.appended / s.lines:.0f}%){rss}"
                )
                next_note += 0.1
        run.stream_s = time.monotonic() - start


def soak(run: Run, directory: Path, env: Mapping[str, str]) -> None:
    """Start the daemon on the empty dump, stream into it while scraped, wait until it has
    read everything, stop it."""
    s = run.stream
    run.dump.write_bytes(b"")
    config = {
        "since": iso(run.since_us),
        "max_request_seconds": run.max_request_s,
        "nodes": file_nodes({NODE: run.dump}),
    }
    daemon = DaemonProcess(
        directory,
        config,
        command=lambda cfg: [*exporter_command(), "run", "--config", str(cfg)],
        env=env,
    )
    try:
        daemon.start(60)
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
            text = daemon.stop(60)
        except AssertionError as e:
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


@dataclass(frozen=True, slots=True)
class Compared:
    """One counter: the daemon's final value, the report's, and the generated one if known."""

    name: str
    daemon: float
    report: float
    generated: float | None = None
    seconds: bool = False

    @property
    def equal(self) -> bool:
        return self.daemon == self.report and self.generated in (None, self.daemon)


def compare(samples: Samples, rep: Mapping[str, Any], s: Stream) -> list[Compared]:
    """Every counter the report's JSON has, against the daemon's."""
    node = rep["nodes"][NODE]
    out: list[Compared] = []
    for kind, requests in node["kinds"].items():
        daemon = total(samples, "smllm_requests_total", node=NODE, kind=kind)
        out.append(Compared(f'requests{{kind="{kind}"}}', daemon, requests))
    out.append(
        Compared(
            "requests",
            total(samples, "smllm_requests_total", node=NODE),
            node["requests"],
            s.requests,
        )
    )
    out.append(
        Compared(
            "tokens", total(samples, "smllm_tokens_total", node=NODE), node["tokens"], s.tokens
        )
    )
    request_us = 0
    for kind, figures in rep["kinds"].items():
        daemon = total(samples, "smllm_request_seconds_total", node=NODE, kind=kind)
        request_us += round(daemon * SECOND)
        out.append(
            Compared(
                f'request seconds{{kind="{kind}"}}',
                daemon,
                figures["request_seconds"],
                seconds=True,
            )
        )
    report_us = sum(round(k["request_seconds"] * SECOND) for k in rep["kinds"].values())
    out.append(Compared("request microseconds", request_us, report_us, s.request_us))
    busy = total(samples, "smllm_node_busy_seconds_total", node=NODE)
    out.append(Compared("busy seconds", busy, node["busy_seconds"], seconds=True))
    for k, v in rep["concurrency_seconds"].items():
        daemon = total(samples, "smllm_concurrency_seconds_total", nodes_busy=k)
        out.append(Compared(f'concurrency seconds{{nodes_busy="{k}"}}', daemon, v, seconds=True))
    for m, v in rep["mix_seconds"].items():
        daemon = total(samples, "smllm_mix_seconds_total", mix=m)
        out.append(Compared(f'mix seconds{{mix="{m}"}}', daemon, v, seconds=True))
    errors = total(samples, "smllm_parse_errors_total", node=NODE)
    out.append(Compared("parse errors", errors, rep["parse_errors"][NODE], 0))
    return out


# -- the tables --------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


@dataclass(frozen=True, slots=True)
class Window:
    """The RSS (kB) of the scrapes that began with a given share of the lines appended: their
    median, their lowest (the floor: no batch in hand), and how many there were."""

    median: float
    floor: float
    scrapes: int


def rss_window(points: Sequence[Point], lines: int, lo: float, hi: float) -> Window:
    """The scrapes that began with between `lo` and `hi` of the lines appended (the last
    window: while the last of them were being appended); with none (a short run), the first
    scrape after."""
    kb = [p.rss_kb for p in points if lo * lines <= p.appended < hi * lines]
    n = len(kb)
    if not kb:
        kb = [p.rss_kb for p in points if p.appended >= lo * lines][:1]
    if not kb:
        return Window(math.nan, math.nan, 0)
    return Window(statistics.median(kb), min(kb), n)


@dataclass(frozen=True, slots=True)
class Trend:
    """The least-squares line of RSS over the lines appended, from the end of the warm-up to the
    last append: its slope (kB a line), its value at the warm-up's end and how many scrapes."""

    slope: float
    at_warm_up: float
    scrapes: int

    def growth_pct(self, lines: int, warm_up: float) -> float:
        """The line's rise over the lines after the warm-up, in % of its value at the start."""
        return 100 * self.slope * (1 - warm_up) * lines / self.at_warm_up


def rss_trend(points: Sequence[Point], lines: int, warm_up: float) -> Trend:
    after = [p for p in points if warm_up * lines <= p.appended < lines]
    if len({p.appended for p in after}) < 2:
        return Trend(math.nan, math.nan, len(after))
    fit = statistics.linear_regression([p.appended for p in after], [p.rss_kb for p in after])
    return Trend(fit.slope, fit.intercept + fit.slope * warm_up * lines, len(after))


def results(run: Run, warm_up: float, compared: Sequence[Compared]) -> tuple[list[str], list[str]]:
    """The result table, and the goals that failed."""
    s, points = run.stream, run.points
    timed = [p.ms for p in points if p.ms is not None]
    failed = len(points) - len(timed)
    warm = rss_window(points, s.lines, warm_up, warm_up + WINDOW)
    last = rss_window(points, s.lines, 1 - WINDOW, 1)
    idle = None
    if run.final is not None:
        idle = statistics.median(p.rss_kb for p in points if p.at >= run.final.at)
    trend = rss_trend(points, s.lines, warm_up)
    growth = trend.growth_pct(s.lines, warm_up)
    measured = trend.scrapes >= MIN_TREND_SCRAPES
    after = [p.rss_kb for p in points if p.appended >= warm_up * s.lines]
    medians = 100 * (last.median - warm.median) / warm.median
    floors = 100 * (last.floor - warm.floor) / warm.floor
    idle_growth = math.nan if idle is None else 100 * (idle - warm.median) / warm.median
    worst = max(timed, default=math.nan)
    slow = sum(ms >= GOAL_SCRAPE_MS for ms in timed) + failed
    equal = bool(compared) and all(c.equal for c in compared)
    w0, w1 = round(100 * warm_up), round(100 * (warm_up + WINDOW))
    rows: list[tuple[str, str, str, bool | None]] = [
        (
            f"RSS after the warm-up ({w0}-{w1}% of the lines), median / floor, MB",
            f"{_mb(warm.median)} / {_mb(warm.floor)}",
            "",
            None,
        ),
        (
            f"RSS at the end ({100 - round(100 * WINDOW)}-100%), median / floor, MB",
            f"{_mb(last.median)} / {_mb(last.floor)}",
            "",
            None,
        ),
        (
            "RSS growth, end against warm-up, median / floor, %",
            f"{medians:+.1f} / {floors:+.1f}",
            "",
            None,
        ),
        (
            f"RSS trend after the warm-up, MB per {TREND_PER:,} lines",
            f"{trend.slope * TREND_PER / 1024:+.2f}",
            "",
            None,
        ),
        (
            f"RSS growth after the warm-up (trend, {trend.scrapes} scrapes), %",
            f"{growth:+.2f}",
            f"< {GOAL_GROWTH_PCT:g}",
            growth < GOAL_GROWTH_PCT if measured else None,
        ),
        (
            f"RSS idle, every line read (median of {IDLE_SCRAPES + 1}), MB",
            _mb(idle),
            "",
            None,
        ),
        ("RSS growth after the warm-up to idle, %", f"{idle_growth:.2f}", "", None),
        ("RSS peak after the warm-up, MB", _mb(max(after, default=None)), "", None),
        ("/metrics scrapes", f"{len(points)}", "", None),
        ("/metrics p50, ms", f"{statistics.median(timed) if timed else math.nan:.1f}", "", None),
        ("/metrics p99, ms", f"{percentile(timed, 99) if timed else math.nan:.1f}", "", None),
        (
            "/metrics max, ms",
            f"{worst:.1f}",
            f"< {GOAL_SCRAPE_MS:g}",
            worst < GOAL_SCRAPE_MS and slow == 0,
        ),
        (f"/metrics >= {GOAL_SCRAPE_MS:g} ms or failed, scrapes", f"{slow}", "", None),
        ("final counters: daemon = report", "equal" if equal else "DIFFER", "equal", equal),
    ]
    out = [f"{'':64} {'value':>13}  {'goal':>6}  verdict"]
    out += [
        f"{name:64} {value:>13}  {goal:>6}  {'' if ok is None else verdict(ok)}"
        for name, value, goal, ok in rows
    ]
    if not measured:
        out.append(
            f"(the memory goal is not judged: under {MIN_TREND_SCRAPES} scrapes after the warm-up,"
            " too short a run)"
        )
    fails = [name for name, _, _, ok in rows if ok is False]
    return out, fails


def _mb(kb: float | None) -> str:
    return "-" if kb is None or math.isnan(kb) else f"{kb / 1024:.1f}"


def counters_table(compared: Sequence[Compared]) -> list[str]:
    out = [f"{'counter':46} {'daemon':>22} {'report':>22} {'generated':>16}  equal"]
    for c in compared:
        out.append(
            f"{c.name:46} {_num(c.daemon, c.seconds):>22} {_num(c.report, c.seconds):>22} "
            f"{'-' if c.generated is None else _num(c.generated, c.seconds):>16}  "
            f"{'yes' if c.equal else 'NO'}"
        )
    return out


def _num(v: float, seconds: bool) -> str:
    return f"{v:,.6f}" if seconds else f"{round(v):,}"


def timeline(run: Run) -> str:
    """The median and the floor of the RSS over each tenth of the lines appended."""
    parts = []
    for tenth in range(10):
        w = rss_window(run.points, run.stream.lines, tenth / 10, (tenth + 1) / 10)
        parts.append(f"{_mb(w.median)} ({_mb(w.floor)})")
    return "RSS, MB, median (floor) over each tenth of the lines appended: " + ", ".join(parts)


def write_csv(path: Path, points: Sequence[Point]) -> None:
    with path.open("w") as out:
        out.write("seconds,lines_appended,scrape_ms,rss_kb,cpu_stall_ms\n")
        for p in points:
            ms = "" if p.ms is None else f"{p.ms:.3f}"
            out.write(f"{p.at:.3f},{p.appended},{ms},{p.rss_kb},{p.stall_ms:.3f}\n")


# -- main --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
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
        default=0.1,
        metavar="F",
        help="the share of the lines appended before resident memory is taken as the base "
        "(default 0.1)",
    )
    ap.add_argument("--random-seed", type=int, default=1, metavar="S", help="workload seed")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="write the dump to DIR and keep it")
    ap.add_argument(
        "--csv", type=Path, metavar="FILE", help="write every scrape (time, lines, ms, RSS) to FILE"
    )
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
        # the replay ends long before now: two seconds a line back from bench/ingest's epoch
        shift_us = -2 * args.lines * SECOND
        _log(f"generating {args.lines:,} lines")
        t = time.monotonic()
        s = write_stream(tmp / "stream.log", args.lines, args.random_seed, shift_us, _log)
        generated_s = time.monotonic() - t
        if s.last_us >= time.time() * SECOND - 3600 * SECOND:
            raise RuntimeError(f"the replay ends at {iso(s.last_us)}, not an hour before now")
        since_us = s.first_us // SECOND * SECOND - SECOND
        max_request_s = math.ceil(time.time() - since_us / SECOND) + 86_400
        run = Run(s, where / f"{NODE}.log", args.rate, since_us, max_request_s)
        env = installed(tmp / "pycache")  # our processes, with bytecode as installed
        started = os.getloadavg()
        soak(run, tmp / "daemon", env)
        compared: list[Compared] = []
        final = None if run.final is None else run.final.samples
        if final is not None:
            watermark_us = round(total(final, "smllm_accounted_until_timestamp_seconds") * SECOND)
            rep = report_json(run, watermark_us, env)
            compared = compare(final, rep, s)
            late = total(final, "smllm_late_intervals_total", node=NODE)
            if late:
                run.problems.append(f"{late:.0f} late intervals (their busy seconds not counted)")
        load = machine(started)
    lines, fails = results(run, args.warm_up, compared)
    if args.csv:
        write_csv(args.csv, run.points)
    print(
        f"bench/soak: {s.lines:,} lines of one node ({s.requests:,} requests,"
        f" {s.size / 1e6:,.0f} MB short-iso-precise, {iso(s.first_us)} to {iso(s.last_us)})"
        f" appended at {args.rate:,} lines/s, /metrics scraped every {SCRAPE_EVERY_S:g} s;"
        f" python {sys.version.split()[0]}, {load}"
    )
    print(f"format: {checked}; generated in {generated_s:.1f} s")
    print(
        f"stream: {run.stream_s:.1f} s ({s.lines / run.stream_s:,.0f} lines/s),"
        f" {run.chunks:,} chunks, at most {run.behind_max:,} lines behind the schedule;"
        f" every line read {run.read_all_s:.1f} s after the last append; the daemon's CPU"
        f" {100 * run.cpu_s / (run.stream_s + run.read_all_s):.1f}% of one core"
        f" (max_request_seconds {run.max_request_s:,})"
    )
    busy = run.stream_s + run.read_all_s
    print(
        f"machine: some task waited for a CPU {100 * run.stall_s / busy:.0f}% of that time"
        " (/proc/pressure/cpu)"
    )
    print(timeline(run))
    print()
    for line in lines:
        print(line)
    if compared:
        print()
        for line in counters_table(compared):
            print(line)
    if run.log_notes:
        print(f"\nthe daemon logged {len(run.log_notes)} warnings or errors, the first:")
        for note in run.log_notes[:5]:
            print(f"  {note}")
    slowest = sorted((p for p in run.points if p.ms is not None), key=lambda p: -(p.ms or 0))
    print(
        "\nthe slowest scrapes (ms; meanwhile some task waited for a CPU, ms): "
        + ", ".join(f"{p.ms:.1f} ({p.stall_ms:.1f}) at {p.at:.0f} s" for p in slowest[:SLOWEST])
    )
    for e in run.scrape_errors[:5]:
        print(f"  scrape failed: {e}")
    for p in run.problems:
        print(f"  PROBLEM: {p}")
    ok = not fails and not run.problems
    print(f"\n{'PASS' if ok else 'FAIL'} ({time.monotonic() - began:.0f} s in all)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
