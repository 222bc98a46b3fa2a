"""The sweep that makes the timeline figures final up to a watermark, in Python.

`sweep` is the specification of the compiled `_accounting.sweep` (exporter/compiled/
_accounting.c), with the same arguments and result: the pending intervals (start, end, node
index, kind bit; bit 0 for an occupancy without timing, busy but of no kind) swept over
[lo, hi], segment by segment, exactly (docs/design.md, "What counts where").
"""

from __future__ import annotations

from collections.abc import Sequence

Pending = tuple[int, int, int, int]  # (start, end, node index, kind bit)
P_START, P_END, P_NODE, P_BIT = range(4)  # a Pending's positions (the C sweep's too)
# what a sweep finds: the intervals still pending after it, the microseconds with k nodes busy
# (index k), per mix of kinds (by bit mask), and per node its busy (union) and slot-busy (sum)
Swept = tuple[list[Pending], list[int], list[int], list[int], list[int]]


def sweep(pending: Sequence[Pending], lo: int, hi: int, n_nodes: int, n_kinds: int) -> Swept:
    """The pending intervals swept from `lo` (the watermark) to `hi`: what stays pending (an
    interval cut at `hi` keeps its part after it) and what the sweep adds to the figures."""
    events: list[Pending] = []
    keep: list[Pending] = []
    slot_busy = [0] * n_nodes  # (each occupancy's time: the slots' sum)
    for p in pending:
        s, e, n, bit = p
        if s < hi:
            events.append((s, 1, n, bit))
            events.append((min(e, hi), -1, n, bit))
            slot_busy[n] += min(e, hi) - s
        if e > hi:
            keep.append((hi if s < hi else s, e, n, bit))
    conc, mix_by_mask, node_busy = _swept(lo, hi, events, n_nodes, n_kinds)
    return keep, conc, mix_by_mask, node_busy, slot_busy


def _swept(
    lo: int, hi: int, events: list[Pending], n_nodes: int, n_kinds: int
) -> tuple[list[int], list[int], list[int]]:
    """(microseconds with k nodes busy, per mix by mask, busy per node) over [lo, hi] of the
    (time, +1 start / -1 end, node, bit) events."""
    events.sort()
    node_count = [0] * n_nodes
    node_since = [0] * n_nodes
    node_busy = [0] * n_nodes
    kind_count = {1 << i: 0 for i in range(n_kinds)}
    mix_by_mask = [0] * (1 << n_kinds)  # microseconds per mix, by mask
    conc = [0] * (n_nodes + 1)
    busy_nodes = 0
    mask = 0
    t_prev = lo
    for t, delta, n, bit in events:
        if t != t_prev:
            conc[busy_nodes] += t - t_prev
            mix_by_mask[mask] += t - t_prev
            t_prev = t
        if delta > 0:
            if node_count[n] == 0:
                busy_nodes += 1
                node_since[n] = t
            node_count[n] += 1
            if not bit:  # (an occupancy without timing: busy, of no kind)
                continue
            if kind_count[bit] == 0:
                mask |= bit
            kind_count[bit] += 1
        else:
            node_count[n] -= 1
            if node_count[n] == 0:
                busy_nodes -= 1
                node_busy[n] += t - node_since[n]
            if not bit:
                continue
            kind_count[bit] -= 1
            if kind_count[bit] == 0:
                mask &= ~bit
    conc[0] += hi - t_prev
    mix_by_mask[0] += hi - t_prev
    return conc, mix_by_mask, node_busy


def mix_labels_by_mask(sorted_kinds: Sequence[str]) -> list[str]:
    """Mix label of every bit mask over the sorted kind names (bit i = sorted_kinds[i])."""
    return [
        "+".join(k for i, k in enumerate(sorted_kinds) if mask >> i & 1) or "idle"
        for mask in range(1 << len(sorted_kinds))
    ]
