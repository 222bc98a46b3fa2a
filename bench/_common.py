"""What the benchmarks share: timed runs, round-robin repetitions, tables of ratios, profiles.

- `Tool`: one row of a benchmark; its `run` returns a `Timed` value (the seconds it took and what
  it counted), so a row may time itself (a process timed until its output is complete, a
  subprocess that times its own work) or be timed whole with `timed`.
- `measure`: every tool `repeat` times, round-robin, so that a drift of the machine (page cache,
  frequency, another job) falls on all rows alike; `Tool.median` and `Tool.best` read the runs.
- `run_process`: a command timed from its start to its exit, output captured.
- `ratio_table`: rows of seconds, rates and the ratio to a baseline measured in the same run,
  with a PASS or FAIL where a row has a goal.
- `tuned_gc`: the garbage collector as the service runs it (`exporter.ingest.memory.tune_gc`).
- `profile`: cProfile of a callable, the top functions by own and by cumulative time.
- `arguments`: the command line every benchmark takes (its size, `--repeat`, `--random-seed`).
- `journal_remote`: journal export format into journal files, by systemd-journal-remote.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import math
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TextIO, TypeVar

from exporter.ingest.memory import tune_gc

T = TypeVar("T")
JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")  # Debian's systemd-journal-remote
ROOT = Path(__file__).resolve().parent.parent  # this work tree
PACKAGE = ROOT / "exporter"


@dataclass(frozen=True, slots=True)
class Timed(Generic[T]):
    """What one run counted, and how many seconds it took."""

    seconds: float
    value: T


def timed(fn: Callable[[], T]) -> Callable[[], Timed[T]]:
    """`fn` timed whole (wall clock), after a full collection so no earlier garbage is paid."""

    def run() -> Timed[T]:
        gc.collect()
        start = time.perf_counter()
        value = fn()
        return Timed(time.perf_counter() - start, value)

    return run


@dataclass
class Tool(Generic[T]):
    """One row: a label, how to run it once, and what its runs took and counted."""

    label: str
    run: Callable[[], Timed[T]]
    times: list[float] = field(default_factory=list)
    value: T | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def finite(self) -> list[float]:
        """The times of the runs that gave one (a failed run's time is NaN)."""
        return [t for t in self.times if not math.isnan(t)]

    @property
    def best(self) -> float:
        return min(self.finite, default=math.nan)

    @property
    def median(self) -> float:
        finite = self.finite
        return statistics.median(finite) if finite else math.nan

    def time_once(self) -> float:
        """Run once; a run that counts otherwise than the one before is a problem."""
        done = self.run()
        self.times.append(done.seconds)
        if self.value is not None and done.value != self.value:
            self.problems.append(f"counted {done.value} this time, {self.value} before")
        self.value = done.value
        return done.seconds


def measure(tools: Sequence[Tool[T]], repeat: int, log: TextIO) -> None:
    """Every tool `repeat` times, round-robin, each run's seconds to `log`."""
    for k in range(repeat):
        print(f"run {k + 1} of {repeat}", file=log, flush=True)
        for t in tools:
            print(f"  {t.label}: {t.time_once():.3f} s", file=log, flush=True)


def run_process(
    command: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Timed[subprocess.CompletedProcess[str]]:
    """`command` from its start to its exit (output captured, text), wall clock."""
    gc.collect()
    start = time.perf_counter()
    done = subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        check=False,
        env=None if env is None else dict(env),
        cwd=cwd,
    )
    return Timed(time.perf_counter() - start, done)


def environment(**changes: str | None) -> dict[str, str]:
    """This process's environment with `changes` (None: the variable removed)."""
    env = dict(os.environ)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


@dataclass(frozen=True, slots=True)
class Row:
    """A table row: seconds, an optional goal (times the baseline's rate) and free columns."""

    label: str
    seconds: float
    goal: float | None = None
    extra: tuple[str, ...] = ()


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def ratio_table(
    rows: Sequence[Row],
    baseline_seconds: float,
    *,
    rates: Sequence[tuple[str, int]],
    versus: str = "vs baseline",
    extra: Sequence[str] = (),
    label_width: int = 52,
) -> list[str]:
    """A fixed-width table: label, seconds, one rate column per (header, units) in `rates`
    (units / seconds), the ratio baseline_seconds / seconds, the goal's verdict, then `extra`
    columns (each row's `extra`, right-aligned under these headers)."""
    widths = [max(len(h), 12) for h, _ in rates]
    extra_widths = [max(len(h), 9) for h in extra]
    head = f"{'tool':<{label_width}} {'seconds':>8}"
    head += "".join(f" {h:>{w}}" for (h, _), w in zip(rates, widths, strict=True))
    head += f" {versus:>{max(len(versus), 9)}} {'goal':>13}"
    head += "".join(f" {h:>{w}}" for h, w in zip(extra, extra_widths, strict=True))
    out = [head, "-" * len(head)]
    for r in rows:
        ratio = baseline_seconds / r.seconds
        line = f"{r.label:<{label_width}} {r.seconds:8.3f}"
        line += "".join(
            f" {n / r.seconds:{w},.0f}" for (_, n), w in zip(rates, widths, strict=True)
        )
        ratio_text = f"{ratio:.2f}x"
        line += f" {ratio_text:>{max(len(versus), 9)}}"
        goal = "-" if r.goal is None else f">={r.goal:g}x {verdict(ratio >= r.goal)}"
        line += f" {goal:>13}"
        line += "".join(f" {x:>{w}}" for x, w in zip(r.extra, extra_widths, strict=True))
        out.append(line)
    return out


def tuned_gc() -> None:
    """The garbage collector as the service tunes it, for every in-process row after this."""
    tune_gc()


def profile(fn: Callable[[], object], title: str, top: int = 15) -> str:
    """cProfile of one call of `fn` (this thread only): the top `top` by own time, then by
    cumulative time."""
    prof = cProfile.Profile()
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    out = io.StringIO()
    for key in ("tottime", "cumulative"):
        out.write(f"\n-- {title}: top {top} by {key} --\n")
        stats = pstats.Stats(prof, stream=out)
        stats.strip_dirs().sort_stats(key).print_stats(top)
    return out.getvalue()


def installed(cache: Path, python: str = sys.executable, package: Path = PACKAGE) -> dict[str, str]:
    """The environment for the processes of `python` as an installed package runs them: the
    exporter's modules (`package`) compiled to bytecode once, into `cache`
    (PYTHONPYCACHEPREFIX, so the work tree gets no __pycache__), and PYTHONDONTWRITEBYTECODE
    unset. Without it every process would compile the modules from source at its start (what
    pip install does ahead of time)."""
    env = environment(PYTHONDONTWRITEBYTECODE=None, PYTHONPYCACHEPREFIX=str(cache))
    subprocess.run([python, "-m", "compileall", "-q", str(package)], env=env, check=True)
    return env


def machine(load_before: tuple[float, float, float]) -> str:
    """CPUs and the load average before and after the runs: whether the machine was quiet."""
    before = "/".join(f"{x:.2f}" for x in load_before)
    after = "/".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs, load average {before} before, {after} after"


def missing(bench: str, what: str) -> int:
    """Say what a benchmark needs and this machine lacks; returns the exit status for that."""
    print(f"bench/{bench}: needs {what}", file=sys.stderr)
    return 2


def arguments(doc: str | None, size: str, default: int, what: str) -> argparse.ArgumentParser:
    """`--SIZE N` (`what`, default `default`), `--repeat K` and `--random-seed S`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    ap.add_argument(
        f"--{size}", type=int, default=default, metavar="N", help=f"{what} (default {default:,})"
    )
    ap.add_argument(
        "--repeat", type=int, default=3, metavar="K", help="the median of K runs each (default 3)"
    )
    ap.add_argument("--random-seed", type=int, default=1, metavar="S", help="workload seed")
    return ap


def journal_remote(output: Path, export: Iterable[str]) -> int:
    """Entries in journal export format (each ending in a blank line) into journal files, by
    systemd-journal-remote: `output` (named `*.journal`) and, past about 80 MB each, the files
    it rotates to beside it. Returns the bytes fed; RuntimeError when it fails."""
    size = 0
    buf: list[str] = []
    with subprocess.Popen(
        [str(JOURNAL_REMOTE), "-o", str(output), "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdin is not None and proc.stderr is not None
        for text in export:
            buf.append(text)
            if len(buf) >= 16_384:
                data = "".join(buf).encode()
                size += len(data)
                proc.stdin.write(data)
                buf.clear()
        data = "".join(buf).encode()
        size += len(data)
        proc.stdin.write(data)
        proc.stdin.close()
        err = proc.stderr.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{JOURNAL_REMOTE} exited {proc.returncode}: {err[-2000:]}")
    return size
