"""One-shot report: nodes' lines over a past window -> fresh accounting -> the seed's tables, JSON.

Requests count by their end in [since, until], as the seed counts them. Busy, concurrency and
mix seconds come from every interval that overlaps the window, clipped to it, exactly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.accounting import SECOND, Accounting, Snapshot
from exporter.config import FileNode, JournalNode, NodeConfig, SshNode
from exporter.kinds import Kinds
from exporter.logline import Event, EventKind, Interval, LogLine
from exporter.parse import Parser
from exporter.sources.dump import read_dump

# Column labels the seed prints for its two kinds.
_SEED_LABELS = {"extraction": "extract", "reconcile": "reconcile"}


@dataclass
class Report:
    """Everything the report prints: the accounting's figures plus each kind's durations."""

    since_us: int
    until_us: int
    snapshot: Snapshot
    durations_us: dict[str, list[int]] = field(default_factory=dict)  # kind -> counted requests

    @property
    def wall_s(self) -> float:
        return self.until_us / SECOND - self.since_us / SECOND


def build(
    streams: Mapping[str, Iterable[LogLine | Exception]],
    kinds: Kinds,
    since_us: int,
    until_us: int,
    max_request_us: int = 600 * SECOND,
) -> Report:
    """Run every node's lines through a parser each and one accounting over the window."""
    acc = Accounting(list(streams), kinds, origin_us=since_us, max_request_us=max_request_us)
    durations: dict[str, list[int]] = {k: [] for k in kinds.names}
    for node, lines in streams.items():
        parser = Parser(node)
        for line in lines:
            if isinstance(line, Exception):  # an unreadable line still counts, as a parse error
                acc.add(Event(node, since_us, EventKind.PARSE_ERROR, detail=str(line)))
                continue
            for rec in parser.feed(line):
                _add(acc, rec, since_us, until_us, kinds, durations)
        for rec in parser.flush(until_us + max_request_us):
            _add(acc, rec, since_us, until_us, kinds, durations)
    acc.advance_to(until_us)
    return Report(since_us, until_us, acc.snapshot(), durations)


def _add(
    acc: Accounting,
    rec: Interval | Event,
    since_us: int,
    until_us: int,
    kinds: Kinds,
    durations: dict[str, list[int]],
) -> None:
    if isinstance(rec, Interval):
        if rec.end_us < since_us:
            return
        counted = rec.end_us <= until_us
        if counted:
            durations[kinds.classify(rec.tokens)].append(rec.duration_us)
        acc.add(rec, count=counted)
    elif since_us <= rec.time_us <= until_us:
        acc.add(rec)


Progress = Callable[[str, int, int | None], None]


def node_streams(
    nodes: Sequence[NodeConfig], since_us: int, until_us: int, progress: Progress | None = None
) -> dict[str, Iterable[LogLine | Exception]]:
    """Every configured node's lines over [since_us, until_us], read from where it keeps them:
    dump files and local journals as they are iterated, SSH nodes all at once, up front."""
    streams: dict[str, Iterable[LogLine | Exception]] = {}
    remote = [n for n in nodes if isinstance(n, SshNode)]
    if remote:
        from exporter.sources.ssh import read_window as read_remote

        async def fetch() -> list[list[LogLine | Exception]]:
            return list(
                await asyncio.gather(
                    *(read_remote(n, since_us, until_us, progress) for n in remote)
                )
            )

        streams.update(zip((n.name for n in remote), asyncio.run(fetch()), strict=True))
    for node in nodes:
        if isinstance(node, FileNode):
            streams[node.name] = read_dump(node.path, node.name)
        elif isinstance(node, JournalNode):
            from exporter.sources.journal import read_window  # needs systemd-python

            streams[node.name] = read_window(
                node.name, node.unit, since_us, until_us, directory=node.directory, files=node.files
            )
    return {n.name: streams[n.name] for n in nodes}


