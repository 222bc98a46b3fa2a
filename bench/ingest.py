"""Benchmark following a node's journal dump (read, parse, account) against mtail, in lines/s.

    .venv/bin/python bench/ingest.py                    # 1,000,000 lines a dump, medians of 3
    .venv/bin/python bench/ingest.py --lines 200000 --repeat 5
    .venv/bin/python bench/ingest.py --profile          # and where our time goes (cProfile)

Two workloads of one node, `node0`, deterministic (`random.Random`), `--lines` lines each:

- real: what a current (era D, 2026-05 on) llama-server writes. Almost only keyword lines: per
  request its launch line, its timing block (prompt eval, eval, total time, graphs reused) and
  its release line, three slots serving at once so that requests overlap and their lines
  interleave, every line behind the elapsed-time and level prefix current builds print
  (`50.10.605.993 I slot launch_slot_: id  1 | task 1024 | processing task, is_child = 0`, as
  llama.cpp's common/log.cpp writes it), an `all slots are idle` line when the last slot frees,
  and the start-up lines before the first request;
- mixed: the earlier workload, one request at a time on slot 0 with no prefix, each request 15
  lines of which two thirds hold no parser keyword (`params_from_`, prompt processing progress,
  health, model-list and metrics polls, `all slots are idle`, the POST line).

Each workload's entries, with the fields journald stores for a unit's standard error
(`_TRANSPORT=stdout`, `_PID`, `_SYSTEMD_UNIT`, `SYSLOG_IDENTIFIER`, `PRIORITY`, `_BOOT_ID`, ...;
PID 1's `Started` line with `UNIT=`), go through Debian's `systemd-journal-remote` into a journal
file, and `journalctl --file FILE -u sm-llm.service` prints the two dumps a node's operator
makes: `-o short-iso-precise` and `-o json` (so `__CURSOR`, the field order and the escaping
are real journalctl's). The shares of the lines are printed with the tables.

Timed on the same file in the same run, round-robin, the median of `--repeat` each (the files
are in the page cache for all of them), as ratios to mtail on that file:
- mtail: Debian's `mtail --one_shot` running `bench/mtail/smllm.mtail` (requests, request
  seconds and tokens per node from the `total time` lines, either dump form), the process;
- ours, the daemon: `sm-llm-exporter run --config CFG` (one `source: file` node on the dump,
  `since` before its first line, a fresh `state_dir`), a process timed from its start until
  `/metrics` shows every request, then stopped with SIGTERM (its shutdown is not timed);
- ours, the report: `sm-llm-exporter report --since T --until T --input node0=FILE --format json`,
  the process;
- ours, the reading path in its own process (timed inside it): `FileSource.step()` until
  caught up, every Batch through `pipeline.apply_batch` and the ingest loop's tick
  (`Parser.flush`, `Accounting.advance`), the garbage collector tuned as the service tunes
  it (`pipeline.tune_gc`);
- the same reading path in a subprocess with SMLLM_PURE_PYTHON=1 (no compiled fast paths; what a
  machine without a C compiler at install time runs), timed inside it: a reference;
- grep: `grep -c 'total time' FILE` (LC_ALL=C), the floor.
Goals: the daemon and the report at least 4x mtail, the reading path at least 8x, each PASS or
FAIL. Below the tables: the fixed costs (every process on a 150-line dump). Our processes run
as an installed package runs them: the exporter's modules compiled to bytecode beforehand (into
a cache in the temporary directory, PYTHONPYCACHEPREFIX), not from source at every start.

Every row's counts are checked: requests, tokens and request seconds against the generated ones
(grep: the requests), every line read and none a parse error; exit 1 when one disagrees.
"""

from __future__ import annotations

import argparse
import heapq
import io
import json
import math
import os
import pstats
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))  # support/, shared
from _common import (
    JOURNAL_REMOTE,
    Row,
    Timed,
    Tool,
    arguments,
    environment,
    installed,
    journal_remote,
    machine,
    measure,
    missing,
    profile,
    ratio_table,
    run_process,
    tuned_gc,
    verdict,
)

from exporter.accounting.accounting import SECOND, Accounting
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.times import iso
from exporter.ingest.step import apply_batch
from exporter.parse.parser import KEYWORDS, Parser
from exporter.sources.file import FileSource

from support.tools import free_port

NODE = "node0"
UNIT = "sm-llm.service"
PID = 4242
KINDS = Kinds(DEFAULT_RULES)
EPOCH_US = 1_790_062_375 * SECOND  # 2026-09-22T07:32:55Z
UPTIME_US = 3 * 86_400 * SECOND + 417_123_456  # the boot's age at the first entry
DEFAULT_LINES = 1_000_000
TINY_LINES = 150  # the fixed costs are timed on dumps this long
SLOTS = 3  # the real workload's llama-server slots
LATENCY_US = 25  # from llama-server's elapsed stamp to journald's receipt
MIXED_LINES_PER_REQUEST = 15
GOAL_PROCESS = 4.0  # the daemon and the report: times mtail's speed
GOAL_READ = 8.0  # the reading path
FORMATS = ("short-iso-precise", "json")
PURE_ENV = "SMLLM_PURE_PYTHON"  # read once at import by the exporter: 1 switches compiled paths off
WORKLOADS = ("real", "mixed")
ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "bench" / "mtail" / "smllm.mtail"
DAEMON_TIMEOUT_S = 300.0
POLL_S = 0.01  # how often the daemon's /metrics is asked while it catches up

