"""Benchmark following a node's journal dump (read, parse, account) against mtail, in lines/s.

    .venv/bin/python bench/ingest.py                    # 1,000,000 lines a dump, medians of 3
    .venv/bin/python bench/ingest.py --lines 200000 --repeat 5
    .venv/bin/python bench/ingest.py --against HEAD     # and the last commit's, in the same run
    .venv/bin/python bench/ingest.py --profile          # and where our time goes (cProfile)

Two workloads of one node, `node0`, deterministic (`random.Random`), `--lines` lines each:

- real: what a current (era D, 2026-05 on) llama-server writes. Almost only keyword lines: per
  request its launch line, its timing block (prompt eval, eval, total time, graphs reused) and
  its release line, three slots serving at once so that requests overlap and their lines
  interleave, every line behind the elapsed-time and level prefix current builds print
  (`50.10.605.993 I slot launch_slot_: id  1 | task 1024 | processing task, is_child = 0`, as
  llama.cpp's common/log.cpp writes it), an `all slots are idle` line when the last slot frees,
  and the start-up lines before the first request;
- mixed: one request at a time on slot 0 with no prefix, each request 15 lines of which two
  thirds hold no parser keyword (`params_from_`, prompt processing progress, health, model-list
  and metrics polls, `all slots are idle`, the POST line).

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
  caught up, every Batch through `ingest.step.apply_batch` and the ingest loop's tick
  (`Parser.flush`, `Accounting.advance`), the garbage collector tuned as the service tunes
  it (`ingest.memory.tune_gc`);
- the same reading path in a subprocess with SMLLM_PURE_PYTHON=1 (no compiled fast paths; what a
  machine without a C compiler at install time runs), timed inside it: a reference;
- grep: `grep -c 'total time' FILE` (LC_ALL=C), the floor;
- with `--against REV`: commit REV's daemon, report and reading path, the same rows on the same
  dumps in the same run, round-robin with ours. REV is checked out in a git worktree in the
  temporary directory and installed into a venv of its own (`python -m venv`, `pip install -e`:
  its compiled modules built there); its rows run its own console script and its own
  `bench/ingest.py --read-child` with its venv's Python, so a REV whose package is laid out
  otherwise runs as it is. The worktree is removed at the end. Below the tables: each row's
  ratio to mtail, ours and REV's, and ours against REV's.
Goals: the daemon and the report at least 4x mtail, the reading path at least 8x, each PASS or
FAIL (REV's rows have none). Below the tables: the fixed costs (every process on a 150-line
dump). Every tree's processes run as an installed package runs them: the exporter's modules
compiled to bytecode beforehand (into a cache in the temporary directory, PYTHONPYCACHEPREFIX),
not from source at every start.

Every row's counts are checked: requests, tokens and request seconds against the generated ones
(grep: the requests), every line read and none a parse error; exit 1 when one disagrees.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    JOURNAL_REMOTE,
    Row,
    Tool,
    arguments,
    machine,
    measure,
    missing,
    profile,
    ratio_table,
    run_process,
    tuned_gc,
    verdict,
)
from _dumps import Dump, Journal, write_dump, write_journal
from _ingest_rows import (
    PURE_ENV,
    Counted,
    clock,
    daemon_row,
    grep_row,
    mtail_row,
    read_child,
    read_path,
    read_row,
    report_command,
    report_row,
)
from _trees import Tree, built, this_tree
from _workload import NODE

DEFAULT_LINES = 1_000_000
TINY_LINES = 150  # the fixed costs are timed on dumps this long
GOAL_PROCESS = 4.0  # the daemon and the report: times mtail's speed
GOAL_READ = 8.0  # the reading path
FORMATS = ("short-iso-precise", "json")
WORKLOADS = ("real", "mixed")
# What a tree's rows time: (label, goal of ours).
PARTS = {
    "daemon": ("daemon process, until /metrics complete", GOAL_PROCESS),
    "report": ("report process (--format json)", GOAL_PROCESS),
    "reading path": ("reading path (its own process)", GOAL_READ),
}


# -- the rows -----------------------------------------------------------------------------------


@dataclass
class Bench:
    """One dump's rows, and each tree's by part."""

    dump: Dump
    mtail: Tool[Counted]
    rows: list[tuple[Tool[Counted], float | None]] = field(default_factory=list)
    parts: dict[str, dict[str, Tool[Counted]]] = field(default_factory=dict)

    @property
    def tools(self) -> list[Tool[Counted]]:
        return [t for t, _ in self.rows]


def tree_rows(tree: Tree, d: Dump) -> dict[str, Tool[Counted]]:
    """A tree's daemon, report and reading path on the dump, by part."""
    run = {
        "daemon": lambda: daemon_row(tree, d),
        "report": lambda: report_row(tree, d),
        "reading path": lambda: read_row(tree, d),
    }
    return {part: Tool(f"{tree.label}: {PARTS[part][0]}", run[part]) for part in PARTS}


