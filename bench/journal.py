"""Benchmark reading a unit's entries from a journal file against `journalctl -o json`, entries/s.

    .venv/bin/python bench/journal.py                      # 200,000 entries, medians of 3
    .venv/bin/python bench/journal.py --entries 50000 --repeat 5
    .venv/bin/python bench/journal.py --profile            # and where our time goes (cProfile)

The workload is one deterministic (`random.Random`) journal file of one node, `node0`, written
by Debian's `systemd-journal-remote -o FILE.journal -` from journal export format into a
temporary directory; every entry has __REALTIME_TIMESTAMP, __MONOTONIC_TIMESTAMP (one boot),
_BOOT_ID, _SYSTEMD_UNIT, _PID, _HOSTNAME and MESSAGE, and no other field. About 90% of the
entries are `sm-llm.service`'s era-D llama-server output: the requests of `demo.node_lines`
(launch line, prompt eval, eval and `total time` timing lines, release line), each with its
`params_from_`, `new prompt` and `prompt processing progress` lines, `all slots are idle` and the
`POST /v1/chat/completions` line after it, and the health and metrics polls every few seconds;
most of these lines hold no parser keyword (`parse.tokens.KEYWORDS`). One entry in ten, at random,
comes from another unit: ssh, cron, timesyncd, the node exporter, and a second llama-server
(`sm-llm-embed.service`) whose timing lines must not be counted. Timestamps strictly increase.
`journalctl --file` must report every generated entry in the file before anything is timed.

Timed on the same file in the same run, round-robin, the median of `--repeat` each (the file is
in the page cache for all of them), the garbage collector tuned as the service tunes it:
- ours: `JournalSource(node, "sm-llm.service", since_us=0, files=(path,))`, `open()`, then
  `step()` until a caught-up Batch, then `close()`: the daemon's reading path run synchronously
  (raw `_get` of the few fields needed, MESSAGE tested for a keyword before it is decoded);
- journalctl | json.loads, the baseline: `journalctl --file PATH -u sm-llm.service -o json`
  as a subprocess, its stdout read line by line and every line `json.loads`-ed, the whole
  pipeline (start-up included) timed;
- Reader, a second reference: systemd-python's high-level `systemd.journal.Reader` matched on the
  unit, `get_next()` until it returns an empty entry (every field through its default converters).
Each tool counts the unit's entries and, among them, the `total time` lines. Entries/s are
given over the unit's entries (what each tool reads) and over all the file's entries.

The script checks that all tools count the generated number of the unit's entries and of its
`total time` lines, and that ours hands on exactly the unit's lines with a parser keyword;
exit 1 otherwise.
"""

from __future__ import annotations

import heapq
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from _common import (
    JOURNAL_REMOTE,
    Row,
    Tool,
    arguments,
    journal_remote,
    measure,
    missing,
    profile,
    ratio_table,
    timed,
    tuned_gc,
    verdict,
)
from systemd import journal

from exporter.base.times import SECOND
from exporter.commands.demo import DemoLine, node_lines
from exporter.parse.tokens import KEYWORDS
from exporter.sources.journalreader import JournalSource

NODE = "node0"
UNIT = "sm-llm.service"
EPOCH_US = 1_790_062_375 * SECOND  # 2026-09-22T07:32:55Z
UPTIME_US = 3 * 86_400 * SECOND + 417_123_456  # the boot's age at the first entry
GOAL = 5.0  # times the baseline's entries/s
DEFAULT_ENTRIES = 200_000
OTHER_SHARE = 0.1  # entries of other units
TIMING = "total time"
# A timed request's lines in the demo, each by a text it holds: launch, prompt eval, eval, total,
# release. Its untimed requests (an embedding, a cancelled request) hold no timing line.
TIMED_BLOCK = (
    "slot launch_slot_:",
    "prompt eval time =",
    " eval time =",
    "total time =",
    "stop processing",
)
MAX_UNTIMED_RUN = 100  # untimed requests in a row that mean the demo's timing lines changed

_TASK = re.compile(r"\| task (\d+) \|")
_PROMPT_TOKENS = re.compile(r"prompt eval time = +\S+ ms / +(\d+) tokens")


# -- the journal ----------------------------------------------------------------------------


class Entry(NamedTuple):
    time_us: int
    unit: str
    pid: int
    message: str