# The parts of journald's fields that stay the same from entry to entry (export format).
BOOT_ID = "5d1c0f3e9a7b4c2d8e6f1a3b5c7d9e0f"
MACHINE_ID = "0b7e3a9c5d1f4e2a8c6b0d4f2e8a6c1b"
SERVER_FIELDS = (
    f"_BOOT_ID={BOOT_ID}\n"
    f"_MACHINE_ID={MACHINE_ID}\n"
    f"_HOSTNAME={NODE}\n"
    "_TRANSPORT=stdout\n"
    "PRIORITY=6\n"
    "SYSLOG_FACILITY=3\n"
    "SYSLOG_IDENTIFIER=sm-llm\n"
    f"_PID={PID}\n"
    "_UID=998\n"
    "_GID=998\n"
    "_COMM=llama-server\n"
    "_EXE=/usr/local/bin/llama-server\n"
    "_CMDLINE=/usr/local/bin/llama-server --host 0.0.0.0 --port 8080 --parallel 3 "
    "--ctx-size 98304 --model /srv/models/qwen3-30b-a3b-q4_k_m.gguf\n"
    "_CAP_EFFECTIVE=0\n"
    f"_SYSTEMD_CGROUP=/system.slice/{UNIT}\n"
    f"_SYSTEMD_UNIT={UNIT}\n"
    "_SYSTEMD_SLICE=system.slice\n"
    "_SYSTEMD_INVOCATION_ID=8f3d2b6a1c9e4f7a0b5d3e8c2a6f9b1d\n"
    "_STREAM_ID=2e9b7c4a6d1f3e8b0a5c9d2f7e4b1a6c\n"
)
SYSTEMD_FIELDS = (
    f"_BOOT_ID={BOOT_ID}\n"
    f"_MACHINE_ID={MACHINE_ID}\n"
    f"_HOSTNAME={NODE}\n"
    "_TRANSPORT=journal\n"
    "PRIORITY=6\n"
    "SYSLOG_FACILITY=3\n"
    "SYSLOG_IDENTIFIER=systemd\n"
    "_PID=1\n"
    "_UID=0\n"
    "_GID=0\n"
    "_COMM=systemd\n"
    "_EXE=/usr/lib/systemd/systemd\n"
    "_CMDLINE=/sbin/init\n"
    "_CAP_EFFECTIVE=1ffffffffff\n"
    "_SYSTEMD_CGROUP=/init.scope\n"
    "_SYSTEMD_UNIT=init.scope\n"
    "_SYSTEMD_SLICE=-.slice\n"
    "CODE_FILE=src/core/job.c\n"
    "CODE_LINE=768\n"
    "CODE_FUNC=job_emit_done_message\n"
    "MESSAGE_ID=39f53479d3a045ac8e11786248231fbf\n"
    "JOB_TYPE=start\n"
    "JOB_RESULT=done\n"
    "JOB_ID=1917\n"
    f"UNIT={UNIT}\n"
    "INVOCATION_ID=8f3d2b6a1c9e4f7a0b5d3e8c2a6f9b1d\n"
)
STARTED = f"Started {UNIT} - llama.cpp server (sm-llm)."

# llama-server's start-up lines (no keyword), after systemd's `Started` line.
HEADER = (
    "build: 6412 (3c1f9a27) with cc (Debian 12.2.0-14) 12.2.0 for x86_64-linux-gnu",
    "system info: n_threads = 16, n_threads_batch = 16, total_threads = 32",
    "main: binding port with default address family",
    "main: HTTP server is listening, hostname: 0.0.0.0, port: 8080, http threads: 31",
    "main: loading model",
    "srv    load_model: loading model '/srv/models/qwen3-30b-a3b-q4_k_m.gguf'",
    "llama_model_loader: loaded meta data with 35 key-value pairs and 579 tensors from "
    "/srv/models/qwen3-30b-a3b-q4_k_m.gguf (version GGUF V3 (latest))",
    "load_tensors: offloaded 49/49 layers to GPU",
    "llama_context: n_ctx = 98304, n_batch = 2048, n_ubatch = 512, flash_attn = auto",
    f"srv    load_model: initializing slots, n_slots = {SLOTS}",
    "main: model loaded",
    "main: server is listening on http://0.0.0.0:8080 - starting the main loop",
    "srv  update_slots: all slots are idle",
)
POLLS = (
    "GET /health 10.0.0.2 200",
    "GET /health 10.0.0.3 200",
    "GET /v1/models 10.0.0.7 200",
    "GET /metrics 10.0.0.9 200",
)


# -- the workloads ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One journal entry: its time, PID (1: systemd's own line about the unit), MESSAGE, and on a
    `total time` line the request's duration (hundredths of a millisecond) and tokens."""

    time_us: int
    pid: int
    message: str
    request: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """One request's figures, drawn as the seed's workload has them."""

    duration_cs: int  # hundredths of a millisecond, as logged
    prompt_cs: int
    eval_cs: int
    prompt: int
    generated: int

    @property
    def tokens(self) -> int:
        return self.prompt + self.generated