def bench(d: Dump, mtail: str, grep: str, trees: Sequence[Tree]) -> Bench:
    """The floor, mtail, each tree's rows (ours first, with the goals), and ours in pure Python."""
    b = Bench(d, Tool("mtail --one_shot (Debian)", lambda: mtail_row(mtail, d.path)))
    b.rows = [(Tool("grep -c 'total time' (the floor)", lambda: grep_row(grep, d.path)), None)]
    b.rows.append((b.mtail, None))
    for tree in trees:
        b.parts[tree.label] = tree_rows(tree, d)
        goals = tree is trees[0]
        b.rows += [(t, PARTS[p][1] if goals else None) for p, t in b.parts[tree.label].items()]
    ours = trees[0]
    pure = Tool(
        f"ours: reading path, {PURE_ENV}=1 (subprocess)", lambda: read_row(ours, d, pure=True)
    )
    b.rows.append((pure, None))
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


def fixed_costs(d: Dump, mtail: str, repeat: int, trees: Sequence[Tree]) -> list[Tool[Counted]]:
    """Every process on a tiny dump: what each pays whatever the dump's size. Run first: an
    untimed run of each fills the bytecode cache with every module they import."""
    tools: list[Tool[Counted]] = [Tool("mtail --one_shot", lambda: mtail_row(mtail, d.path))]
    for tree in trees:
        daemon_row(tree, d)
        report_row(tree, d)
        rows = tree_rows(tree, d)
        tools += [rows["daemon"], rows["report"]]
    print(f"fixed costs, {d.lines} lines", file=sys.stderr, flush=True)
    measure(tools, repeat, sys.stderr)
    return tools


# -- the tables ---------------------------------------------------------------------------------


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


def goals(b: Bench) -> str:
    base = b.mtail.median
    verdicts = [
        f"{t.label.removeprefix('ours: ')} {base / t.median:.2f}x (>= {goal:g}x "
        f"{verdict(base / t.median >= goal)})"
        for t, goal in b.rows
        if goal is not None
    ]
    return f"goals, {b.dump.name}: " + "; ".join(verdicts)


def against(b: Bench, theirs: str) -> str:
    """Each part's ratio to mtail, ours and the other tree's, and ours against theirs."""
    base = b.mtail.median
    parts = []
    for part in PARTS:
        mine, other = b.parts["ours"][part].median, b.parts[theirs][part].median
        parts.append(
            f"{part}: ours {base / mine:.2f}x mtail, {theirs} {base / other:.2f}x "
            f"(ours / {theirs}: {other / mine:.2f}x)"
        )
    return f"against {theirs}, {b.dump.name}: " + "; ".join(parts)


def header(
    repeat: int, mtail: str, started: tuple[float, float, float], trees: Sequence[Tree]
) -> list[str]:
    version = subprocess.run(
        [mtail, "--version"], capture_output=True, text=True, check=False
    ).stdout.split()
    pure = os.environ.get(PURE_ENV, "") not in ("", "0")
    out = [
        f"bench/ingest: one node's journal dumps, medians of {repeat}, python "
        f"{sys.version.split()[0]}, mtail {version[2] if len(version) > 2 else '?'}, "
        f"{machine(started)}, compiled fast paths "
        f"{f'OFF ({PURE_ENV} is set)' if pure else 'as built'}"
    ]
    out += [
        f"against {t.label}: commit {t.commit}, in a git worktree with its own venv; compiled "
        f"modules {', '.join(t.compiled) or 'NONE: its rows run pure Python'}"
        for t in trees[1:]
    ]
    return out


def results(
    benches: Sequence[Bench], fixed: Sequence[Tool[Counted]], tiny: Dump, problems: Sequence[str]
) -> list[str]:
    """The workloads, the tables, the fixed costs, the goals, the comparisons, the counts."""
    out = [describe(j) for j in dict.fromkeys(b.dump.journal for b in benches)]
    for b in benches:
        out += ["", *table(b)]
    parts = ", ".join(f"{t.label} {t.median:.3f} s" for t in fixed)
    out += ["", f"fixed costs ({tiny.lines} lines, {tiny.name}, medians): {parts}", ""]
    out += [goals(b) for b in benches]
    out += [against(b, theirs) for b in benches for theirs in list(b.parts)[1:]]
    agree = "agree" if not problems else "DISAGREE"
    out.append(f"counts: every row {agree} with the generated requests, tokens and seconds")
    out += [f"  PROBLEM: {p}" for p in problems]
    return out


