"""Benchmark following a node's journal dump (read, parse, account) against mtail, in lines/s.

    .venv/bin/python bench/ingest.py                    # 1,000,000 lines, best of 3
    .venv/bin/python bench/ingest.py --lines 200000 --repeat 5
    .venv/bin/python bench/ingest.py --profile          # and where our time goes (cProfile)

The workload is one deterministic (`random.Random`) dump of one node, `node0`, as
`journalctl -u sm-llm -o short-iso-precise` prints it, in a temporary directory: a few start-up
lines, then requests one at a time on slot 0, each exactly 15 lines of era-D llama-server output:

- 3 timing lines, `slot print_timing: id  0 | task N | prompt eval time = ...`, `... eval time =
  ...` and `... total time = 47390.06 ms /   730 tokens`: 20% of the lines (the start-up lines
  aside), and one request per `total time` line;
- 2 other lines that hold a parser keyword (`parse.KEYWORDS`): the launch line
  (`launch_slot_`) and the release line (`stop processing`), 13%;
- the rest, 10 lines (67%), hold no keyword: the request's `params_from_`, 0-2 `prompt
  processing progress`, `all slots are idle` and `POST /v1/chat/completions` lines and 5-7
  health, model-list and metrics polls during it.
The exact shares of the generated file are printed with the table.

Timed on the same file in the same run, round-robin, best of `--repeat` each (the file is in the
page cache for all of them):
- ours, file source: the daemon's reading path run synchronously: `FileSource.step()` until
  caught up (1 MiB reads; the compiled `_speedups.scan` finds the keyword lines in one
  Wu-Manber pass and decodes them; `_speedups.feed` runs the parser's state machine over the
  common llama.cpp lines), every Batch applied with `daemon.apply_batch` (`Parser.feed_all`,
  `Accounting.add_all`, `line_read`, `source_state`) followed by the ingest loop's tick
  (`Parser.flush`, `Accounting.advance`), and finally `Accounting.advance_to(end)`; in-process,
  so without the interpreter's start-up;
- ours, file source, pure Python: the same with the compiled module switched off (what a
  machine without a C compiler at install time runs): `relevant_lines`, `LineDecoder`,
  `parse.tokenize` and the parser's Python loop;
- ours, per-line loop: the plain baseline, `LineDecoder.decode` of every line, then
  `Parser.feed`, `Accounting.add` and `line_read`, and `advance_to(end)`;
- mtail: Debian's `mtail --one_shot` running `bench/mtail/smllm.mtail` (requests, request seconds
  and tokens per node from the `total time` lines), wall time of the subprocess; shown raw and
  minus its start-up, measured as the wall time of the same command on a 150-line dump;
- grep: `grep -c 'total time' FILE` (LC_ALL=C), the floor.

All of ours run with the garbage collector tuned as the service tunes it (`daemon.tune_gc`:
what exists at start-up frozen, the young generation collected every 10,000 allocations).

The script checks that all four count the same requests as were generated, that mtail's and our
token and second sums are the generated ones, and that ours read every line without a parse
error; exit 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import math
import os
import pstats
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from exporter import parse
from exporter.accounting import SECOND, Accounting
from exporter.config import Config, FileNode
from exporter.daemon import Daemon, apply_batch, tune_gc
from exporter.kinds import DEFAULT_RULES, Kinds
from exporter.logline import Batch
from exporter.parse import Parser
from exporter.sources import file as file_source
from exporter.sources.dump import LineDecoder
from exporter.sources.file import FileSource, relevant_lines

NODE = "node0"
PID = 4242
KINDS = Kinds(DEFAULT_RULES)
EPOCH_US = 1_790_062_375 * SECOND  # 2026-09-22T07:32:55Z
LINES_PER_REQUEST = 15
TINY_LINES = 150  # mtail's start-up is timed on a dump this long
GOAL = 5.0  # times mtail's lines/s
PROGRAMS = Path(__file__).resolve().parent / "mtail"
DEFAULT_LINES = 1_000_000

# Start-up lines before the first request (as many as `lines % LINES_PER_REQUEST`); no keyword.
HEADER = (
    "systemd[1]: Started sm-llm.service - llama.cpp server (sm-llm).",
    "build: 6412 (3c1f9a27) with cc (Debian 12.2.0-14) 12.2.0 for x86_64-linux-gnu",
    "system info: n_threads = 16, n_threads_batch = 16, total_threads = 32",
    "main: binding port with default address family",
    "main: HTTP server is listening, hostname: 0.0.0.0, port: 8080, http threads: 31",
    "main: loading model",
    "srv    load_model: loading model '/srv/models/qwen3-30b-a3b-q4_k_m.gguf'",
    "llama_model_loader: loaded meta data with 35 key-value pairs and 579 tensors from "
    "/srv/models/qwen3-30b-a3b-q4_k_m.gguf (version GGUF V3 (latest))",
    "load_tensors: offloaded 49/49 layers to GPU",
    "llama_context: n_ctx = 32768, n_batch = 512, n_ubatch = 512, flash_attn = auto",
    "srv          init: initializing slots, n_slots = 1",
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


# -- the dump -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Totals:
    """What a tool counted: requests, their seconds and tokens."""

    requests: int
    seconds: float
    tokens: int


@dataclass(frozen=True, slots=True)
class Dump:
    path: Path
    lines: int
    size: int  # bytes
    expected: Totals
    request_us: int  # exact sum of the durations
    timing_lines: int  # prompt eval, eval and total lines
    keyword_lines: int  # lines the file source hands to the decoder (timing lines included)
    first_us: int
    last_us: int


class _Stamps:
    """`2026-09-22T07:31:04.127792+0000`, one strftime a second."""

    def __init__(self) -> None:
        self._sec = -1
        self._prefix = ""

    def __call__(self, us: int) -> str:
        sec, frac = divmod(us, SECOND)
        if sec != self._sec:
            self._sec, self._prefix = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        return f"{self._prefix}.{frac:06d}+0000"


def _ms(cs: int) -> str:
    """Hundredths of a millisecond as logged: `47390.06`."""
    return f"{cs // 100}.{cs % 100:02d}"


def _request(rng: random.Random, t: int, task: int) -> tuple[list[tuple[int, str]], int, int, int]:
    """One request's 15 lines from time `t` on: (time, message) pairs in time order, its end,
    its duration in hundredths of a millisecond, and its tokens."""
    if rng.random() < 0.3:  # extraction: a long prompt, many tokens
        tokens = rng.randint(600, 1000)
        duration_cs = rng.randint(2_000_000, 6_000_000)  # 20-60 s
    else:  # reconcile
        tokens = rng.randint(40, 599)
        duration_cs = rng.randint(200_000, 1_500_000)  # 2-15 s
    generated = rng.randint(8, min(200, tokens // 2))
    prompt = tokens - generated
    prompt_cs = round(duration_cs * rng.uniform(0.03, 0.2))
    eval_cs = max(0, duration_cs - prompt_cs - rng.randint(0, 3000))
    launch = t + rng.randint(100, 900)
    end = launch + duration_cs * 10
    slot = f"id  0 | task {task} |"
    out = [
        (t, "srv  params_from_: Chat format: Hermes 2 Pro"),
        (launch, f"slot launch_slot_: {slot} processing task"),
    ]
    progress = rng.choice((0, 1, 1, 2))
    done = 0
    for i in range(progress):
        batch = prompt // 2 if i < progress - 1 else prompt - done  # n_batch: half the prompt
        done += batch
        out.append(
            (
                launch + (i + 1) * prompt_cs * 10 // (progress + 1),
                f"slot update_slots: {slot} prompt processing progress, n_tokens = {done}, "
                f"batch.n_tokens = {batch}, progress = {done / prompt:.6f}",
            )
        )
    polls = 7 - progress
    out.extend(
        (
            rng.randint(launch, end - 100),
            f"srv  log_server_r: request: {rng.choice(POLLS)}",
        )
        for _ in range(polls)
    )
    per_tok_p = prompt_cs / 100 / prompt
    per_tok_e = eval_cs / 100 / generated
    out += [
        (
            end - 40,
            f"slot print_timing: {slot} prompt eval time = {_ms(prompt_cs):>10} ms / "
            f"{prompt:5d} tokens ({per_tok_p:8.2f} ms per token, "
            f"{1000 / per_tok_p:8.2f} tokens per second)",
        ),
        (
            end - 20,
            f"slot print_timing: {slot}        eval time = {_ms(eval_cs):>10} ms / "
            f"{generated:5d} tokens ({per_tok_e:8.2f} ms per token, "
            f"{1000 / per_tok_e if per_tok_e else 0.0:8.2f} tokens per second)",
        ),
        (
            end,
            f"slot print_timing: {slot}       total time = {_ms(duration_cs):>10} ms / "
            f"{tokens:5d} tokens",
        ),
        (
            end + 30,
            f"slot      release: {slot} stop processing: n_tokens = {tokens}, truncated = 0",
        ),
        (end + 60, "srv  update_slots: all slots are idle"),
        (
            end + rng.randint(200, 900),
            "srv  log_server_r: request: POST /v1/chat/completions 10.0.0.5 200",
        ),
    ]
    assert len(out) == LINES_PER_REQUEST
    out.sort(key=lambda p: p[0])
    return out, out[-1][0], duration_cs, tokens


def generate(path: Path, lines: int, seed: int) -> Dump:
    """Write a `lines`-line dump of NODE to `path`; see the module docstring."""
    rng = random.Random(seed)
    stamp = _Stamps()
    prefix = f" {NODE} sm-llm[{PID}]: "
    header, requests = lines % LINES_PER_REQUEST, lines // LINES_PER_REQUEST
    t = EPOCH_US
    first = t
    task = rng.randrange(1, 500)
    duration_cs = tokens = 0
    buf: list[str] = []
    with path.open("w", encoding="utf-8") as f:
        for text in HEADER[:header]:
            if text.startswith("systemd[1]: "):
                buf.append(f"{stamp(t)} {NODE} {text}\n")
            else:
                buf.append(f"{stamp(t)}{prefix}{text}\n")
            t += rng.randint(1_000, 400_000)
        for _ in range(requests):
            out, end, d_cs, n = _request(rng, t, task)
            duration_cs += d_cs
            tokens += n
            buf.extend(f"{stamp(at)}{prefix}{msg}\n" for at, msg in out)
            last = end
            task += rng.randint(1, 3)
            if rng.random() < 0.01:  # the pipeline waits: idle minutes
                gap = rng.uniform(60.0, 600.0)
            else:
                gap = 0.001 + min(rng.expovariate(1 / 1.5), 30.0)
            t = end + round(gap * SECOND)
            if len(buf) >= 65_536:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))
    data = path.read_bytes()
    assert data.count(b"\n") == lines
    if not requests:
        last = t
    return Dump(
        path,
        lines,
        len(data),
        Totals(requests, duration_cs * 10 / SECOND, tokens),
        duration_cs * 10,
        data.count(b"total time") + data.count(b"eval time"),
        sum(1 for _ in relevant_lines(data)),
        first,
        last,
    )


# -- ours -----------------------------------------------------------------------------------


def _totals(acc: Accounting, dump: Dump) -> tuple[Totals, list[str]]:
    ns = acc.nodes[NODE]
    kinds = ns.kinds.values()
    totals = Totals(
        sum(c.requests for c in kinds),
        sum(c.request_us for c in kinds) / SECOND,
        sum(c.tokens for c in kinds),
    )
    problems = []
    if ns.entries != dump.lines:
        problems.append(f"read {ns.entries:,} entries of {dump.lines:,}")
    if ns.parse_errors:
        problems.append(f"{ns.parse_errors:,} parse errors")
    if sum(c.request_us for c in kinds) != dump.request_us:
        problems.append(f"request microseconds {sum(c.request_us for c in kinds)}")
    return totals, problems


def _apply(batch: Batch, parser: Parser, acc: Accounting, now_us: int) -> None:
    """What `Daemon._apply` does with a Batch (logging and positions aside)."""
    apply_batch(batch, parser, acc, now_us)


def ours_source(dump: Dump) -> tuple[Totals, list[str]]:
    """The daemon's path: FileSource batches, applied and ticked, until caught up."""
    now_us = dump.last_us + SECOND  # the daemon follows the file live: the clock is just past it
    source = FileSource(NODE, dump.path, since_us=0)
    parser = Parser(NODE)
    acc = Accounting([NODE], KINDS, origin_us=dump.first_us)
    try:
        while (batch := source.step()) is not None:
            _apply(batch, parser, acc, now_us)
            for rec in parser.flush(acc.read_until(NODE, now_us)):  # Daemon._tick
                acc.add(rec)
            acc.advance(now_us)
            if batch.caught_up or not batch.up:
                break
    finally:
        source._close()  # what `FileSource.run` does when it ends
    end = acc.nodes[NODE].newest_us
    for rec in parser.flush(end):
        acc.add(rec)
    acc.advance_to(end)
    return _totals(acc, dump)


