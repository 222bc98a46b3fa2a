"""Start-up phases as intervals: the model of vllm-omni's init timeline, its table and timeouts.

A start-up is a `Timeline`: when it began (`t0`), when it was done (`t_end`, None while it runs)
and its `Phase`s, each an interval on one process (name, start, end, stage, replica, PID, role,
extra), in seconds since the epoch as floats, as vllm-omni's `init_timeline.py` records them.
`Timeline.table()` and `Timeline.suggest_timeouts()` give what that module's `format_table()` and
`suggest_timeouts()` give on the same phases, character for character (the tests run the seed's
own code on them); `merge()` takes phases in with its de-duplication key (pid, name, start). Both
kinds of start-up use it: llama-server's, read from the journal (`llama.py`), and vllm-omni's,
read from its files (`vllm.py`). Pure: no clock, no I/O; a running start-up's total is up to
the `now` the caller gives.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# vllm-omni's floors: a suggested timeout is never below these (seconds)
DEFAULT_STAGE_INIT_TIMEOUT_S = 300
DEFAULT_INIT_TIMEOUT_S = 600
DEFAULT_FACTOR = 1.5
MAX_TIMEOUT_S = 10**15  # (a suggestion beyond any span a time can make)
# what an init-timeline node's figures hold at most: (stage, role, phase) series, label length
MAX_SERIES, MAX_LABEL = 500, 200
NAMED = 5  # malformed records named in the log (all are counted)


@dataclass(frozen=True, slots=True)
class Phase:
    """One timed block of a start-up, on one process."""

    name: str
    start: float
    end: float
    stage_id: int | None = None
    replica_id: int = 0
    pid: int = 0
    role: str = "engine"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def dur_s(self) -> float:
        return max(0.0, self.end - self.start)

    @property
    def key(self) -> tuple[int, str, float]:
        """What makes two records one phase (a worker's line read twice)."""
        return (self.pid, self.name, self.start)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "start": self.start,
            "end": self.end,
            "stage_id": self.stage_id,
            "replica_id": self.replica_id,
            "pid": self.pid,
            "role": self.role,
            "extra": dict(self.extra),
            "dur_s": self.dur_s,
        }


@dataclass(frozen=True, slots=True)
class Timeline:
    """One start-up: its phases in (start, end) order, from `t0` to `t_end` (None: not done)."""

    t0: float
    t_end: float | None
    phases: tuple[Phase, ...]

    @classmethod
    def of(cls, t0: float, t_end: float | None, phases: Iterable[Phase]) -> Timeline:
        return cls(t0, t_end, tuple(sorted(phases, key=_order)))

    def merge(self, phases: Iterable[Phase]) -> tuple[Timeline, int]:
        """This timeline with `phases` added, but for those whose key it holds already (or one
        before them in `phases`); and how many were added."""
        seen = {p.key for p in self.phases}
        added: list[Phase] = []
        for p in phases:
            if p.key not in seen:
                seen.add(p.key)
                added.append(p)
        return Timeline.of(self.t0, self.t_end, (*self.phases, *added)), len(added)

    def total_s(self, now: float | None = None) -> float:
        """From t0 to t_end; to `now` for a start-up not done (0 without a `now`)."""
        end = self.t_end if self.t_end is not None else now
        return 0.0 if end is None else max(0.0, end - self.t0)

    def stage_spans(self) -> dict[int | None, tuple[float, float]]:
        """Each stage's first start and last end (None: phases of no stage)."""
        spans: dict[int | None, tuple[float, float]] = {}
        for p in self.phases:
            lo, hi = spans.get(p.stage_id, (p.start, p.end))
            spans[p.stage_id] = (min(lo, p.start), max(hi, p.end))
        return spans

    def table(self, now: float | None = None) -> str:
        """The phase table, as vllm-omni's `format_table()` prints it."""
        header = f"{'stage':>5} {'role':<7} {'pid':>8} {'phase':<28} {'start_s':>9} {'dur_s':>9}"
        lines = [
            f"[init_timeline] total={self.total_s(now):.2f}s phases={len(self.phases)}",
            header,
            "-" * len(header),
        ]
        for p in self.phases:
            stage = "-" if p.stage_id is None else str(p.stage_id)
            lines.append(
                f"{stage:>5} {p.role:<7} {p.pid:>8} {p.name[:28]:<28} "
                f"{p.start - self.t0:>9.2f} {p.dur_s:>9.2f}"
            )
        return "\n".join(lines)

    def suggest_timeouts(
        self, factor: float = DEFAULT_FACTOR, now: float | None = None
    ) -> dict[str, int]:
        """Timeouts (seconds) that would have covered this start-up with `factor` headroom, as
        vllm-omni's `suggest_timeouts()`: the longest stage span and the total, each times the
        factor, rounded up, never below the floors."""
        stage_max = 0.0
        for stage_id, (lo, hi) in self.stage_spans().items():
            if stage_id is not None:
                stage_max = max(stage_max, hi - lo)
        return {
            "stage_init_timeout": max(DEFAULT_STAGE_INIT_TIMEOUT_S, _ceil(stage_max * factor)),
            "init_timeout": max(DEFAULT_INIT_TIMEOUT_S, _ceil(self.total_s(now) * factor)),
        }

    def from_t0(self) -> Timeline:
        """Only the phases that began at t0 or after: this start-up's, where a run directory
        holds older ones' too."""
        return Timeline(self.t0, self.t_end, tuple(p for p in self.phases if p.start >= self.t0))

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        return {
            "t0": self.t0,
            "t_end": self.t_end,
            "total_s": self.total_s(now),
            "phases": [p.to_dict() for p in self.phases],
        }


