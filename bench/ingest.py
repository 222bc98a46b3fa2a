"""Benchmark following a node's journal dump (read, parse, account) against mtail, in lines/s.

    .venv/bin/python bench/ingest.py                    # 1,000,000 lines a dump, medians of 3
    .venv/bin/python bench/ingest.py --lines 200000 --repeat 5
    .venv/bin/python bench/ingest.py --against HEAD     # and the last commit's, in the same run
    .venv/bin/python bench/ingest.py --profile          # and where our time goes (cProfile)
    .venv/bin/python bench/ingest.py --write-readme     # and the table in bench/README.md

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
- with `--against REV`: commit REV's daemon, report, reading path and pure-Python reading path,
  the same rows on the same dumps in the same run, round-robin with ours. REV is checked out in
  a git worktree in the temporary directory and installed into a venv of its own (`python -m
  venv`, `pip install -e`: its compiled modules built there); its rows run its own console
  script and its own `bench/ingest.py --read-child` with its venv's Python, so a REV whose
  package is laid out otherwise runs as it is. The worktree is removed at the end. Below the
  tables: each of our rows against REV's (seconds, ratios to mtail, ours over REV's speed),
  those of ours 5% or more slower named.
Goals (issue 34), each PASS or FAIL (REV's rows have none): on the real workload, the daemon at
least 8x mtail in short-iso-precise and 10x in json, and its seconds at most 8x grep's in
short-iso-precise; the report at least 8x mtail in both forms; the reading path at least 15x
mtail in short-iso-precise. Below the tables: the fixed costs (every process on a 150-line
dump). Every tree's processes run as an installed package runs them: the exporter's modules
compiled to bytecode beforehand (into a cache in the temporary directory, PYTHONPYCACHEPREFIX),
not from source at every start.

With `--write-readme`, a run whose counts all agree rewrites the Ingest table of bench/README.md
(between `<!-- ingest-table:begin -->` and `<!-- ingest-table:end -->`): our rows' seconds and
ratios to mtail, the goals in bold, grep's, the fixed costs and which goals were met, under a
line giving the date (UTC), the commit (`+ changes` when the work tree differs from it, the
README aside), the CPUs, the load average before and after and the medians' count.

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
from datetime import UTC, datetime
from pathlib import Path

from _common import (
    JOURNAL_REMOTE,
    ROOT,
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
FORMATS = ("short-iso-precise", "json")
WORKLOADS = ("real", "mixed")
# What a tree's rows time, by part: the row's label.
PARTS = {
    "daemon": "daemon process, until /metrics complete",
    "report": "report process (--format json)",
    "reading path": "reading path (its own process)",
    "pure reading path": f"reading path, {PURE_ENV}=1",
}
SLOWER = 0.95  # ours at most this share of REV's speed is named in the comparison
README = ROOT / "bench" / "README.md"
TABLE_BEGIN = "<!-- ingest-table:begin -->"  # what --write-readme rewrites, in README
TABLE_END = "<!-- ingest-table:end -->"


@dataclass(frozen=True, slots=True)
class Goal:
    """One goal of our rows on one dump (`Dump.name`): at least `times` mtail's speed, or, with
    `of_grep`, at most `times` grep's seconds."""

    part: str
    dump: str
    times: float
    of_grep: bool = False

    def ratio(self, seconds: float, mtail: float, grep: float) -> float:
        """What the goal bounds: mtail's seconds over ours, or ours over grep's."""
        return seconds / grep if self.of_grep else mtail / seconds

    def met(self, ratio: float) -> bool:
        return ratio <= self.times if self.of_grep else ratio >= self.times

    def bound(self) -> str:
        return f"{'<=' if self.of_grep else '>='} {self.times:g}x"


# Issue 34's goals, on the real workload.
GOALS = (
    Goal("daemon", "real, short-iso-precise", 8.0),
    Goal("daemon", "real, short-iso-precise", 8.0, of_grep=True),
    Goal("daemon", "real, json", 10.0),
    Goal("report", "real, short-iso-precise", 8.0),
    Goal("report", "real, json", 8.0),
    Goal("reading path", "real, short-iso-precise", 15.0),
)


