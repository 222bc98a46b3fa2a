"""The start-up reports: each start-up's phase table, and the timeouts that would have covered it.

`report --startups` prints, for every llama-server start-up that began in the window (a wake-up
from sleep is one too), vllm-omni's phase table (`phases.Timeline.table`) under a line saying whose
it was and how it ended; then the timeouts vllm-omni's rule suggests over the starts (the longest
span times the factor, never below its floors), with the `TimeoutStartSec=` they make for the unit.
`report --init-timeline` prints a vllm-omni timeline's table, its per-stage spans and its suggested
timeouts. Both come as text or as JSON (the same figures, and each table as text). A name or role
in a table, and a skipped record's reason, shows its control characters escaped (`\\x1b`, `\\n`):
what a file or a journal says cannot break a row or drive the terminal. Pure: the caller reads the
inputs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from exporter.base.logs import escape
from exporter.base.records import MILESTONE_WAKING
from exporter.base.times import SECOND, iso
from exporter.startup.llama import DONE, REPLACED, RUNNING, STOPPED, WAKE, Startup
from exporter.startup.phases import (
    DEFAULT_INIT_TIMEOUT_S,
    DEFAULT_STAGE_INIT_TIMEOUT_S,
    Timeline,
    covering,
)

_HOW = {
    DONE: "listening after {s:.2f} s",
    STOPPED: "never listening: the unit went down after {s:.2f} s",
    REPLACED: "never listening: a new start-up began after {s:.2f} s",
    RUNNING: "not listening by the end of what was read ({s:.2f} s so far)",
}
# a wake-up's (from sleep): done when its reload's `n_slots` came, the request that woke it
# served next
_HOW_WAKE = {
    DONE: "serving again after {s:.2f} s (what the request that woke it waited)",
    STOPPED: "never serving again: the unit went down after {s:.2f} s",
    REPLACED: "never serving again: a new start-up began after {s:.2f} s",
    RUNNING: "not serving by the end of what was read ({s:.2f} s so far)",
}
# a start-up's first milestone, none missed
_WHOLE = ("starting", "started", "initializing", MILESTONE_WAKING)


def startups_text(startups: Sequence[Startup], factor: float, unit: str) -> str:
    """Every start-up's table, then the timeouts that cover them all."""
    out: list[str] = []
    for s in startups:
        out.append(_headline(s))
        out.append(table(s.timeline()))
        out.append("")
    if not startups:
        out += ["no llama-server start-up began in the window", ""]
    out += _suggestion(startups, factor, unit)
    return "\n".join(out) + "\n"


def startups_json(
    startups: Sequence[Startup], factor: float, unit: str, since_us: int, until_us: int
) -> str:
    rows = []
    for s in startups:
        t = s.timeline()
        rows.append(
            {
                "node": s.node,
                "kind": s.kind,
                "pid": s.pid,
                "start": s.start_us / SECOND,
                "end": s.end_us / SECOND,
                "ended": s.end,
                "seconds": s.seconds,
                "first_mark": s.milestones[0][0] if s.milestones else None,
                "timeline": t.to_dict(),
                "table": table(t),
                "suggested": t.suggest_timeouts(factor),
            }
        )
    suggested: dict[str, int] | None = None  # (none to measure: no suggestion)
    starts = _starts(startups)
    if starts:
        suggested = covering([s.timeline() for s in starts], factor)
        suggested["TimeoutStartSec"] = suggested["init_timeout"]
    doc: dict[str, Any] = {
        "since": since_us / SECOND,
        "until": until_us / SECOND,
        "factor": factor,
        "unit": unit,
        "startups": rows,
        "suggested": suggested,
    }
    return json.dumps(doc, indent=2) + "\n"


def _starts(startups: Sequence[Startup]) -> list[Startup]:
    """The start-ups TimeoutStartSec bounds: not the wake-ups from sleep."""
    return [s for s in startups if s.kind != WAKE]