@dataclass(frozen=True, slots=True)
class Journal:
    path: Path
    entries: int  # in the file
    unit_entries: int  # of `UNIT`
    unit_timing: int  # of the unit's entries, `total time` lines
    unit_keyword: int  # of the unit's entries, lines with a parser keyword (timing included)
    other_timing: int  # `total time` lines of other units
    size: int  # bytes
    export_size: int  # bytes of export format fed to journal-remote


def _request_lines(rng: random.Random, block: Sequence[DemoLine]) -> Iterator[tuple[int, str]]:
    """One demo request (launch, prompt eval, eval, total, release) with the llama-server lines
    around it that hold no keyword, in time order."""
    launch, prompt_eval, _, total, release = block
    task_m, prompt_m = _TASK.search(launch.message), _PROMPT_TOKENS.search(prompt_eval.message)
    assert task_m is not None and prompt_m is not None
    slot = f"id  0 | task {task_m.group(1)} |"
    prompt = int(prompt_m.group(1))
    start, end = launch.time_us, total.time_us
    yield start - 120, "srv  params_from_: Chat format: Hermes 2 Pro"
    yield launch.time_us, launch.message
    yield (
        start + 15,
        f"slot update_slots: {slot} new prompt, n_ctx_slot = 32768, n_keep = 0, "
        f"n_prompt_tokens = {prompt}",
    )
    steps = rng.choice((1, 1, 2))  # n_batch 512: one or two chunks of the prompt
    done = 0
    prompt_us = (end - start) // 4
    for i in range(steps):
        chunk = min(512, prompt - done) if i < steps - 1 else prompt - done
        done += chunk
        yield (
            start + 30 + (i + 1) * prompt_us // (steps + 1),
            f"slot update_slots: {slot} prompt processing progress, n_tokens = {done}, "
            f"batch.n_tokens = {chunk}, progress = {done / prompt:.6f}",
        )
    for line in block[1:]:
        yield line.time_us, line.message
    yield release.time_us + 30, "srv  update_slots: all slots are idle"
    yield (
        release.time_us + rng.randint(200, 900),
        "srv  log_server_r: request: POST /v1/chat/completions 10.0.0.5 200",
    )


def _timed(block: Sequence[DemoLine]) -> bool:
    """Whether a demo request (its lines from launch to release) is timed. RuntimeError for one
    with a timing line that is not launch, prompt eval, eval, total, release: the workload
    would lose it, and every tool would still agree on what remained."""
    if not any(TIMING in line.message for line in block):
        return False
    shape = len(block) == len(TIMED_BLOCK)
    if not shape or any(k not in line.message for k, line in zip(TIMED_BLOCK, block, strict=True)):
        said = "\n".join(line.message for line in block)
        raise RuntimeError(f"a timed demo request of another shape than {TIMED_BLOCK}:\n{said}")
    return True


def _requests(rng: random.Random, seed: int) -> Iterator[tuple[int, str]]:
    """The demo node's timed requests (launch, prompt eval, eval, total, release), each with
    the lines around it; what comes before a launch (the unit's `Started` line, the server's
    start-up lines) and its untimed requests are left out. RuntimeError when a timed request
    has another shape, or when none comes in MAX_UNTIMED_RUN requests."""
    lines = node_lines(NODE, seed, EPOCH_US, EPOCH_US + 10 * 365 * 86_400 * SECOND)
    untimed = 0
    for line in lines:
        if not line.message.startswith(TIMED_BLOCK[0]):
            continue
        block = [line]
        for more in lines:
            block.append(more)
            if TIMED_BLOCK[-1] in more.message:
                break
        if _timed(block):
            untimed = 0
            yield from _request_lines(rng, block)
        elif (untimed := untimed + 1) >= MAX_UNTIMED_RUN:
            raise RuntimeError(f"{untimed} demo requests in a row without a `{TIMING}` line")


def _polls(rng: random.Random, every_s: float, message: str) -> Iterator[tuple[int, str]]:
    """A monitoring poll every `every_s` seconds, give or take a tenth, forever."""
    t = EPOCH_US + round(rng.uniform(0.0, every_s) * SECOND)
    while True:
        yield t, f"srv  log_server_r: request: {message}"
        t += round(every_s * rng.uniform(0.9, 1.1) * SECOND)