def profile_processes(d: Dump, tmp: Path, ours: Tree) -> str:
    """cProfile of the daemon (its main thread: the ingest loop; the file source's reads run
    in worker threads) and of the report, as processes on the dump; then the reading path
    in-process."""
    out = []
    for name in ("daemon", "report"):
        prof = tmp / f"{name}.prof"
        if name == "daemon":
            seconds = daemon_row(ours, d, profile_to=prof).seconds
        else:
            seconds = run_process(report_command(ours, d, profile_to=prof), env=ours.env).seconds
        out.append(f"\n== {name} process under cProfile: {seconds:.3f} s ==")
        if not prof.exists():
            out.append("(no profile written)")
            continue
        for key in ("tottime", "cumulative"):
            text = _stats(prof, key)
            out.append(f"-- {name}: top 20 by {key} --\n{text}")
    since, now = clock(d)
    out.append(profile(lambda: read_path(d.path, since, now), "reading path in-process", 20))
    return "\n".join(out)


def _stats(prof: Path, key: str) -> str:
    buf = io.StringIO()
    pstats.Stats(str(prof), stream=buf).strip_dirs().sort_stats(key).print_stats(20)
    return buf.getvalue()


# -- the run ------------------------------------------------------------------------------------


def make_dumps(lines: int, seed: int, tmp: Path, where: Path) -> tuple[list[Dump], Dump]:
    """Every workload's dumps in every form (in `where`), and the tiny one."""
    dumps: list[Dump] = []
    for workload in WORKLOADS:
        print(f"generating the {workload} workload, {lines:,} lines", file=sys.stderr, flush=True)
        j = write_journal(workload, tmp / workload, lines, seed)
        for form in FORMATS:
            ext = "json" if form == "json" else "log"
            dumps.append(write_dump(j, form, where / f"{NODE}-{workload}.{ext}"))
        shutil.rmtree(j.directory)  # the dumps are what is read
    tiny_j = write_journal("real", tmp / "tiny", TINY_LINES, seed)
    return dumps, write_dump(tiny_j, "short-iso-precise", tmp / "tiny.log")


def parser() -> argparse.ArgumentParser:
    ap = arguments(__doc__, "lines", DEFAULT_LINES, "lines in each dump")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="then profile the daemon, the report and the reading path on the real "
        "short-iso-precise dump (cProfile)",
    )
    ap.add_argument("--keep", type=Path, metavar="DIR", help="write the dumps to DIR and keep them")
    ap.add_argument(
        "--against",
        metavar="REV",
        help="also time commit REV's daemon, report and reading path on the same dumps (built "
        "in a git worktree with its own venv in the temporary directory)",
    )
    ap.add_argument(
        "--read-child", nargs=3, metavar=("PATH", "SINCE_US", "NOW_US"), help=argparse.SUPPRESS
    )
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser()
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
    repeat = max(1, args.repeat)
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp_name, ExitStack() as stack:
        tmp = Path(tmp_name)
        where = args.keep or tmp
        where.mkdir(parents=True, exist_ok=True)
        trees = [this_tree(tmp / "pycache")]  # our processes, with bytecode as installed
        if args.against:
            trees.append(stack.enter_context(built(args.against, tmp, sys.stderr)))
        dumps, tiny = make_dumps(args.lines, args.random_seed, tmp, where)
        tuned_gc()  # the garbage collector as the service runs it, for the in-process rows
        started = os.getloadavg()
        fixed = fixed_costs(tiny, mtail, repeat, trees)
        benches = [bench(d, mtail, grep, trees) for d in dumps]
        for k in range(repeat):
            print(f"round {k + 1} of {repeat}", file=sys.stderr, flush=True)
            for b in benches:
                print(f" {b.dump.name}", file=sys.stderr, flush=True)
                measure(b.tools, 1, sys.stderr)
        problems = [p for b in benches for t in b.tools for p in check(t, b.dump)]
        problems += [p for t in fixed for p in check(t, tiny)]
        for line in [
            *header(repeat, mtail, started, trees),
            *results(benches, fixed, tiny, problems),
        ]:
            print(line)
        if args.profile:
            real = next(d for d in dumps if d.journal.workload == "real" and d.form != "json")
            print(profile_processes(real, tmp, trees[0]))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