def ours_daemon(dump: Dump) -> tuple[Totals, list[str]]:
    """The daemon itself, in-process: `Daemon.run` (its file source reading in a worker thread,
    the ingest loop, checkpoints and /metrics rendering every second) from start until every
    line of the dump is counted."""

    async def follow(daemon: Daemon) -> None:
        task = asyncio.create_task(daemon.run())
        while daemon.acc.nodes[NODE].entries < dump.lines and not task.done():
            await asyncio.sleep(0.005)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    with tempfile.TemporaryDirectory(prefix="bench-ingest-state-") as state:
        since = datetime.fromtimestamp(dump.first_us // SECOND, UTC).isoformat()
        config = Config(
            listen_host="127.0.0.1",
            listen_port=0,
            state_dir=Path(state),
            since=since,
            kinds=KINDS,
            nodes=(FileNode(NODE, dump.path),),
        )
        daemon = Daemon(config)
        asyncio.run(follow(daemon))
    return _totals(daemon.acc, dump)


def ours_pure(dump: Dump) -> tuple[Totals, list[str]]:
    """`ours_source` with the compiled fast paths switched off for the run."""
    saved = file_source._scan, parse._fast_tokenize, parse._fast_feed
    file_source._scan = parse._fast_tokenize = parse._fast_feed = None
    try:
        return ours_source(dump)
    finally:
        file_source._scan, parse._fast_tokenize, parse._fast_feed = saved


def ours_per_line(dump: Dump) -> tuple[Totals, list[str]]:
    """The plain baseline: every line decoded, parsed and accounted."""
    decoder = LineDecoder(NODE)
    parser = Parser(NODE)
    acc = Accounting([NODE], KINDS, origin_us=dump.first_us)
    with dump.path.open("rb") as f:
        for raw in f:
            line = decoder.decode(raw.rstrip(b"\n"))
            if line is None:
                continue
            for rec in parser.feed(line):
                acc.add(rec)
            acc.line_read(NODE, line.time_us)
    end = acc.nodes[NODE].newest_us
    for rec in parser.flush(end):
        acc.add(rec)
    acc.advance_to(end)
    return _totals(acc, dump)


# -- mtail and grep -------------------------------------------------------------------------

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
        str(PROGRAMS),
        "--logs",
        str(path),
    ]


