"""bench/ingest.py's rows, each timing one dump and counting what it read.

A work tree's daemon, report and reading path (each a process of its own), mtail and grep.

The reading path runs in the process `bench/ingest.py --read-child PATH SINCE_US NOW_US` of the
tree timed (its own script, with its own venv's Python), which times itself and prints its
figures as JSON: the one interface between this script and another commit's.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from _common import ROOT, Timed, environment, run_process, tuned_gc
from _daemon import Daemon
from _dumps import Dump, Totals
from _trees import Tree
from _workload import NODE

from exporter.accounting.accounting import Accounting
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.times import SECOND, iso
from exporter.config.schema import Config
from exporter.ingest.settings import settings
from exporter.ingest.step import apply_batch
from exporter.parse.parser import Parser
from exporter.sources.filereader import FileSource

KINDS = Kinds(DEFAULT_RULES)
PURE_ENV = "SMLLM_PURE_PYTHON"  # read once at import by the exporter: 1 switches compiled paths off
PROGRAM = ROOT / "bench" / "mtail" / "smllm.mtail"
DAEMON_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 60.0
POLL_S = 0.01  # how often the daemon's /metrics is asked while it catches up
SCRAPE_TIMEOUT_S = 5.0
SAID = 2000  # characters of a failed process's output kept in its problem


@dataclass(frozen=True, slots=True)
class Counted:
    """A row's result: the totals, and what was wrong besides (lines unread, parse errors)."""

    totals: Totals
    problems: tuple[str, ...] = ()


NOTHING = Totals(0, 0.0, 0)


def clock(d: Dump) -> tuple[int, int]:
    """(since, now) for a dump: the second before its first line, and just past its last line
    (the daemon follows the file live)."""
    return d.journal.first_us // SECOND * SECOND - SECOND, d.journal.last_us + SECOND


# -- the reading path ---------------------------------------------------------------------------


def read_path(path: Path, since_us: int, now_us: int) -> Accounting:
    """The daemon's reading path, synchronously: FileSource batches through `apply_batch` and
    the ingest tick, until caught up."""
    source = FileSource(NODE, path, since_us=since_us)
    parser = Parser(NODE)
    acc = Accounting([NODE], settings(Config(), KINDS), origin_us=since_us)
    while (batch := source.step()) is not None:
        apply_batch(batch, parser, acc, now_us)
        acc.add_all(parser.flush(acc.read_until(NODE, now_us)))  # the daemon's tick
        acc.advance(now_us)
        if batch.caught_up or not batch.up:
            break
    return acc


def read_child(path: Path, since_us: int, now_us: int) -> int:
    """The reading path rows' process: one timed reading path, its figures as JSON."""
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


def read_row(tree: Tree, d: Dump, *, pure: bool = False) -> Timed[Counted]:
    """The tree's reading path in a fresh process (with SMLLM_PURE_PYTHON=1 if `pure`), timed
    inside it: a process of its own, as mtail's, not this one with every dump's bookkeeping on
    its heap (that made the same code run 1.5x slower here)."""
    since, now = clock(d)
    command = [tree.python, str(tree.bench("ingest.py")), "--read-child", str(d.path)]
    command += [str(since), str(now)]
    done = run_process(command, env={**tree.env, PURE_ENV: "1"} if pure else tree.env).value
    if done.returncode != 0:
        problem = f"exited {done.returncode}: {done.stderr[-SAID:]}"
        return Timed(math.nan, Counted(NOTHING, (problem,)))
    out = json.loads(done.stdout)
    totals = Totals(out["requests"], out["request_us"] / SECOND, out["tokens"])
    problems = list(out["problems"])
    if out["request_us"] != d.journal.request_us:
        problems.append(f"request microseconds {out['request_us']:,}")
    return Timed(out["seconds"], Counted(totals, tuple(problems)))


# -- the report and the daemon ------------------------------------------------------------------


def command(tree: Tree, profile_to: Path | None = None) -> list[str]:
    """The tree's sm-llm-exporter, under cProfile writing to `profile_to` if given."""
    run = tree.exporter()
    if profile_to is None:
        return run
    if run[0] == tree.python:  # (`python -m exporter`: no console script)
        run = run[1:]
    return [tree.python, "-m", "cProfile", "-o", str(profile_to), *run]