def _other(rng: random.Random, pids: dict[str, int], task: list[int]) -> tuple[str, str]:
    """An entry of some other unit on the node: (unit, message)."""
    x = rng.random()
    if x < 0.35:
        port = rng.randint(40_000, 60_999)
        return "ssh.service", rng.choice(
            (
                f"Accepted publickey for deploy from 10.0.0.5 port {port} ssh2: ED25519 "
                "SHA256:3Xk1mQp8vQ0r4CzJc5mZ3w0yT2bq9Jr7sEo1hYlKx7A",
                "pam_unix(sshd:session): session opened for user deploy(uid=1000) by (uid=0)",
                f"Received disconnect from 10.0.0.5 port {port}:11: disconnected by user",
                f"Disconnected from user deploy 10.0.0.5 port {port}",
                "pam_unix(sshd:session): session closed for user deploy",
            )
        )
    if x < 0.50:
        return "cron.service", rng.choice(
            (
                "(root) CMD (command -v debian-sa1 > /dev/null && debian-sa1 1 1)",
                "pam_unix(cron:session): session opened for user root(uid=0) by (uid=0)",
                "pam_unix(cron:session): session closed for user root",
            )
        )
    if x < 0.60:
        return "systemd-timesyncd.service", "Contacted time server 10.0.0.1:123 (ntp.internal)."
    if x < 0.75:
        n = rng.randint(1, 9)
        return (
            "prometheus-node-exporter.service",
            f"ts=2026-09-22T07:3{n}:0{n}.123Z caller=collector.go:169 level=error "
            f'msg="collector failed" name=hwmon duration_seconds=0.00{n} '
            f'err="failed to read /sys/class/hwmon/hwmon{n}/temp1_input: no data available"',
        )
    # A second llama-server, for embeddings, with timing lines of its own.
    unit = "sm-llm-embed.service"
    pids.setdefault(unit, 7000 + rng.randrange(1000))
    task[0] += 1
    ms = rng.randint(500, 9000) / 100
    tokens = rng.randint(8, 512)
    slot = f"id  0 | task {task[0]} |"
    return unit, rng.choice(
        (
            f"slot print_timing: {slot} prompt eval time = {ms:10.2f} ms / {tokens:5d} tokens "
            f"({ms / tokens:8.2f} ms per token, {1e3 / ms * tokens:8.2f} tokens per second)",
            f"slot print_timing: {slot}       total time = {ms:10.2f} ms / {tokens:5d} tokens",
            f"slot      release: {slot} stop processing: n_tokens = {tokens}, truncated = 0",
            "srv  log_server_r: request: POST /v1/embeddings 10.0.0.5 200",
        )
    )


def entries(n: int, seed: int) -> Iterator[Entry]:
    """The node's first `n` journal entries, in journal order, strictly increasing times."""
    rng = random.Random(seed)
    llama = heapq.merge(
        _requests(rng, seed),
        _polls(random.Random(f"{seed}:health"), 5.0, "GET /health 10.0.0.2 200"),
        _polls(random.Random(f"{seed}:metrics"), 15.0, "GET /metrics 10.0.0.9 200"),
    )
    pid = 4000 + random.Random(f"{seed}:{NODE}").randrange(1000)  # as demo.node_lines picks it
    pids = {"ssh.service": 1187, "cron.service": 611, "systemd-timesyncd.service": 402}
    pids["prometheus-node-exporter.service"] = 933
    task = [rng.randrange(100, 5000)]
    prev = EPOCH_US - 1
    made = 0
    for t, message in llama:
        if made == n:
            return
        if rng.random() < OTHER_SHARE / (1 - OTHER_SHARE):  # one in ten of all entries
            unit, other = _other(rng, pids, task)
            at = max(prev + 1, rng.randint(prev, max(prev, t - 1)))
            yield Entry(at, unit, pids[unit], other)
            prev = at
            made += 1
            if made == n:
                return
        at = max(prev + 1, t)
        yield Entry(at, UNIT, pid, message)
        prev = at
        made += 1


def _export(e: Entry, boot_id: str) -> str:
    return (
        f"__REALTIME_TIMESTAMP={e.time_us}\n"
        f"__MONOTONIC_TIMESTAMP={e.time_us - EPOCH_US + UPTIME_US}\n"
        f"_BOOT_ID={boot_id}\n"
        f"_SYSTEMD_UNIT={e.unit}\n"
        f"_PID={e.pid}\n"
        f"_HOSTNAME={NODE}\n"
        f"MESSAGE={e.message}\n\n"
    )