def _ceil(seconds: float) -> int:
    """Seconds rounded up (a span beyond any time, inf included, is MAX_TIMEOUT_S)."""
    return math.ceil(seconds) if seconds < MAX_TIMEOUT_S else MAX_TIMEOUT_S


def _order(p: Phase) -> tuple[float, float]:
    return (p.start, p.end)


def covering(
    timelines: Iterable[Timeline], factor: float, now: float | None = None
) -> dict[str, int]:
    """The timeouts that cover every one of `timelines` (each key's largest; the floors when
    there are none)."""
    out = {
        "stage_init_timeout": DEFAULT_STAGE_INIT_TIMEOUT_S,
        "init_timeout": DEFAULT_INIT_TIMEOUT_S,
    }
    for t in timelines:
        for k, v in t.suggest_timeouts(factor, now).items():
            out[k] = max(out[k], v)
    return out


@dataclass(frozen=True, slots=True)
class Figures:
    """What the exporter shows of one init-timeline node: its last start-up as last read (the
    longest of each (stage, role, phase): a stage's processes run theirs side by side)."""

    node: str
    up: bool  # its files could be read
    error: str = ""  # why not
    t0: float | None = None
    total_s: float | None = None
    phases: tuple[tuple[str, str, str, float], ...] = ()  # (stage, role, phase, seconds)
    suggested: tuple[tuple[str, int], ...] = ()  # (timeout, seconds)
    skipped: int = 0  # malformed records in the files read
    named: tuple[str, ...] = ()  # the first few of them, named by file and line

    @classmethod
    def of(
        cls,
        node: str,
        timeline: Timeline,
        skipped: Sequence[str],
        factor: float,
        now: float,
    ) -> Figures:
        named = tuple(skipped[:NAMED])
        count = len(skipped)
        longest: dict[tuple[str, str, str], float] = {}
        for p in timeline.phases:
            key = ("-" if p.stage_id is None else str(p.stage_id), p.role[:MAX_LABEL], p.name)
            key = (*key[:2], key[2][:MAX_LABEL])
            if key in longest or len(longest) < MAX_SERIES:
                longest[key] = max(longest.get(key, 0.0), p.dur_s)
            else:
                count += 1  # (beyond the series a node may have: counted, not shown)
        return cls(
            node,
            True,
            "",
            timeline.t0,
            timeline.total_s(now),
            tuple((*k, v) for k, v in sorted(longest.items())),
            tuple(timeline.suggest_timeouts(factor, now).items()),
            count,
            named,
        )