def goal_of(part: str, dump: str, *, of_grep: bool = False) -> Goal | None:
    return next((g for g in GOALS if (g.part, g.dump, g.of_grep) == (part, dump, of_grep)), None)


# -- the rows -----------------------------------------------------------------------------------


@dataclass
class Bench:
    """One dump's rows (each with its goal against mtail, if any), and each tree's by part."""

    dump: Dump
    grep: Tool[Counted]
    mtail: Tool[Counted]
    rows: list[tuple[Tool[Counted], float | None]] = field(default_factory=list)
    parts: dict[str, dict[str, Tool[Counted]]] = field(default_factory=dict)

    @property
    def tools(self) -> list[Tool[Counted]]:
        return [t for t, _ in self.rows]


def tree_rows(tree: Tree, d: Dump) -> dict[str, Tool[Counted]]:
    """A tree's daemon, report, reading path and pure-Python reading path on the dump, by part."""
    run = {
        "daemon": lambda: daemon_row(tree, d),
        "report": lambda: report_row(tree, d),
        "reading path": lambda: read_row(tree, d),
        "pure reading path": lambda: read_row(tree, d, pure=True),
    }
    return {part: Tool(f"{tree.label}: {PARTS[part]}", run[part]) for part in PARTS}


def bench(d: Dump, mtail: str, grep: str, trees: Sequence[Tree]) -> Bench:
    """The floor, mtail, and each tree's rows (ours first, with the goals)."""
    b = Bench(
        d,
        Tool("grep -c 'total time' (the floor)", lambda: grep_row(grep, d.path)),
        Tool("mtail --one_shot (Debian)", lambda: mtail_row(mtail, d.path)),
    )
    b.rows = [(b.grep, None), (b.mtail, None)]
    for tree in trees:
        b.parts[tree.label] = tree_rows(tree, d)
        for part, t in b.parts[tree.label].items():
            goal = goal_of(part, d.name) if tree is trees[0] else None
            b.rows.append((t, None if goal is None else goal.times))
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
        label_width=max(52, *(len(r.label) for r in rows)),
    )
    return out


def goals_met(b: Bench) -> list[tuple[Goal, float, bool]]:
    """Each goal on the dump: the ratio it bounds, and whether it is met."""
    out = []
    for g in GOALS:
        if g.dump == b.dump.name:
            ratio = g.ratio(b.parts["ours"][g.part].median, b.mtail.median, b.grep.median)
            out.append((g, ratio, g.met(ratio)))
    return out


def goals(b: Bench) -> list[str]:
    verdicts = []
    for g, ratio, ok in goals_met(b):
        of = " grep's seconds" if g.of_grep else ""
        verdicts.append(f"{g.part} {ratio:.2f}x{of} ({g.bound()} {verdict(ok)})")
    return [f"goals, {b.dump.name}: " + "; ".join(verdicts)] if verdicts else []


def against(benches: Sequence[Bench], theirs: str) -> list[str]:
    """Each of our rows against the other tree's: seconds, ratios to mtail, and our speed over
    theirs; then ours that are slower by 5% or more."""
    head = (
        f"{'against ' + theirs + ': dump, part':<44} {'ours s':>8} {theirs + ' s':>10} "
        f"{'ours x mtail':>13} {theirs + ' x mtail':>15} {'ours / ' + theirs:>15}"
    )
    out, slower = [head, "-" * len(head)], []
    for b in benches:
        base = b.mtail.median
        for part in PARTS:
            mine, other = b.parts["ours"][part].median, b.parts[theirs][part].median
            speed = other / mine
            out.append(
                f"{b.dump.name + ', ' + part:<44} {mine:8.3f} {other:10.3f} "
                f"{f'{base / mine:.2f}x':>13} {f'{base / other:.2f}x':>15} {f'{speed:.2f}x':>15}"
            )
            if not speed > SLOWER:
                slower.append(f"{b.dump.name}, {part} ({speed:.2f}x)")
    if slower:
        out.append(f"SLOWER than {theirs} by 5% or more: " + "; ".join(slower))
    else:
        out.append(f"no row of ours is 5% or more slower than {theirs}'s")
    return out