def median_us(durations: Sequence[int]) -> int | None:
    """The upper middle of the sorted durations, as the seed takes it."""
    return sorted(durations)[len(durations) // 2] if durations else None


def to_json(r: Report) -> dict[str, Any]:
    snap = r.snapshot
    nodes = {}
    for n in snap.nodes:
        nodes[n.name] = {
            "requests": sum(c.requests for c in n.kinds.values()),
            "kinds": {k: c.requests for k, c in n.kinds.items()},
            "busy_seconds": n.busy_us / SECOND,
            "tokens": sum(c.tokens for c in n.kinds.values()),
        }
    kinds = {}
    for k in snap.kind_names:
        med = median_us(r.durations_us[k])
        kinds[k] = {
            "requests": sum(n.kinds[k].requests for n in snap.nodes),
            "request_seconds": sum(n.kinds[k].request_us for n in snap.nodes) / SECOND,
            "median_seconds": None if med is None else med / SECOND,
        }
    total_us = sum(n.busy_us for n in snap.nodes)
    return {
        "since": r.since_us / SECOND,
        "until": r.until_us / SECOND,
        "window_seconds": r.wall_s,
        "nodes": nodes,
        "concurrency_seconds": {str(k): v / SECOND for k, v in enumerate(snap.concurrency_us)},
        "mix_seconds": {m: v / SECOND for m, v in snap.mix_us.items()},
        "kinds": kinds,
        "total_node_seconds": total_us / SECOND,
        "ideal_seconds": total_us / SECOND / max(1, len(snap.nodes)),
        "parse_errors": {n.name: n.parse_errors for n in snap.nodes},
    }


def to_text(r: Report) -> str:
    """The seed script's tables, line for line, with exact figures."""
    snap = r.snapshot
    wall = r.wall_s
    kinds = snap.kind_names
    width = max([5, *(len(n.name) for n in snap.nodes)])
    out = [f"window {wall / 60:.1f} min", ""]
    head = "  " + "node".ljust(width) + "   requests"
    widths = {k: max(8, len(_SEED_LABELS.get(k, k)) + 1) for k in kinds}
    for k in kinds:
        head += " " + _SEED_LABELS.get(k, k).rjust(widths[k])
    out.append(head + "  busy time   busy %")
    for n in snap.nodes:
        row = f"  {n.name:<{width}}  {sum(c.requests for c in n.kinds.values()):8d}"
        for k in kinds:
            row += f" {n.kinds[k].requests:{widths[k]}d}"
        busy = n.busy_us / SECOND
        out.append(row + f" {busy / 60:7.1f} min {100 * busy / wall:7.1f}%")

    out += ["", "  nodes working at once    share of wall time"]
    for busy_nodes, v_us in enumerate(snap.concurrency_us):
        v = v_us / SECOND
        bar = "#" * round(40 * v / wall)
        out.append(
            f"        {busy_nodes}                {100 * v / wall:5.1f}%  {v / 60:5.1f} min  {bar}"
        )

    out.append("")
    label_w = max(len(k) for k in kinds) + 1
    for i, k in enumerate(kinds):
        calls = r.durations_us[k]
        secs = sum(n.kinds[k].request_us for n in snap.nodes) / SECOND
        med = median_us(calls)
        if med is not None:
            out.append(
                f"  {k + ':':<{label_w}} {len(calls)} calls, {secs / 60:.1f} node-min, "
                f"median {med / SECOND:.1f} s"
            )
        elif i == 0:
            out.append(f"  {k + ':':<{label_w}} no calls in the window")
    for k in kinds[1:]:
        out.append(f"  wall time with only {k} running: {snap.mix_us[k] / SECOND / 60:.1f} min")

    total = sum(n.busy_us for n in snap.nodes) / SECOND
    count = len(snap.nodes)
    ideal = total / max(1, count)
    out += [
        "",
        f"  total node-work {total / 60:.1f} node-min; "
        f"spread perfectly over {count} nodes that is {ideal / 60:.1f} min "
        f"against {wall / 60:.1f} min actual",
    ]
    return "\n".join(out) + "\n"


def render(r: Report, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(to_json(r), indent=2) + "\n"
    return to_text(r)