def draw(rng: random.Random) -> Request:
    if rng.random() < 0.3:  # extraction: a long prompt, many tokens, 20-60 s
        tokens, duration_cs = rng.randint(600, 1000), rng.randint(2_000_000, 6_000_000)
    else:  # reconcile: 2-15 s
        tokens, duration_cs = rng.randint(40, 599), rng.randint(200_000, 1_500_000)
    generated = rng.randint(8, min(200, tokens // 2))
    prompt_cs = round(duration_cs * rng.uniform(0.03, 0.2))
    eval_cs = max(0, duration_cs - prompt_cs - rng.randint(0, 3000))
    return Request(duration_cs, prompt_cs, eval_cs, tokens - generated, generated)


def _ms(cs: int) -> str:
    """Hundredths of a millisecond as `%10.2f` prints them: `  47390.06`."""
    return f"{cs // 100}.{cs % 100:02d}".rjust(10)


def timing_block(slot: str, r: Request) -> tuple[str, str, str, str]:
    """Era D's block as `print_timings` writes it (`slot` is `id  0 | task 22576 |`)."""
    per_p = r.prompt_cs / 100 / r.prompt
    per_e = r.eval_cs / 100 / r.generated
    return (
        f"slot print_timing: {slot} prompt eval time = {_ms(r.prompt_cs)} ms / "
        f"{r.prompt:5d} tokens ({per_p:8.2f} ms per token, {1e3 / per_p:8.2f} tokens per second)",
        f"slot print_timing: {slot}        eval time = {_ms(r.eval_cs)} ms / "
        f"{r.generated:5d} tokens ({per_e:8.2f} ms per token, "
        f"{1e3 / per_e if per_e else 0.0:8.2f} tokens per second)",
        f"slot print_timing: {slot}       total time = {_ms(r.duration_cs)} ms / "
        f"{r.tokens:5d} tokens",
        f"slot print_timing: {slot}    graphs reused = {max(0, r.generated - 1):10d}",
    )


def elapsed(us: int) -> str:
    """common/log.cpp's prefix for `us` since the server started, level I: `50.10.605.993 I `."""
    return f"{us // 60_000_000}.{us // SECOND % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d} I "


def real_workload(rng: random.Random) -> Iterator[Entry]:
    """A current llama-server's journal with SLOTS slots busy at once, endless, in time order."""
    t = EPOCH_US
    yield Entry(t, 1, STARTED)
    server_start = t + 4_000
    t = server_start + 2_000
    for text in HEADER:
        yield Entry(t, PID, elapsed(t - server_start - LATENCY_US) + text)
        t += rng.randint(1_000, 400_000)
    # Lines waiting for their time: (time, order, message, request); each slot's next launch.
    pending: list[tuple[int, int, str, tuple[int, int] | None]] = []
    launches = [(t + rng.randint(0, 2 * SECOND), slot) for slot in range(SLOTS)]
    heapq.heapify(launches)
    order = 0
    task = rng.randrange(1, 500)
    active = 0
    while True:
        launch, slot = heapq.heappop(launches)
        r = draw(rng)
        end = launch - rng.randint(50, 900) + r.duration_cs * 10  # launch logged after start
        ids = f"id {slot:2d} | task {task} |"
        task += rng.randint(1, 3)
        block = timing_block(ids, r)
        lines = [
            (launch, f"slot launch_slot_: {ids} processing task, is_child = 0", None),
            (end - 3, block[0], None),
            (end - 2, block[1], None),
            (end, block[2], (r.duration_cs, r.tokens)),
            (end + 1, block[3], None),
            (
                end + 40,
                f"slot      release: {ids} stop processing: n_tokens = {r.tokens}, truncated = 0",
                None,
            ),
        ]
        for at, message, request in lines:
            heapq.heappush(pending, (at, order, message, request))
            order += 1
        if rng.random() < 0.01:  # the pipeline waits: idle minutes on this slot
            gap = rng.uniform(60.0, 600.0)
        else:
            gap = 0.002 + min(rng.expovariate(1 / 1.5), 30.0)
        heapq.heappush(launches, (end + 40 + round(gap * SECOND), slot))
        horizon = launches[0][0]  # nothing later generated starts before this
        while pending and pending[0][0] < horizon:
            at, _, message, request = heapq.heappop(pending)
            stamp = elapsed(at - server_start - LATENCY_US)  # printed, then received
            t = max(t + 1, at)
            yield Entry(t, PID, stamp + message, request)
            if "launch_slot_" in message:
                active += 1
            elif "stop processing" in message:
                active -= 1
                if not active:
                    t += 30
                    stamp = elapsed(t - server_start - LATENCY_US)
                    yield Entry(t, PID, stamp + "srv  update_slots: all slots are idle")


def _mixed_request(
    rng: random.Random, t: int, task: int
) -> tuple[list[tuple[int, str, tuple[int, int] | None]], int]:
    """One request's 15 lines from time `t` on, in time order, and the time of the last."""
    r = draw(rng)
    launch = t + rng.randint(100, 900)
    end = launch + r.duration_cs * 10
    slot = f"id  0 | task {task} |"
    out: list[tuple[int, str, tuple[int, int] | None]] = [
        (t, "srv  params_from_: Chat format: Hermes 2 Pro", None),
        (launch, f"slot launch_slot_: {slot} processing task", None),
    ]
    progress = rng.choice((0, 1, 1, 2))
    done = 0
    for i in range(progress):
        batch = r.prompt // 2 if i < progress - 1 else r.prompt - done  # n_batch: half of it
        done += batch
        out.append(
            (
                launch + (i + 1) * r.prompt_cs * 10 // (progress + 1),
                f"slot update_slots: {slot} prompt processing progress, n_tokens = {done}, "
                f"batch.n_tokens = {batch}, progress = {done / r.prompt:.6f}",
                None,
            )
        )
    out.extend(
        (rng.randint(launch, end - 100), f"srv  log_server_r: request: {rng.choice(POLLS)}", None)
        for _ in range(7 - progress)
    )
    prompt_eval, eval_, total, _ = timing_block(slot, r)
    out += [
        (end - 40, prompt_eval, None),
        (end - 20, eval_, None),
        (end, total, (r.duration_cs, r.tokens)),
        (
            end + 30,
            f"slot      release: {slot} stop processing: n_tokens = {r.tokens}, truncated = 0",
            None,
        ),
        (end + 60, "srv  update_slots: all slots are idle", None),
        (
            end + rng.randint(200, 900),
            "srv  log_server_r: request: POST /v1/chat/completions 10.0.0.5 200",
            None,
        ),
    ]
    assert len(out) == MIXED_LINES_PER_REQUEST
    out.sort(key=lambda p: p[0])
    return out, out[-1][0]


def mixed_workload(rng: random.Random) -> Iterator[Entry]:
    """The earlier workload: requests one at a time, two thirds of the lines without a keyword."""
    t = EPOCH_US
    yield Entry(t, 1, STARTED)
    for text in HEADER:
        t += rng.randint(1_000, 400_000)
        yield Entry(t, PID, text)
    task = rng.randrange(1, 500)
    prev = t
    while True:
        out, end = _mixed_request(rng, t, task)
        for at, message, request in out:
            prev = max(prev + 1, at)
            yield Entry(prev, PID, message, request)
        task += rng.randint(1, 3)
        if rng.random() < 0.01:
            gap = rng.uniform(60.0, 600.0)
        else:
            gap = 0.001 + min(rng.expovariate(1 / 1.5), 30.0)
        t = end + round(gap * SECOND)


# -- the journal and its dumps ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Totals:
    """What a tool counted: requests, their seconds and tokens (-1: not counted)."""

    requests: int
    seconds: float
    tokens: int


@dataclass(frozen=True, slots=True)
class Journal:
    """A workload written to a journal file, and what it holds."""

    workload: str
    directory: Path  # journal-remote's files (it starts a new one every ~80 MB)
    entries: int
    expected: Totals
    request_us: int  # exact sum of the durations
    timing_lines: int  # prompt eval, eval and total lines
    keyword_lines: int  # lines holding a parser keyword (timing lines included)
    first_us: int
    last_us: int


@dataclass(frozen=True, slots=True)
class Dump:
    journal: Journal
    form: str  # journalctl's -o
    path: Path
    size: int  # bytes

    @property
    def lines(self) -> int:
        return self.journal.entries

    @property
    def name(self) -> str:
        return f"{self.journal.workload}, {self.form}"


def _export(e: Entry) -> str:
    """journal export format, as journald would have stored the entry."""
    head = (
        f"__REALTIME_TIMESTAMP={e.time_us}\n"
        f"__MONOTONIC_TIMESTAMP={e.time_us - EPOCH_US + UPTIME_US}\n"
    )
    if e.pid == 1:
        return f"{head}{SYSTEMD_FIELDS}_SOURCE_REALTIME_TIMESTAMP={e.time_us - 37}\n" + (
            f"MESSAGE={e.message}\n\n"
        )
    return f"{head}{SERVER_FIELDS}MESSAGE={e.message}\n\n"


def write_journal(workload: str, directory: Path, lines: int, seed: int) -> Journal:
    """The first `lines` entries of `workload` into journal files in `directory` (made)."""
    directory.mkdir(parents=True)
    rng = random.Random(f"{seed}:{workload}")
    gen = real_workload(rng) if workload == "real" else mixed_workload(rng)
    requests = request_us = tokens = timing = keyword = 0
    first = last = EPOCH_US

    def export() -> Iterator[str]:
        nonlocal requests, request_us, tokens, timing, keyword, first, last
        for k in range(lines):
            e = next(gen)
            if k == 0:
                first = e.time_us
            last = e.time_us
            if e.request is not None:
                requests += 1
                request_us += e.request[0] * 10
                tokens += e.request[1]
            timing += "total time" in e.message or "eval time" in e.message
            raw = e.message.encode()
            keyword += any(kw in raw for kw in KEYWORDS)
            yield _export(e)

    journal_remote(directory / f"{workload}.journal", export())
    return Journal(
        workload,
        directory,
        lines,
        Totals(requests, request_us / SECOND, tokens),
        request_us,
        timing,
        keyword,
        first,
        last,
    )


def write_dump(j: Journal, form: str, path: Path) -> Dump:
    """`journalctl --directory J -u UNIT -o FORM` into `path`, in UTC, as an operator dumps it."""
    with path.open("wb") as out:
        done = subprocess.run(
            ["journalctl", "--directory", str(j.directory), "-u", UNIT, "-o", form, "--no-pager"],
            stdout=out,
            stderr=subprocess.PIPE,
            env=environment(TZ="UTC", LC_ALL="C.UTF-8", SYSTEMD_COLORS="0"),
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"journalctl -o {form} exited {done.returncode}: {done.stderr!r}")
    with path.open("rb") as f:
        n = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    if n != j.entries:
        raise RuntimeError(f"journalctl -o {form} printed {n} lines of {j.entries} entries")
    return Dump(j, form, path, path.stat().st_size)


# -- ours -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Counted:
    """A row's result: the totals, and what was wrong besides (lines unread, parse errors)."""

    totals: Totals
    problems: tuple[str, ...] = ()


def accounted(acc: Accounting, lines: int, request_us: int) -> Counted:
    ns = acc.nodes[NODE]
    kinds = ns.kinds.values()
    got_us = sum(c.request_us for c in kinds)
    problems = []
    if ns.entries != lines:
        problems.append(f"read {ns.entries:,} entries of {lines:,}")
    if ns.parse_errors:
        problems.append(f"{ns.parse_errors:,} parse errors")
    if got_us != request_us:
        problems.append(f"request microseconds {got_us:,}, generated {request_us:,}")
    totals = Totals(sum(c.requests for c in kinds), got_us / SECOND, sum(c.tokens for c in kinds))
    return Counted(totals, tuple(problems))


def read_path(path: Path, since_us: int, now_us: int) -> Accounting:
    """The daemon's reading path, synchronously: FileSource batches through `apply_batch` and
    the ingest tick, until caught up."""
    source = FileSource(NODE, path, since_us=since_us)
    parser = Parser(NODE)
    acc = Accounting([NODE], KINDS, origin_us=since_us)
    while (batch := source.step()) is not None:
        apply_batch(batch, parser, acc, now_us)
        acc.add_all(parser.flush(acc.read_until(NODE, now_us)))  # the daemon's tick
        acc.advance(now_us)
        if batch.caught_up or not batch.up:
            break
    return acc


def _clock(d: Dump) -> tuple[int, int]:
    """(since, now) for a dump: the second before its first line, and just past its last line
    (the daemon follows the file live)."""
    return d.journal.first_us // SECOND * SECOND - SECOND, d.journal.last_us + SECOND


def ours_pure(d: Dump, env: Mapping[str, str], *, pure: bool = True) -> Timed[Counted]:
    """The reading path (`read_path`) in a fresh subprocess (with SMLLM_PURE_PYTHON=1 unless
    `pure` is false), timed inside it: a process of its own, as mtail's, not this one with
    every dump's bookkeeping on its heap (that made the same code run 1.5x slower here)."""
    since, now = _clock(d)
    command = [sys.executable, __file__, "--read-child", str(d.path), str(since), str(now)]
    done = run_process(command, env={**env, PURE_ENV: "1"} if pure else dict(env)).value
    if done.returncode != 0:
        problem = f"exited {done.returncode}: {done.stderr[-2000:]}"
        return Timed(math.nan, Counted(Totals(0, 0.0, 0), (problem,)))
    out = json.loads(done.stdout)
    totals = Totals(out["requests"], out["request_us"] / SECOND, out["tokens"])
    problems = list(out["problems"])
    if out["request_us"] != d.journal.request_us:
        problems.append(f"request microseconds {out['request_us']:,}")
    return Timed(out["seconds"], Counted(totals, tuple(problems)))


def read_child(path: Path, since_us: int, now_us: int) -> int:
    """The reading path rows' subprocess: one timed reading path, its figures as JSON."""
    tuned_gc()
    start = time.perf_counter()
    acc = read_path(path, since_us, now_us)
    seconds = time.perf_counter() - start
    ns = acc.nodes[NODE]
    kinds = ns.kinds.values()
    problems = [f"{ns.parse_errors:,} parse errors"] if ns.parse_errors else []
    out = {
        "seconds": seconds,
        "requests": sum(c.requests for c in kinds),
        "request_us": sum(c.request_us for c in kinds),
        "tokens": sum(c.tokens for c in kinds),
        "entries": ns.entries,
        "problems": problems,
    }
    print(json.dumps(out))
    return 0


def _command(profile_to: Path | None = None) -> list[str]:
    """sm-llm-exporter as installed beside this interpreter (the venv's console script), under
    cProfile writing to `profile_to` if given."""
    script = Path(sys.executable).with_name("sm-llm-exporter")
    run = [str(script)] if script.exists() else ["-m", "exporter"]
    if profile_to is not None:
        return [sys.executable, "-m", "cProfile", "-o", str(profile_to), *run]
    return run if script.exists() else [sys.executable, *run]


def report_command(d: Dump, profile_to: Path | None = None) -> list[str]:
    since_us, until_us = _clock(d)
    since, until = iso(since_us), iso(until_us)
    return [
        *_command(profile_to),
        "report",
        "--since",
        since,
        "--until",
        until,
        "--input",
        f"{NODE}={d.path}",
        "--format",
        "json",
    ]


def ours_report(d: Dump, env: Mapping[str, str]) -> Timed[Counted]:
    run = run_process(report_command(d), env=env)
    done = run.value
    if done.returncode != 0:
        return Timed(run.seconds, Counted(Totals(0, 0.0, 0), (f"exited {done.returncode}",)))
    out = json.loads(done.stdout)
    node = out["nodes"][NODE]
    seconds = sum(k["request_seconds"] for k in out["kinds"].values())
    problems = []
    if out["parse_errors"][NODE]:
        problems.append(f"{out['parse_errors'][NODE]:,} parse errors")
    totals = Totals(node["requests"], seconds, node["tokens"])
    return Timed(run.seconds, Counted(totals, tuple(problems)))


_SAMPLE = re.compile(r"^(smllm_\w+)\{([^}]*)\} (\S+)$", re.MULTILINE)
_NODE_LABEL = f'node="{NODE}"'


def scraped(text: str) -> Totals:
    """Requests, request seconds and tokens of NODE from a /metrics text."""
    sums = {"smllm_requests_total": 0.0, "smllm_request_seconds_total": 0.0}
    sums["smllm_tokens_total"] = 0.0
    for name, labels, value in _SAMPLE.findall(text):
        if name in sums and _NODE_LABEL in labels:
            sums[name] += float(value)
    return Totals(
        round(sums["smllm_requests_total"]),
        sums["smllm_request_seconds_total"],
        round(sums["smllm_tokens_total"]),
    )


def daemon_config(d: Dump, state: Path, port: int) -> str:
    since = iso(_clock(d)[0])
    return (
        f'listen: "127.0.0.1:{port}"\n'
        f"state_dir: {json.dumps(str(state))}\n"
        f"since: {json.dumps(since)}\n"
        "nodes:\n"
        f"  - {{name: {NODE}, source: file, path: {json.dumps(str(d.path))}}}\n"
    )


def ours_daemon(d: Dump, env: Mapping[str, str], profile_to: Path | None = None) -> Timed[Counted]:
    """`sm-llm-exporter run` on the dump, from its start until /metrics shows every request;
    then SIGTERM (under cProfile writing to `profile_to` if given)."""
    want = d.journal.expected.requests
    with tempfile.TemporaryDirectory(prefix="bench-ingest-daemon-") as tmp:
        port = free_port()
        cfg = Path(tmp) / "config.yaml"
        cfg.write_text(daemon_config(d, Path(tmp) / "state", port))
        url = f"http://127.0.0.1:{port}/metrics"
        log_path = Path(tmp) / "daemon.log"
        with log_path.open("w") as log_file:
            start = time.perf_counter()
            proc = subprocess.Popen(
                [*_command(profile_to), "run", "--config", str(cfg)],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
            )
            got, seconds, problems = Totals(0, 0.0, 0), math.nan, []
            try:
                while time.perf_counter() - start < DAEMON_TIMEOUT_S:
                    if proc.poll() is not None:
                        problems.append(f"exited {proc.returncode} before counting every request")
                        break
                    try:
                        with urllib.request.urlopen(url, timeout=5) as response:
                            got = scraped(response.read().decode())
                    except (urllib.error.URLError, ConnectionError):
                        pass  # not listening yet
                    if got.requests >= want:
                        seconds = time.perf_counter() - start
                        break
                    time.sleep(POLL_S)
                else:
                    problems.append(f"{got.requests:,} requests after {DAEMON_TIMEOUT_S:.0f} s")
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    problems.append("did not stop on SIGTERM within 60 s")
        if proc.returncode not in (0, None) and not problems:
            problems.append(f"exited {proc.returncode} on SIGTERM: {log_path.read_text()[-2000:]}")
    return Timed(seconds, Counted(got, tuple(problems)))


# -- mtail and grep ---------------------------------------------------------------------------

_MTAIL_SAMPLE = re.compile(r'^(smllm_\w+)\{node="([^"]*)"\} (\S+)$', re.MULTILINE)


def mtail_command(mtail: str, path: Path) -> list[str]:
    return [
        mtail,
        "--one_shot",
        "--one_shot_format",
        "prometheus",
        "--emit_prog_label=false",
        "--logtostderr",  # its own log to stderr (captured), not to files in /tmp
        "--port",
        "0",  # it binds its HTTP port even in one-shot mode
        "--progs",
        str(PROGRAM),
        "--logs",
        str(path),
    ]


def run_mtail(mtail: str, path: Path) -> Timed[Counted]:
    run = run_process(mtail_command(mtail, path))
    done = run.value
    if done.returncode != 0:
        problem = f"mtail exited {done.returncode}: {done.stderr[-2000:]}"
        return Timed(run.seconds, Counted(Totals(0, 0.0, 0), (problem,)))
    values = {
        name: float(value)
        for name, node, value in _MTAIL_SAMPLE.findall(done.stdout)
        if node == NODE
    }
    totals = Totals(
        int(values.get("smllm_requests_total", 0)),
        values.get("smllm_request_seconds_total", 0.0),
        int(values.get("smllm_tokens_total", 0)),
    )
    return Timed(run.seconds, Counted(totals))


def run_grep(grep: str, path: Path) -> Timed[Counted]:
    run = run_process([grep, "-c", "total time", str(path)], env=environment(LC_ALL="C"))
    done = run.value
    if done.returncode not in (0, 1):
        problem = f"grep exited {done.returncode}: {done.stderr}"
        return Timed(run.seconds, Counted(Totals(0, 0.0, 0), (problem,)))
    return Timed(run.seconds, Counted(Totals(int(done.stdout), math.nan, -1)))


# -- the run ----------------------------------------------------------------------------------


@dataclass
class Bench:
    """One dump's rows."""

    dump: Dump
    mtail: Tool[Counted]
    rows: list[tuple[Tool[Counted], float | None]] = field(default_factory=list)

    @property
    def tools(self) -> list[Tool[Counted]]:
        return [t for t, _ in self.rows]


def bench(d: Dump, mtail: str, grep: str, env: Mapping[str, str]) -> Bench:
    b = Bench(d, Tool("mtail --one_shot (Debian)", lambda: run_mtail(mtail, d.path)))
    b.rows = [
        (Tool("grep -c 'total time' (the floor)", lambda: run_grep(grep, d.path)), None),
        (b.mtail, None),
        (
            Tool("ours: daemon process, until /metrics complete", lambda: ours_daemon(d, env)),
            GOAL_PROCESS,
        ),
        (Tool("ours: report process (--format json)", lambda: ours_report(d, env)), GOAL_PROCESS),
        (
            Tool("ours: reading path (its own process)", lambda: ours_pure(d, env, pure=False)),
            GOAL_READ,
        ),
        (Tool(f"ours: reading path, {PURE_ENV}=1 (subprocess)", lambda: ours_pure(d, env)), None),
    ]
    return b


def check(tool: Tool[Counted], d: Dump) -> list[str]:
    """Where the tool's figures differ from the generated ones."""
    label = f"{d.name}: {tool.label}"
    out = [f"{label}: {p}" for p in tool.problems]
    assert tool.value is not None
    out += [f"{label}: {p}" for p in tool.value.problems]
    got, want = tool.value.totals, d.journal.expected
    if got.requests != want.requests:
        out.append(f"{label}: {got.requests:,} requests, generated {want.requests:,}")
    if got.tokens >= 0 and got.tokens != want.tokens:
        out.append(f"{label}: {got.tokens:,} tokens, generated {want.tokens:,}")
    if not math.isnan(got.seconds) and not math.isclose(got.seconds, want.seconds, rel_tol=1e-9):
        out.append(f"{label}: {got.seconds} request seconds, generated {want.seconds}")
    if any(math.isnan(s) for s in tool.times):
        out.append(f"{label}: a run gave no time")
    return out


def describe(j: Journal) -> str:
    without = j.entries - j.keyword_lines
    return (
        f"{j.workload}: {j.entries:,} lines, {j.expected.requests:,} requests; "
        f"{j.timing_lines:,} timing lines ({100 * j.timing_lines / j.entries:.1f}%), "
        f"{j.keyword_lines:,} with a parser keyword, timing included "
        f"({100 * j.keyword_lines / j.entries:.1f}%), {without:,} without "
        f"({100 * without / j.entries:.1f}%)"
    )


def table(b: Bench) -> list[str]:
    d = b.dump
    rows = []
    for t, goal in b.rows:
        assert t.value is not None
        label = t.label
        if len(t.finite) < len(t.times):  # the median is of the runs that gave a time
            label += f" [{len(t.finite)} of {len(t.times)} ran]"
        rows.append(Row(label, t.median, goal, (f"{t.value.totals.requests:,}",)))
    head = f"{d.name}: {d.lines:,} lines, {d.size / 1e6:.1f} MB"
    out = [head]
    out += ratio_table(
        rows,
        b.mtail.median,
        rates=[("lines/s", d.lines), ("MB/s", round(d.size / 1e6))],
        versus="vs mtail",
        extra=["requests"],
        label_width=52,
    )
    return out


def profile_processes(d: Dump, tmp: Path, env: Mapping[str, str]) -> str:
    """cProfile of the daemon (its main thread: the ingest loop; the file source's reads run
    in worker threads) and of the report, as processes on the dump; then the reading path
    in-process."""
    out = []
    for name in ("daemon", "report"):
        prof = tmp / f"{name}.prof"
        if name == "daemon":
            seconds = ours_daemon(d, env, profile_to=prof).seconds
        else:
            seconds = run_process(report_command(d, profile_to=prof), env=env).seconds
        out.append(f"\n== {name} process under cProfile: {seconds:.3f} s ==")
        if not prof.exists():
            out.append("(no profile written)")
            continue
        for key in ("tottime", "cumulative"):
            text = _stats(prof, key)
            out.append(f"-- {name}: top 20 by {key} --\n{text}")
    since, now = _clock(d)
    out.append(profile(lambda: read_path(d.path, since, now), "reading path in-process", 20))
    return "\n".join(out)


def _stats(prof: Path, key: str) -> str:
    buf = io.StringIO()
    pstats.Stats(str(prof), stream=buf).strip_dirs().sort_stats(key).print_stats(20)
    return buf.getvalue()


def fixed_costs(d: Dump, mtail: str, repeat: int, env: Mapping[str, str]) -> list[Tool[Counted]]:
    """Every process on a tiny dump: what each pays whatever the dump's size. Run first: an
    untimed run of each fills the bytecode cache with every module they import."""
    ours_daemon(d, env)
    ours_report(d, env)
    tools: list[Tool[Counted]] = [
        Tool("mtail --one_shot", lambda: run_mtail(mtail, d.path)),
        Tool("ours: daemon process, until /metrics complete", lambda: ours_daemon(d, env)),
        Tool("ours: report process", lambda: ours_report(d, env)),
    ]
    print(f"fixed costs, {d.lines} lines", file=sys.stderr, flush=True)
    measure(tools, repeat, sys.stderr)
    return tools


def main(argv: Sequence[str] | None = None) -> int:
    ap = arguments(__doc__, "lines", DEFAULT_LINES, "lines in each dump")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="then profile the daemon, the report and the reading path on the real "
        "short-iso-precise dump (cProfile)",
    )
    ap.add_argument("--keep", type=Path, metavar="DIR", help="write the dumps to DIR and keep them")
    ap.add_argument(
        "--read-child", nargs=3, metavar=("PATH", "SINCE_US", "NOW_US"), help=argparse.SUPPRESS
    )
    args = ap.parse_args(argv)
    if args.read_child:
        path, since, now = args.read_child
        return read_child(Path(path), int(since), int(now))
    if args.lines < TINY_LINES:
        ap.error(f"--lines must be at least {TINY_LINES}")
    mtail, grep = shutil.which("mtail"), shutil.which("grep")
    if mtail is None or grep is None or not JOURNAL_REMOTE.exists():
        return missing(
            "ingest",
            "mtail, grep, journalctl and systemd-journal-remote "
            "(Debian packages mtail, grep, systemd, systemd-journal-remote)",
        )
    log = sys.stderr
    repeat = max(1, args.repeat)
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp_name:
        tmp = Path(tmp_name)
        where = args.keep or tmp
        where.mkdir(parents=True, exist_ok=True)
        dumps: list[Dump] = []
        for workload in WORKLOADS:
            print(f"generating the {workload} workload, {args.lines:,} lines", file=log, flush=True)
            j = write_journal(workload, tmp / workload, args.lines, args.random_seed)
            for form in FORMATS:
                ext = "json" if form == "json" else "log"
                dumps.append(write_dump(j, form, where / f"{NODE}-{workload}.{ext}"))
            shutil.rmtree(j.directory)  # the dumps are what is read
        tiny_j = write_journal("real", tmp / "tiny", TINY_LINES, args.random_seed)
        tiny = write_dump(tiny_j, "short-iso-precise", tmp / "tiny.log")
        tuned_gc()  # the garbage collector as the service runs it, for the in-process rows
        started = os.getloadavg()
        env = installed(tmp / "pycache")  # our processes, with bytecode as installed
        fixed = fixed_costs(tiny, mtail, repeat, env)
        benches = [bench(d, mtail, grep, env) for d in dumps]
        for k in range(repeat):
            print(f"round {k + 1} of {repeat}", file=log, flush=True)
            for b in benches:
                print(f" {b.dump.name}", file=log, flush=True)
                measure(b.tools, 1, log)
        problems = [p for b in benches for t in b.tools for p in check(t, b.dump)]
        problems += [p for t in fixed for p in check(t, tiny)]
        version = subprocess.run(
            [mtail, "--version"], capture_output=True, text=True, check=False
        ).stdout.split()
        pure = os.environ.get(PURE_ENV, "") not in ("", "0")
        print(
            f"bench/ingest: one node's journal dumps, medians of {repeat}, python "
            f"{sys.version.split()[0]}, mtail {version[2] if len(version) > 2 else '?'}, "
            f"{machine(started)}, compiled fast paths "
            f"{f'OFF ({PURE_ENV} is set)' if pure else 'as built'}"
        )
        for j in dict.fromkeys(b.dump.journal for b in benches):
            print(describe(j))
        for b in benches:
            print()
            for line in table(b):
                print(line)
        print()
        parts = ", ".join(f"{t.label} {t.median:.3f} s" for t in fixed)
        print(f"fixed costs ({tiny.lines} lines, {tiny.name}, medians): {parts}")
        print()
        for b in benches:
            base = b.mtail.median
            verdicts = [
                f"{t.label.removeprefix('ours: ')} {base / t.median:.2f}x (>= {goal:g}x "
                f"{verdict(base / t.median >= goal)})"
                for t, goal in b.rows
                if goal is not None
            ]
            print(f"goals, {b.dump.name}: " + "; ".join(verdicts))
        agree = "agree" if not problems else "DISAGREE"
        print(f"counts: every row {agree} with the generated requests, tokens and seconds")
        for p in problems:
            print(f"  PROBLEM: {p}")
        if args.profile:
            real = next(d for d in dumps if d.journal.workload == "real" and d.form != "json")
            print(profile_processes(real, tmp, env))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