def run_mtail(mtail: str, path: Path) -> tuple[Totals, list[str]]:
    done = subprocess.run(mtail_command(mtail, path), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return Totals(0, 0.0, 0), [f"mtail exited {done.returncode}: {done.stderr[-2000:]}"]
    values = {
        name: float(value)
        for name, node, value in _MTAIL_SAMPLE.findall(done.stdout)
        if node == NODE
    }
    return (
        Totals(
            int(values.get("smllm_requests_total", 0)),
            values.get("smllm_request_seconds_total", 0.0),
            int(values.get("smllm_tokens_total", 0)),
        ),
        [],
    )


def run_grep(grep: str, path: Path) -> tuple[Totals, list[str]]:
    done = subprocess.run(
        [grep, "-c", "total time", str(path)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "LC_ALL": "C"},
    )
    if done.returncode not in (0, 1):
        return Totals(0, 0.0, 0), [f"grep exited {done.returncode}: {done.stderr}"]
    return Totals(int(done.stdout), math.nan, -1), []


# -- the run --------------------------------------------------------------------------------


@dataclass
class Tool:
    label: str
    run: Callable[[], tuple[Totals, list[str]]]
    dump: Dump
    times: list[float] = field(default_factory=list)
    totals: Totals | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(self.times)

    def time_once(self) -> None:
        gc.collect()
        start = time.perf_counter()
        totals, problems = self.run()
        self.times.append(time.perf_counter() - start)
        if self.totals is not None and totals != self.totals:
            problems.append(f"counted {totals} this time, {self.totals} before")
        self.totals = totals
        self.problems.extend(p for p in problems if p not in self.problems)


def check(tool: Tool) -> list[str]:
    """Where the tool's figures differ from the generated ones."""
    out = [f"{tool.label}: {p}" for p in tool.problems]
    got, want = tool.totals, tool.dump.expected
    assert got is not None
    if got.requests != want.requests:
        out.append(f"{tool.label}: {got.requests:,} requests, generated {want.requests:,}")
    if got.tokens >= 0 and got.tokens != want.tokens:
        out.append(f"{tool.label}: {got.tokens:,} tokens, generated {want.tokens:,}")
    if not math.isnan(got.seconds) and not math.isclose(got.seconds, want.seconds, rel_tol=1e-9):
        out.append(f"{tool.label}: {got.seconds} request seconds, generated {want.seconds}")
    return out


def table(tools: Sequence[Tool], mtail: Tool, startup: float, lines: int) -> list[str]:
    mtail_net = mtail.best - startup
    head = (
        f"{'tool':<46} {'seconds':>8} {'lines/s':>12} {'vs mtail':>9} {'vs mtail-start':>15}"
        f" {'requests':>9}"
    )
    out = [head, "-" * len(head)]

    def row(label: str, seconds: float, requests: str) -> None:
        out.append(
            f"{label:<46} {seconds:8.3f} {lines / seconds:12,.0f} {mtail.best / seconds:8.2f}x "
            f"{mtail_net / seconds:14.2f}x {requests:>9}"
        )

    for t in tools:
        assert t.totals is not None
        row(t.label, t.best, f"{t.totals.requests:,}")
        if t is mtail:
            row(f"  mtail minus its start-up ({startup:.3f} s)", mtail_net, "")
    return out


def profile(dump: Dump, top: int = 15) -> str:
    prof = cProfile.Profile()
    prof.enable()
    ours_source(dump)
    prof.disable()
    out = io.StringIO()
    for key in ("tottime", "cumulative"):
        out.write(f"\n-- ours, file source: top {top} by {key} --\n")
        stats = pstats.Stats(prof, stream=out)
        stats.strip_dirs().sort_stats(key).print_stats(top)
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--lines",
        type=int,
        default=DEFAULT_LINES,
        metavar="N",
        help=f"lines in the dump (default {DEFAULT_LINES:,})",
    )
    ap.add_argument(
        "--repeat", type=int, default=3, metavar="K", help="best of K runs each (default 3)"
    )
    ap.add_argument("--random-seed", type=int, default=1, metavar="S", help="workload seed")
    ap.add_argument(
        "--profile", action="store_true", help="then profile our file-source path (cProfile)"
    )
    args = ap.parse_args(argv)
    if args.lines < TINY_LINES:
        ap.error(f"--lines must be at least {TINY_LINES}")
    mtail, grep = shutil.which("mtail"), shutil.which("grep")
    if mtail is None or grep is None:
        print("bench/ingest: needs mtail (Debian package mtail) and grep on PATH", file=sys.stderr)
        return 2
    log = sys.stderr
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        print(f"generating {args.lines:,} lines", file=log, flush=True)
        dump = generate(Path(tmp) / f"{NODE}.log", args.lines, args.random_seed)
        tiny = generate(Path(tmp) / f"{NODE}-tiny.log", TINY_LINES, args.random_seed)
        tune_gc()  # the garbage collector as the service runs it, for all of ours
        start_tool = Tool("mtail start-up", lambda: run_mtail(mtail, tiny.path), tiny)
        mtail_tool = Tool("mtail --one_shot (Debian)", lambda: run_mtail(mtail, dump.path), dump)
        tools = [
            Tool("grep -c 'total time' (the floor)", lambda: run_grep(grep, dump.path), dump),
            mtail_tool,
            Tool("ours: file source + parse + accounting", lambda: ours_source(dump), dump),
            Tool("ours: the daemon (Daemon.run in-process)", lambda: ours_daemon(dump), dump),
            Tool("ours: the same, pure Python", lambda: ours_pure(dump), dump),
            Tool("ours: per-line decode + parse + accounting", lambda: ours_per_line(dump), dump),
        ]
        for k in range(max(1, args.repeat)):
            print(f"run {k + 1} of {max(1, args.repeat)}", file=log, flush=True)
            for t in [start_tool, *tools]:
                t.time_once()
                print(f"  {t.label}: {t.times[-1]:.3f} s", file=log, flush=True)
        problems = [p for t in [start_tool, *tools] for p in check(t)]
        version = subprocess.run(
            [mtail, "--version"], capture_output=True, text=True, check=False
        ).stdout.split()
        body = dump.expected.requests * LINES_PER_REQUEST
        without = dump.lines - dump.keyword_lines
        print(
            f"bench/ingest: one node's {dump.lines:,}-line short-iso-precise dump "
            f"({dump.size / 1e6:.1f} MB, {dump.expected.requests:,} requests), best of "
            f"{max(1, args.repeat)}, python {sys.version.split()[0]}, "
            f"mtail {version[2] if len(version) > 2 else '?'}, compiled fast paths "
            f"{'on' if file_source._scan is not None else 'NOT BUILT (pure Python only)'}"
        )
        print(
            f"lines: {dump.timing_lines:,} timing ({100 * dump.timing_lines / dump.lines:.4f}%; "
            f"{100 * dump.timing_lines / body:.2f}% of the {body:,} request lines), "
            f"{dump.keyword_lines:,} with a parser keyword, timing included "
            f"({100 * dump.keyword_lines / dump.lines:.2f}%), "
            f"{without:,} without ({100 * without / dump.lines:.2f}%)"
        )
        startup = start_tool.best
        for line in table(tools, mtail_tool, startup, dump.lines):
            print(line)
        ours, daemon = tools[2], tools[3]  # the reading path the goal names; the daemon around it
        ratio, net = mtail_tool.best / ours.best, (mtail_tool.best - startup) / ours.best
        print(
            f"goal >= {GOAL:.0f}x mtail (file reader, parse and accounting): ours {ratio:.2f}x "
            f"({net:.2f}x against mtail minus its start-up): "
            f"{'met' if min(ratio, net) >= GOAL else 'NOT met'}; the whole daemon "
            f"{mtail_tool.best / daemon.best:.2f}x"
        )
        agree = "agree" if not problems else "DISAGREE"
        print(
            f"counts: ours, mtail and grep {agree} on {dump.expected.requests:,} requests, "
            f"{dump.expected.tokens:,} tokens, {dump.expected.seconds:,.2f} request seconds"
        )
        for p in problems:
            print(f"  PROBLEM: {p}")
        if args.profile:
            print(profile(dump))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
