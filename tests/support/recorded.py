"""Recorded output of a real llama-server (tests/testdata/llama-server/, made by its
record.py), and its meaning read independently of the parser, with plain regular expressions:
every slot occupancy (launch to release), with its timing block and what its lines say it was;
the server's sleeps, its live decode lines and the router's queue lines.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

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
# runs recorded for issue 32, kept apart: the figures other tests hold to RUNS stay as they are
NEW_RUNS = ("sleep", "long_generation", "router_queue")

_ROUTED = re.compile(r"^\[ *(\d+)\] (.*)$")
_SLOT = re.compile(r"^\S+ [A-Z] slot +(\w+): id +(\d+) \| task (\d+) \| (.*)$")
_TIMING = re.compile(r"(prompt eval|eval|total) time = +([\d.]+) ms / +(\d+) tokens")
_CANCEL = re.compile(r"^\S+ W srv +stop: cancel task, id_task = (\d+)$")
_ERROR = re.compile(r"^\S+ E srv +send_error: task id = (\d+), error: ")
_SPAWN = re.compile(r"spawning server instance with name=(\S+) on port (\d+)$")
_DRAFT = re.compile(r"draft acceptance = +[\d.]+ \( *(\d+) accepted / +(\d+) generated\)")
# the server context's own lines (handle_sleeping_state): the task queue's `que start_loop:
# entering sleeping state` comes just before the one and `exiting ...` just before the other
_SLEEP = re.compile(r"^\S+ I srv +\w+: server is (entering|exiting) sleeping state$")
_N_GEN = re.compile(r"^n_gen = +(\d+), tg = +([\d.]+) t/s, tg_3s = +([\d.]+) t/s$")
_QUEUE = re.compile(
    r"^\S+ I srv +\w+: (?:"
    r"request for name=(?P<queued>\S+) queued at position (?P<position>\d+)"
    r"|request for name=(?P<joined>\S+) joined the queue, \d+ waiting"
    r"|waiting until model name=(?P<waiting>\S+) is fully loaded\.\.\."
    r"|slot available, loading queued model name=(?P<loading>\S+)"
    r")$"
)


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
    draft: tuple[int, int] | None = None  # (accepted, generated) draft tokens

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
            draft = _DRAFT.search(rest)
            if draft:
                occ.draft = (int(draft.group(1)), int(draft.group(2)))
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


class GenLine(NamedTuple):
    """One live decode line (`n_gen = ..., tg = ... t/s, tg_3s = ... t/s`)."""

    pid: int
    slot: int
    task: int
    time_us: int
    n_gen: int
    tg: float
    tg_3s: float


class QueueLine(NamedTuple):
    """One router line about a request waiting for a model instance."""

    time_us: int
    model: str
    position: int | None  # only a `queued` line gives one
    kind: str  # queued, joined, waiting, loading


def _lines(run: str, model: str) -> list[tuple[int, int, str]]:
    """(journal time, PID, message) of the server's lines: its own for model "", else the
    routed lines of that model's instances, their `[PORT] ` prefix taken off."""
    out: list[tuple[int, int, str]] = []
    model_of: dict[str, str] = {}
    for e in entries(run):
        if e["_PID"] == "1":
            continue
        msg = e["MESSAGE"]
        routed = _ROUTED.match(msg)
        if routed:
            name, msg = model_of.get(routed.group(1), routed.group(1)), routed.group(2)
        else:
            name = ""
            spawn = _SPAWN.search(msg)
            if spawn:
                model_of[spawn.group(2)] = spawn.group(1)
        if name == model:
            out.append((int(e["__REALTIME_TIMESTAMP"]), int(e["_PID"]), msg))
    return out


def sleeps(run: str, model: str = "") -> list[tuple[int, int | None]]:
    """(entered_us, exited_us or None) of each sleep, from the `srv` lines `server is
    entering/exiting sleeping state`; None: the server did not wake before the journal ends."""
    out: list[tuple[int, int | None]] = []
    open_: dict[int, int] = {}  # pid -> index in out of its sleep not yet ended
    for t, pid, msg in _lines(run, model):
        m = _SLEEP.match(msg)
        if not m:
            continue
        if m.group(1) == "entering":
            open_[pid] = len(out)
            out.append((t, None))
        elif pid in open_:
            i = open_.pop(pid)
            out[i] = (out[i][0], t)
    return out


def gen_lines(run: str, model: str = "") -> list[GenLine]:
    """Every live decode line, in journal order."""
    out: list[GenLine] = []
    for t, pid, msg in _lines(run, model):
        slot = _SLOT.match(msg)
        m = _N_GEN.match(slot.group(4)) if slot else None
        if slot and m:
            out.append(
                GenLine(
                    pid,
                    int(slot.group(2)),
                    int(slot.group(3)),
                    t,
                    int(m.group(1)),
                    float(m.group(2)),
                    float(m.group(3)),
                )
            )
    return out


def queue_lines(run: str) -> list[QueueLine]:
    """The router's own lines about requests waiting for a model instance, in journal order."""
    out: list[QueueLine] = []
    for t, _pid, msg in _lines(run, ""):
        m = _QUEUE.match(msg)
        if not m:
            continue
        kind = next(k for k in ("queued", "joined", "waiting", "loading") if m.group(k))
        position = int(m.group("position")) if kind == "queued" else None
        out.append(QueueLine(t, m.group(kind), position, kind))
    return out


def results(run: str) -> list[dict[str, Any]]:
    """What the client sent and the server answered, one object per HTTP request."""
    data: list[dict[str, Any]] = json.loads(
        (FIXTURES / f"{run}.results.json").read_text(encoding="utf-8")
    )
    return data


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
