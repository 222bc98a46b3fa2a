"""Recorded output of a real llama-server (tests/testdata/llama-server/, made by its
record.py), and its meaning read independently of the parser, with plain regular expressions:
every slot occupancy (launch to release), with its timing block and what its lines say it was.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import Interval, Record
from exporter.base.times import SECOND
from exporter.report import text as report_text

from support.dumps import report_of_dumps
from support.tools import REPO

FIXTURES = REPO / "tests" / "testdata" / "llama-server"
RUNS = (
    "parallel",
    "cancel",
    "error",
    "embeddings",
    "embeddings_mean_abort",
    "n_cmpl",
    "speculative",
    "router",
    "restart",
)

_ROUTED = re.compile(r"^\[ *(\d+)\] (.*)$")
_SLOT = re.compile(r"^\S+ [A-Z] slot +(\w+): id +(\d+) \| task (\d+) \| (.*)$")
_TIMING = re.compile(r"(prompt eval|eval|total) time = +([\d.]+) ms / +(\d+) tokens")
_CANCEL = re.compile(r"^\S+ W srv +stop: cancel task, id_task = (\d+)$")
_ERROR = re.compile(r"^\S+ E srv +send_error: task id = (\d+), error: ")
_SPAWN = re.compile(r"spawning server instance with name=(\S+) on port (\d+)$")


@dataclass
class Occupancy:
    """One slot occupancy as the journal's lines say it."""

    key: tuple[str, int, int, int]  # (model, pid, slot, task)
    launch_us: int
    release_us: int | None = None
    child: bool = False
    total_us: int | None = None  # the timing block's
    end_us: int | None = None  # its total line's journal time
    prompt: tuple[int, int] | None = None  # (tokens, us)
    generated: tuple[int, int] | None = None
    cancelled: bool = False
    error: bool = False

    @property
    def reason(self) -> str:
        if self.total_us is not None:
            return ""
        return "error" if self.error else "cancelled" if self.cancelled else "untimed"


def entries(run: str) -> list[dict[str, str]]:
    path = FIXTURES / f"{run}.journal.json"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def ms(text: str) -> int:
    whole, _, frac = text.partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


def occupancies(run: str) -> list[Occupancy]:  # noqa: C901 (the oracle: one pass, one regex per line shape)
    """Every launch in the run's journal, with what followed it for its (slot, task)."""
    out: list[Occupancy] = []
    open_: dict[tuple[str, int, int, int], Occupancy] = {}
    by_task: dict[tuple[str, int, int], Occupancy] = {}
    model_of: dict[str, str] = {}
    for e in entries(run):
        if e["_PID"] == "1":
            continue
        t, pid, msg = int(e["__REALTIME_TIMESTAMP"]), int(e["_PID"]), e["MESSAGE"]
        model = ""
        routed = _ROUTED.match(msg)
        if routed:
            model, msg = model_of.get(routed.group(1), routed.group(1)), routed.group(2)
        spawn = _SPAWN.search(msg)
        if spawn:
            model_of[spawn.group(2)] = spawn.group(1)
        for pattern, attr in ((_CANCEL, "cancelled"), (_ERROR, "error")):
            m = pattern.match(msg)
            if m and (model, pid, int(m.group(1))) in by_task:
                setattr(by_task[model, pid, int(m.group(1))], attr, True)
        m = _SLOT.match(msg)
        if not m:
            continue
        name, slot, task, rest = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        key = (model, pid, slot, task)
        if name == "launch_slot_":
            occ = open_[key] = by_task[model, pid, task] = Occupancy(
                key, t, child="is_child = 1" in rest
            )
            out.append(occ)
        elif key in open_:
            occ = open_[key]
            if name == "release":
                occ.release_us = t
                del open_[key]
            timing = _TIMING.search(rest)
            if timing:
                what, us, n = timing.group(1), ms(timing.group(2)), int(timing.group(3))
                if what == "total":
                    occ.total_us, occ.end_us = us, t
                elif what == "eval":
                    occ.generated = (n, us)
                else:
                    occ.prompt = (n, us)
    return out


KINDS = Kinds(DEFAULT_RULES)


def intervals(recs: list[Record]) -> list[Interval]:
    return [r for r in recs if type(r) is Interval]


def window(runs: tuple[str, ...] = RUNS) -> tuple[int, int]:
    times = [int(e["__REALTIME_TIMESTAMP"]) for run in runs for e in entries(run)]
    return min(times) - SECOND, max(times) + SECOND


def report_json(since_us: int, until_us: int) -> dict[str, Any]:
    dumps = {run: FIXTURES / f"{run}.journal.json" for run in RUNS}
    return report_text.to_json(report_of_dumps(dumps, KINDS, since_us, until_us))


T0 = 1_790_000_000_000_000


def untimed(recs: list[Record]) -> list[tuple[int, int, str]]:
    return [(iv.start_us - T0, iv.end_us - T0, iv.reason) for iv in intervals(recs) if iv.reason]
