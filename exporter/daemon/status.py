"""systemd's STATUS= line: the last checkpointed snapshot in one line."""

from __future__ import annotations

from exporter.accounting.figures import Snapshot
from exporter.base.times import iso


def status_line(snap: Snapshot) -> str:
    """Sources up, nodes busy, requests and the watermark, as `systemctl status` shows them."""
    up = sum(1 for n in snap.nodes if n.up)
    requests = sum(c.requests for n in snap.nodes for c in n.kinds.values())
    return (
        f"{up}/{len(snap.nodes)} sources up, {snap.nodes_busy} nodes busy, "
        f"{requests} requests, accounted until {iso(snap.watermark_us)}"
    )