def header(repeat: int, mtail: str, load: str, trees: Sequence[Tree]) -> list[str]:
    version = subprocess.run(
        [mtail, "--version"], capture_output=True, text=True, check=False
    ).stdout.split()
    pure = os.environ.get(PURE_ENV, "") not in ("", "0")
    out = [
        f"bench/ingest: one node's journal dumps, medians of {repeat}, python "
        f"{sys.version.split()[0]}, mtail {version[2] if len(version) > 2 else '?'}, "
        f"{load}, compiled fast paths "
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
    out += [line for b in benches for line in goals(b)]
    for theirs in list(benches[0].parts)[1:]:
        out += ["", *against(benches, theirs), ""]
    agree = "agree" if not problems else "DISAGREE"
    out.append(f"counts: every row {agree} with the generated requests, tokens and seconds")
    out += [f"  PROBLEM: {p}" for p in problems]
    return out


# -- the README's table ------------------------------------------------------------------------

# The README table's columns of ours, by part.
README_PARTS = {
    "daemon": "daemon process",
    "report": "report process",
    "reading path": "reading path (own process)",
    "pure reading path": "pure Python reading path",
}


@dataclass(frozen=True, slots=True)
class Measured:
    """What the line above the README's table says of the run."""

    commit: str  # HEAD's short hash, `+ changes` when the work tree differs from it
    lines: int  # a dump's
    repeat: int
    load: str  # the CPUs and the load average before and after (`_common.machine`)


def commit() -> str:
    """HEAD's short hash, with `+ changes` when a tracked file (bench/README.md aside, which
    --write-readme rewrites) differs from it."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if head.returncode != 0:
        return "unknown"
    readme = README.relative_to(ROOT)
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", f":!{readme}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return head.stdout.strip() + (" + changes" if status.stdout.strip() else "")


def times(ratio: float) -> str:
    """A ratio as the README gives it, to two or three figures."""
    if ratio >= 20:
        return f"{ratio:.0f}x"
    return f"{ratio:.1f}x" if ratio >= 1 else f"{ratio:.2f}x"


def seconds(s: float) -> str:
    """Seconds as the README gives them, to two or three figures."""
    return f"{s:.1f} s" if s >= 10 else f"{s:.2f} s" if s >= 0.1 else f"{s:.3f} s"


def goal_text(g: Goal, ratio: float) -> str:
    """A ratio with a goal: in bold, the goal beside it, and whether it was missed."""
    missed = "" if g.met(ratio) else ", not met"
    if g.of_grep:
        return f"**{times(ratio)} grep's seconds** (goal at most {g.times:g}x{missed})"
    return f"**{times(ratio)}** (goal {g.times:g}x{missed})"


def cell(b: Bench, part: str) -> str:
    """Our part's seconds and ratio to mtail, and the goals that apply to it on this dump."""
    took = b.parts["ours"][part].median
    g = goal_of(part, b.dump.name)
    ratio = b.mtail.median / took
    out = [seconds(took), times(ratio) if g is None else goal_text(g, ratio)]
    g = goal_of(part, b.dump.name, of_grep=True)
    if g is not None:
        out.append(goal_text(g, g.ratio(took, b.mtail.median, b.grep.median)))
    return ", ".join(out)


def missed(benches: Sequence[Bench]) -> str:
    """The goals not met, or that every one is."""
    out = []
    for b in benches:
        for g, ratio, ok in goals_met(b):
            if not ok:
                of = "grep's seconds, goal at most" if g.of_grep else "mtail's speed, goal"
                out.append(f"the {g.part} on {b.dump.name} ({times(ratio)} {of} {g.times:g}x)")
    return f"Not met: {'; '.join(out)}." if out else "Every goal is met."


def readme_table(
    benches: Sequence[Bench], fixed: Sequence[Tool[Counted]], tiny: Dump, m: Measured
) -> list[str]:
    """What goes between the README's markers: the run, the table, the fixed costs, the goals."""
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    pure = os.environ.get(PURE_ENV, "") not in ("", "0")
    out = [
        f"Last measured {when}, commit {m.commit}, {m.load}; {m.lines:,} lines a dump, medians "
        f"of {m.repeat}{f', compiled fast paths off ({PURE_ENV} set)' if pure else ''}; every "
        "row counted the generated requests, tokens and seconds exactly:",
        "",
        "| workload, form | mtail | " + " | ".join(README_PARTS.values()) + " | grep (floor) |",
        "|---|" + "---:|" * (len(README_PARTS) + 2),
    ]
    for b in benches:
        d = b.dump
        mtail, grep = b.mtail.median, b.grep.median
        row = [f"{d.name} ({d.size / 1e6:,.0f} MB)", seconds(mtail)]
        row += [cell(b, part) for part in README_PARTS]
        row.append(f"{seconds(grep)}, {times(mtail / grep)}")
        out.append("| " + " | ".join(row) + " |")
    mtail_s, daemon_s, report_s = (t.median for t in fixed[:3])  # mtail, then ours
    out += [
        "",
        f"Fixed costs, on a {tiny.lines}-line dump: mtail {mtail_s:.3f} s, the daemon "
        f"{daemon_s:.3f} s, the report {report_s:.3f} s.",
        missed(benches),
    ]
    return out


def table_span(text: str) -> tuple[int, int]:
    """Where the text between the README's markers starts and ends; ValueError without them."""
    begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if begin < 0 or end < begin or text.count(TABLE_BEGIN) != 1 or text.count(TABLE_END) != 1:
        raise ValueError(f"{README} needs one {TABLE_BEGIN} line and, after it, one {TABLE_END}")
    return begin + len(TABLE_BEGIN), end


def readme_ready(ap: argparse.ArgumentParser) -> None:
    """The README's markers, found before the run rather than after it (an error otherwise)."""
    try:
        table_span(README.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        ap.error(f"--write-readme: {e}")


def write_readme(lines: Sequence[str]) -> None:
    """`lines` between the README's markers, in place of what was there."""
    text = README.read_text(encoding="utf-8")
    begin, end = table_span(text)
    new = text[:begin] + "\n" + "\n".join(lines) + "\n" + text[end:]
    part = README.with_name(README.name + ".part")
    part.write_text(new, encoding="utf-8")
    part.replace(README)


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
        help="also time commit REV's daemon, report and reading paths on the same dumps (built "
        "in a git worktree with its own venv in the temporary directory)",
    )
    ap.add_argument(
        "--write-readme",
        action="store_true",
        help="then, if every count agrees, rewrite the Ingest table of bench/README.md with this "
        "run's figures",
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
    if args.write_readme:
        readme_ready(ap)
    mtail, grep = shutil.which("mtail"), shutil.which("grep")
    if mtail is None or grep is None or not JOURNAL_REMOTE.exists():
        return missing(
            "ingest",
            "mtail, grep, journalctl and systemd-journal-remote "
            "(Debian packages mtail, grep, systemd, systemd-journal-remote)",
        )
    repeat = max(1, args.repeat)
    head = commit()  # the tree measured, before anyone edits it
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
        load = machine(started)
        for line in [*header(repeat, mtail, load, trees), *results(benches, fixed, tiny, problems)]:
            print(line)
        if args.write_readme and problems:
            print(f"{README}: not written, the counts disagree", file=sys.stderr)
        elif args.write_readme:
            write_readme(
                readme_table(benches, fixed, tiny, Measured(head, args.lines, repeat, load))
            )
            print(f"{README}: the Ingest table written", file=sys.stderr)
        if args.profile:
            real = next(d for d in dumps if d.journal.workload == "real" and d.form != "json")
            print(profile_processes(real, tmp, trees[0]))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
