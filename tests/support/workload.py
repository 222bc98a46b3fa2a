"""Generated requests of many nodes, the journal lines they make and the report read from them:
what the pages' tests draw, counted from the requests themselves (not from the exporter).

A `Req` is one request as the journal will tell it; `journal` gives one node's lines of its
requests (launch, timing or cancel/error line, release), read by report.Builder as `report`
reads them (`report_of`); `expected_rects` is what a timeline must draw of them;
`write_dump` writes lines as `journalctl -o json` does; `idle_while_others_work` is a run of
nodes busy all the time but one, idle for its last minutes.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.base.kinds import Kinds, split_rules
from exporter.base.records import Batch, LogLine
from exporter.base.times import SECOND
from exporter.report import window as report

from support.settings import default_settings

T0 = 1_790_062_375 * SECOND  # 2026-09-22T07:32:55Z
KINDS = Kinds(split_rules(600))
OUTCOMES = ("timed", "cancelled", "error", "untimed")
NODES = ("node-a", "b.example.internal", "gpu3")


@dataclass(frozen=True)
class Req:
    """One request as the journal will tell it: busy on `slot` during [start_us, end_us]."""

    node: str
    start_us: int
    end_us: int
    tokens: int
    outcome: str  # one of OUTCOMES
    slot: int
    task: int

    @property
    def kind(self) -> str:
        return KINDS.classify(self.tokens) if self.outcome == "timed" else ""

    def belongs(self, since_us: int, until_us: int) -> bool:
        """On the timeline of [since, until]: counted (its end inside) or reaching past it."""
        return since_us <= self.end_us <= until_us or self.start_us < until_us < self.end_us


def journal(node: str, reqs: Iterable[Req]) -> list[LogLine]:
    """The journal lines of one node's requests, in journal order (era D: a `total time` line
    for a timed request; a cancel or send_error line, or neither, before an untimed release)."""
    entries: list[tuple[int, str]] = []
    for r in reqs:
        head = f"id  {r.slot} | task {r.task} |"
        entries.append((r.start_us, f"slot launch_slot_: {head} processing task"))
        if r.outcome == "timed":
            ms = (r.end_us - r.start_us) / 1000
            entries.append(
                (
                    r.end_us,
                    f"slot print_timing: {head}       total time = {ms:10.2f} ms / {r.tokens:5d} tokens",
                )
            )
        elif r.outcome == "cancelled":
            entries.append((r.end_us, f"srv          stop: cancel task, id_task = {r.task}"))
        elif r.outcome == "error":
            entries.append((r.end_us, f"srv    send_error: task id = {r.task}, error: too long"))
        entries.append(
            (
                r.end_us,
                f"slot      release: {head} stop processing: n_tokens = {r.tokens}, truncated = 0",
            )
        )
    entries.sort(key=lambda e: e[0])  # (stable: a request's lines of one time keep their order)
    return [LogLine(node, t, "", 4242, m) for t, m in entries]


def generate(
    rng: random.Random,
    nodes: Sequence[str],
    since_us: int,
    until_us: int,
    *,
    slots: int = 2,
    gap_s: float = 60.0,
    durations_s: tuple[float, float] = (2.0, 60.0),
    weights: Sequence[int] = (90, 4, 2, 4),
) -> list[Req]:
    """Requests on every slot of every node, one after another with random gaps, from a little
    before the window to a little after it; durations are multiples of 10 us (what `total
    time` logs)."""
    out = []
    for node in nodes:
        task = 1
        for slot in range(slots):
            t = since_us - rng.randrange(0, 120 * SECOND)
            while t < until_us + 30 * SECOND:
                d = rng.randrange(int(durations_s[0] * 100_000), int(durations_s[1] * 100_000)) * 10
                outcome = rng.choices(OUTCOMES, weights)[0]
                out.append(Req(node, t, t + d, rng.randint(50, 1200), outcome, slot, task))
                task += 1
                t += d + 20_000 + int(rng.expovariate(1 / gap_s) * SECOND)
    return out


def report_of(
    reqs: Sequence[Req],
    nodes: Sequence[str],
    since_us: int,
    until_us: int,
    *,
    timeline: bool = True,
) -> report.Report:
    """The report of [since_us, until_us] read from the requests' journal lines."""
    builder = report.Builder(nodes, default_settings(KINDS), since_us, until_us, timeline=timeline)
    for node in nodes:
        lines = journal(node, [r for r in reqs if r.node == node])
        for i in range(0, len(lines), 5000):  # (batches, as a source hands them over)
            builder.add(Batch(node, tuple(lines[i : i + 5000])))
    return builder.finish()


def expected_rects(
    reqs: Iterable[Req], since_us: int, until_us: int
) -> dict[str, Counter[tuple[str, str]]]:
    """Per node, the requests a timeline of [since, until] draws, by (kind, outcome)."""
    out: dict[str, Counter[tuple[str, str]]] = {}
    for r in reqs:
        if r.belongs(since_us, until_us):
            out.setdefault(r.node, Counter())[r.kind, r.outcome] += 1
    return out


def write_dump(path: Path, lines: Iterable[LogLine], tag: str = "w") -> None:
    """A node's lines as `journalctl -o json` writes them (`tag` names the cursors' seqnum)."""
    with path.open("w", encoding="utf-8") as f:
        for i, ln in enumerate(lines):
            entry = {
                "__CURSOR": f"s={tag};i={i:x}",
                "__REALTIME_TIMESTAMP": str(ln.time_us),
                "_PID": str(ln.pid),
                "_SYSTEMD_UNIT": "sm-llm.service",
                "MESSAGE": ln.message,
            }
            f.write(json.dumps(entry) + "\n")


def idle_while_others_work(
    nodes: Sequence[str], idle: str, until_us: int, window_s: int, idle_s: int
) -> list[Req]:
    """Timed 20-60 s requests of one slot a node, 2 s apart on average, over the `window_s`
    before `until_us`, all ended by then; those of `idle` all ended `idle_s` before it."""
    since_us = until_us - window_s * SECOND
    reqs = generate(
        random.Random(31),
        nodes,
        since_us,
        until_us,
        slots=1,
        gap_s=2.0,
        durations_s=(20.0, 60.0),
        weights=(1, 0, 0, 0),
    )
    quiet_us = until_us - idle_s * SECOND
    return [
        r
        for r in reqs
        if r.start_us >= since_us and r.end_us <= (quiet_us if r.node == idle else until_us)
    ]