def _headline(s: Startup) -> str:
    wake = s.kind == WAKE
    how = (_HOW_WAKE if wake else _HOW)[s.end].format(s=s.seconds)
    what = "wake-up from sleep" if wake else "start-up"
    line = f"{s.node}: {what} at {iso(s.start_us)}, llama-server PID {s.pid or '?'}, {how}"
    if s.milestones and s.milestones[0][0] not in _WHOLE:
        line += f" (its first line read was `{s.milestones[0][0]}`: earlier ones were not read)"
    return escape(line)


def _suggestion(startups: Sequence[Startup], factor: float, unit: str) -> list[str]:
    floors = (
        f"never below {DEFAULT_STAGE_INIT_TIMEOUT_S} s a stage, {DEFAULT_INIT_TIMEOUT_S} s in all"
    )
    startups = _starts(startups)
    if not startups:
        return [f"suggested timeouts: none (no start-up to measure; the floors: {floors})"]
    longest = max(startups, key=lambda s: s.seconds)
    suggested = covering([s.timeline() for s in startups], factor)
    unfinished = sum(1 for s in startups if not s.done)
    out = [
        f"suggested timeouts (vllm-omni's rule: the longest span times {factor:g}, {floors}), "
        f"over {len(startups)} start-up{'s' if len(startups) != 1 else ''}; the longest "
        f"{longest.seconds:.2f} s on {longest.node} at {iso(longest.start_us)}",
    ]
    if unfinished:
        out.append(
            f"  ({unfinished} never listened: their spans up to where they ended count, and "
            "a start-up systemd stopped at TimeoutStartSec was longer still)"
        )
    out += [
        "  " + _pairs(suggested),
        f"  for the unit (systemctl edit {unit}):",
        "    [Service]",
        f"    TimeoutStartSec={suggested['init_timeout']}",
    ]
    return out


def timeline_text(t: Timeline, factor: float, now: float, skipped: Sequence[str]) -> str:
    """A vllm-omni timeline: its table, its stages' spans, the timeouts; what was skipped."""
    out = [table(t, now), "", "stage spans:"]
    for stage, (lo, hi) in sorted(t.stage_spans().items(), key=_stage_order):
        name = "-" if stage is None else str(stage)
        out.append(
            f"  stage {name:>5}: {hi - lo:9.2f} s  (start_s {lo - t.t0:.2f} to {hi - t.t0:.2f})"
        )
    suggested = t.suggest_timeouts(factor, now)
    out += ["", f"suggested timeouts (factor {factor:g}): " + _pairs(suggested)]
    if skipped:
        out.append(f"skipped {len(skipped)} malformed record{'s' if len(skipped) != 1 else ''}:")
        out += [f"  {escape(why)}" for why in skipped]
    return "\n".join(out) + "\n"


def timeline_json(t: Timeline, factor: float, now: float, skipped: Sequence[str]) -> str:
    doc = {
        **t.to_dict(now),
        "table": table(t, now),
        "stage_spans": [
            {"stage_id": stage, "start": lo, "end": hi, "span_s": hi - lo}
            for stage, (lo, hi) in sorted(t.stage_spans().items(), key=_stage_order)
        ],
        "factor": factor,
        "suggested": t.suggest_timeouts(factor, now),
        "skipped": list(skipped),
    }
    return json.dumps(doc, indent=2) + "\n"


def table(t: Timeline, now: float | None = None) -> str:
    """`t`'s phase table (`Timeline.table`), its phases' names and roles escaped: each row one
    line, nothing in it that drives a terminal."""
    shown = tuple(replace(p, name=escape(p.name), role=escape(p.role)) for p in t.phases)
    return Timeline(t.t0, t.t_end, shown).table(now)


def _stage_order(item: tuple[int | None, tuple[float, float]]) -> tuple[int, int]:
    stage = item[0]
    return (1, 0) if stage is None else (0, stage)


def _pairs(d: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in d.items())