def generate(path: Path, n: int, seed: int) -> Journal:
    """Write an `n`-entry journal file to `path` (it must end in `.journal`); see the module
    docstring. Raises RuntimeError if journal-remote fails or the file lacks entries."""
    boot_id = f"{random.Random(f'{seed}:boot').getrandbits(128):032x}"
    unit_entries = unit_timing = unit_keyword = other_timing = 0

    def export() -> Iterator[str]:
        nonlocal unit_entries, unit_timing, unit_keyword, other_timing
        for e in entries(n, seed):
            if e.unit == UNIT:
                unit_entries += 1
                unit_timing += TIMING in e.message
                raw = e.message.encode()
                unit_keyword += any(k in raw for k in KEYWORDS)
            else:
                other_timing += TIMING in e.message
            yield _export(e, boot_id)

    export_size = journal_remote(path, export())
    in_file = journal_entries(path)
    if in_file != n:
        raise RuntimeError(f"journalctl counts {in_file} entries in {path}, generated {n}")
    return Journal(
        path,
        n,
        unit_entries,
        unit_timing,
        unit_keyword,
        other_timing,
        path.stat().st_size,
        export_size,
    )


def journal_entries(path: Path) -> int:
    """The entries in the file, as `journalctl --file PATH --header` counts them."""
    done = subprocess.run(
        ["journalctl", "--file", str(path), "--header"], capture_output=True, text=True, check=True
    )
    for line in done.stdout.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Entry objects":
            return int(value)
    raise RuntimeError(f"journalctl --header of {path} names no entry objects")


# -- the tools ------------------------------------------------------------------------------


class Seen(NamedTuple):
    """What a tool counted of the unit: entries, `total time` lines, and (ours) lines handed
    on, -1 where the tool does not filter."""

    entries: int
    timing: int
    handed_on: int = -1


def run_ours(path: Path) -> Seen:
    """The daemon's journal path, synchronously: open, step until caught up, close."""
    source = JournalSource(NODE, UNIT, since_us=0, files=(path,))
    source.open()
    n = timing = handed_on = 0
    try:
        while (batch := source.step()) is not None:
            n += batch.entries
            handed_on += len(batch.lines)
            timing += sum(TIMING in line.message for line in batch.lines)
            if batch.caught_up:
                break
    finally:
        source.close()
    return Seen(n, timing, handed_on)


def run_journalctl(journalctl: str, path: Path) -> Seen:
    """`journalctl -o json` piped into `json.loads`, one line at a time."""
    n = timing = 0
    with (
        tempfile.TemporaryFile() as err,
        subprocess.Popen(
            [journalctl, "--file", str(path), "-u", UNIT, "-o", "json", "--no-pager"],
            stdout=subprocess.PIPE,
            stderr=err,
        ) as proc,
    ):
        assert proc.stdout is not None
        for raw in proc.stdout:
            entry: dict[str, object] = json.loads(raw)
            n += 1
            message = entry.get("MESSAGE")
            if isinstance(message, str) and TIMING in message:
                timing += 1
        proc.wait()
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"journalctl exited {proc.returncode}: {err.read().decode()}")
    return Seen(n, timing)


def run_reader(path: Path) -> Seen:
    """systemd-python's high-level Reader, default converters, get_next until empty."""
    reader = journal.Reader(files=[str(path)])
    n = timing = 0
    try:
        reader.add_match(_SYSTEMD_UNIT=UNIT)
        while entry := reader.get_next():
            n += 1
            message = entry.get("MESSAGE")
            if isinstance(message, str) and TIMING in message:
                timing += 1
    finally:
        reader.close()
    return Seen(n, timing)


def check(tool: Tool[Seen], j: Journal) -> list[str]:
    """Where the tool's counts differ from the generated ones."""
    out = [f"{tool.label}: {p}" for p in tool.problems]
    seen = tool.value
    assert seen is not None
    if seen.entries != j.unit_entries:
        out.append(
            f"{tool.label}: {seen.entries:,} of the unit's entries, in file {j.unit_entries:,}"
        )
    if seen.timing != j.unit_timing:
        out.append(f"{tool.label}: {seen.timing:,} `{TIMING}` lines, in file {j.unit_timing:,}")
    if seen.handed_on >= 0 and seen.handed_on != j.unit_keyword:
        out.append(
            f"{tool.label}: handed on {seen.handed_on:,} lines, {j.unit_keyword:,} have a keyword"
        )
    return out


