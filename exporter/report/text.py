"""The report as text: the seed's tables line for line, or the same figures as JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from exporter.accounting.figures import Snapshot
from exporter.base.records import REASONS
from exporter.base.times import SECOND
from exporter.report.window import Report

# Column labels the seed prints for its two kinds.
_SEED_LABELS = {"extraction": "extract", "reconcile": "reconcile"}


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
            "slot_busy_seconds": n.slot_busy_us / SECOND,
            "slots": n.slots,
            "server_up": n.server_up,
            "untimed": {
                reason: {"requests": count, "seconds": us / SECOND}
                for reason, (count, us) in n.untimed.items()
            },
        }
        if any(c.draft_tokens for c in n.kinds.values()):  # (speculative decoding)
            nodes[n.name]["draft"] = {
                k: {"tokens": c.draft_tokens, "accepted_tokens": c.draft_accepted_tokens}
                for k, c in n.kinds.items()
                if c.draft_tokens
            }
        if n.asleep_us or n.asleep:
            nodes[n.name]["asleep_seconds"] = n.asleep_us / SECOND
        if n.queues:
            nodes[n.name]["queues"] = {
                m: {"queued": q, "deepest_position": deepest, "load_waits": waits}
                for m, (q, deepest, waits) in n.queues.items()
            }
        if n.models:
            nodes[n.name]["models"] = {
                m: {"requests": k, "request_seconds": us / SECOND, "tokens": t}
                for m, (k, us, t) in n.models.items()
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

    untimed = _untimed_line(snap)
    if untimed:
        out.append(untimed)

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


def _untimed_line(snap: Snapshot) -> str:
    """Slot occupancies without a timing block, by reason, when there were any (the seed's
    data has none: its lines stay as they were)."""
    parts = []
    for reason in REASONS:
        count = sum(n.untimed[reason][0] for n in snap.nodes)
        if count:
            us = sum(n.untimed[reason][1] for n in snap.nodes)
            parts.append(f"{reason} {count} ({us / SECOND / 60:.1f} node-min)")
    return "  untimed occupancy: " + ", ".join(parts) if parts else ""


def render(r: Report, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(to_json(r), indent=2) + "\n"
    return to_text(r)