def report_command(tree: Tree, d: Dump, profile_to: Path | None = None) -> list[str]:
    since_us, until_us = clock(d)
    window = ["--since", iso(since_us), "--until", iso(until_us)]
    dump = ["--input", f"{NODE}={d.path}", "--format", "json"]
    return [*command(tree, profile_to), "report", *window, *dump]


def report_row(tree: Tree, d: Dump) -> Timed[Counted]:
    run = run_process(report_command(tree, d), env=tree.env)
    done = run.value
    if done.returncode != 0:
        problem = f"exited {done.returncode}: {done.stderr[-SAID:]}"
        return Timed(run.seconds, Counted(NOTHING, (problem,)))
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


def counted_so_far(daemon: Daemon) -> Totals | None:
    """What the daemon's /metrics shows, once it listens and answers."""
    if daemon.bound() is None:
        return None
    try:
        with urllib.request.urlopen(daemon.url + "/metrics", timeout=SCRAPE_TIMEOUT_S) as r:
            return scraped(r.read().decode())
    except (urllib.error.URLError, ConnectionError):
        return None


def daemon_row(tree: Tree, d: Dump, profile_to: Path | None = None) -> Timed[Counted]:
    """The tree's `sm-llm-exporter run` on the dump (one `source: file` node, `since` before its
    first line, a fresh `state_dir`), timed from its start until /metrics shows every request;
    then SIGTERM, not timed (under cProfile writing to `profile_to` if given)."""
    want = d.journal.expected.requests
    config = {
        "since": iso(clock(d)[0]),
        "nodes": [{"name": NODE, "source": "file", "path": str(d.path)}],
    }
    got, seconds, problems = NOTHING, math.nan, []
    with tempfile.TemporaryDirectory(prefix="bench-ingest-daemon-") as tmp:
        daemon = Daemon(
            Path(tmp),
            config,
            command=lambda cfg: [*command(tree, profile_to), "run", "--config", str(cfg)],
            env=tree.env,
        )
        start = time.perf_counter()
        proc = daemon.launch()
        try:
            while time.perf_counter() - start < DAEMON_TIMEOUT_S:
                if proc.poll() is not None:
                    problems.append(f"exited {proc.returncode} before counting every request")
                    break
                got = counted_so_far(daemon) or got
                if got.requests >= want:
                    seconds = time.perf_counter() - start
                    break
                time.sleep(POLL_S)
            else:
                problems.append(f"{got.requests:,} requests after {DAEMON_TIMEOUT_S:.0f} s")
        finally:
            problems += stopped(daemon, quiet=bool(problems))
    return Timed(seconds, Counted(got, tuple(problems)))


def stopped(daemon: Daemon, *, quiet: bool) -> list[str]:
    """SIGTERM, and what went wrong stopping (its exit status only when nothing else did)."""
    try:
        daemon.stop(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        daemon.close()
        return [f"did not stop on SIGTERM within {STOP_TIMEOUT_S:.0f} s"]
    except RuntimeError as e:
        return [] if quiet else [str(e)[-SAID:]]
    return []


# -- mtail and grep -----------------------------------------------------------------------------

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


def mtail_row(mtail: str, path: Path) -> Timed[Counted]:
    run = run_process(mtail_command(mtail, path))
    done = run.value
    if done.returncode != 0:
        problem = f"mtail exited {done.returncode}: {done.stderr[-SAID:]}"
        return Timed(run.seconds, Counted(NOTHING, (problem,)))
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


def grep_row(grep: str, path: Path) -> Timed[Counted]:
    run = run_process([grep, "-c", "total time", str(path)], env=environment(LC_ALL="C"))
    done = run.value
    if done.returncode not in (0, 1):
        problem = f"grep exited {done.returncode}: {done.stderr}"
        return Timed(run.seconds, Counted(NOTHING, (problem,)))
    return Timed(run.seconds, Counted(Totals(int(done.stdout), math.nan, -1)))