def table(
    tools: Sequence[Tool[Seen]], baseline: Tool[Seen], ours: Tool[Seen], j: Journal
) -> list[str]:
    rows = [Row(t.label, t.median, GOAL if t is ours else None) for t in tools]
    return ratio_table(
        rows,
        baseline.median,
        rates=[("unit entries/s", j.unit_entries), ("file entries/s", j.entries)],
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = arguments(__doc__, "entries", DEFAULT_ENTRIES, "entries in the journal file")
    ap.add_argument(
        "--no-reader", action="store_true", help="leave out the high-level Reader reference"
    )
    ap.add_argument(
        "--profile", action="store_true", help="then profile our journal source (cProfile)"
    )
    args = ap.parse_args(argv)
    if args.entries < 1:
        ap.error("--entries must be at least 1")
    journalctl = shutil.which("journalctl")
    if journalctl is None or not JOURNAL_REMOTE.exists():
        return missing(
            "journal",
            f"journalctl and {JOURNAL_REMOTE} (Debian packages systemd and systemd-journal-remote)",
        )
    log = sys.stderr
    repeat = max(1, args.repeat)
    with tempfile.TemporaryDirectory(prefix="bench-journal-") as tmp:
        print(f"generating {args.entries:,} entries", file=log, flush=True)
        j = generate(Path(tmp) / f"{NODE}.journal", args.entries, args.random_seed)
        baseline = Tool(
            f"journalctl -u {UNIT} -o json | json.loads",
            timed(lambda: run_journalctl(journalctl, j.path)),
        )
        tools = [
            baseline,
            Tool("ours: JournalSource (raw _get, keyword filter)", timed(lambda: run_ours(j.path))),
        ]
        if not args.no_reader:
            tools.append(
                Tool(
                    "systemd.journal.Reader (default converters)",
                    timed(lambda: run_reader(j.path)),
                )
            )
        tuned_gc()  # the garbage collector as the service runs it
        measure(tools, repeat, log)
        problems = [p for t in tools for p in check(t, j)]
        version = subprocess.run(
            [journalctl, "--version"], capture_output=True, text=True, check=False
        ).stdout.split("\n", 1)[0]
        others = j.entries - j.unit_entries
        print(
            f"bench/journal: one node's {j.entries:,}-entry journal file ({j.size / 1e6:.1f} MB, "
            f"from {j.export_size / 1e6:.1f} MB of export format), medians of {repeat}, "
            f"python {sys.version.split()[0]}, {version}"
        )
        print(
            f"entries: {j.unit_entries:,} of {UNIT} ({100 * j.unit_entries / j.entries:.1f}%), "
            f"{others:,} of other units ({100 * others / j.entries:.1f}%, "
            f"{j.other_timing:,} `{TIMING}` lines among them); of the unit's: "
            f"{j.unit_timing:,} `{TIMING}` ({100 * j.unit_timing / max(1, j.unit_entries):.2f}%), "
            f"{j.unit_keyword:,} with a parser keyword, timing included "
            f"({100 * j.unit_keyword / max(1, j.unit_entries):.2f}%)"
        )
        print(
            "unit entries/s: the unit's entries (what every tool reads) per second; "
            "file entries/s: all the file's entries per second"
        )
        for line in table(tools, baseline, tools[1], j):
            print(line)
        ratio = baseline.median / tools[1].median
        print(f"goal >= {GOAL:.0f}x the baseline: ours {ratio:.2f}x: {verdict(ratio >= GOAL)}")
        agree = "agree" if not problems else "DISAGREE"
        print(
            f"counts: the tools {agree} with the file's {j.unit_entries:,} {UNIT} entries and "
            f"{j.unit_timing:,} `{TIMING}` lines; ours handed on the {j.unit_keyword:,} "
            "with a keyword"
        )
        for p in problems:
            print(f"  PROBLEM: {p}")
        if args.profile:
            print(profile(lambda: run_ours(j.path), "ours, journal source"))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
