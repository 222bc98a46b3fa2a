"""Each node's bound on the watermark: what its source says, its stalls, what holds it back.

Functions of one node's `NodeState` (docs/design.md, "The watermark"): `source_state` records
what its source is doing, `read_until` and `node_bound` give the time up to which the node has
nothing unseen, `stalled` tells a node that no longer holds the watermark, and `holder` names
the node that holds the figures back and why. Pure: whoever calls passes `now_us`.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.accounting.figures import NodeState
from exporter.accounting.settings import Settings
from exporter.base.times import SECOND, iso

START_MARGIN_US = SECOND  # a launch line is logged up to ~1 ms after end - duration
CAUGHT_UP_SLACK_US = 2 * SECOND  # node clocks and poll/SSH delays
HOLD_US = 60 * SECOND  # figures this far behind now (beyond a node's usual trail) are held


def source_state(ns: NodeState, *, up: bool, caught_up: bool, now_us: int, lag_us: int) -> None:
    """What the node's source is doing now (connected? read all its journal held?). The lag
    is the lag of a source that reads: 0 while it is caught up, and while it is down."""
    if up:
        ns.down_since_us = None
    elif ns.up or ns.down_since_us is None:
        ns.down_since_us = now_us
    ns.up, ns.caught_up = up, up and caught_up
    if ns.caught_up:
        ns.behind_since_us = None
    elif ns.behind_since_us is None or (up and ns.newest_us > ns.behind_newest_us):
        # a source that reads on through its journal's time is catching up: the stall
        # limit counts from its last step forward (what reads without end makes none)
        ns.behind_since_us = now_us
    ns.behind_newest_us = ns.newest_us
    ns.lag_us = max(0, lag_us) if up and not caught_up else 0


def read_until(ns: NodeState, now_us: int) -> int:
    """The journal time up to which the node has nothing unread: the newest entry read, or
    now - 2 s while its source is connected and caught up."""
    if ns.up and ns.caught_up:
        return max(ns.newest_us, now_us - CAUGHT_UP_SLACK_US)
    return ns.newest_us


def node_bound(ns: NodeState, now_us: int, max_request_us: int) -> int:
    """No request of the node that covers a time before this can still be unseen."""
    newest = read_until(ns, now_us)
    if not ns.start_lines:
        return newest - max_request_us
    if not ns.in_flight:
        return newest
    return max(min(ns.in_flight.values()) - START_MARGIN_US, newest - max_request_us)


def stalls_at(ns: NodeState, stall_us: int, latest_now_us: int) -> int:
    """When the node stops holding the watermark unless it catches up first (`latest_now_us`:
    the latest now the accounting was given, for a node neither down nor behind)."""
    sinces = [t for t in (ns.down_since_us, ns.behind_since_us) if t is not None]
    return min(sinces, default=latest_now_us) + stall_us


def stalled(ns: NodeState, now_us: int, stall_us: int, latest_now_us: int) -> bool:
    """Down, or not caught up (whatever it reads), for longer than `stall_us`: the node no
    longer holds the watermark (its requests that come after are late)."""
    return (ns.down_since_us is not None or ns.behind_since_us is not None) and (
        now_us > stalls_at(ns, stall_us, latest_now_us)
    )


def holder(
    nodes: Mapping[str, NodeState], now_us: int, settings: Settings, latest_now_us: int
) -> tuple[str, str, str] | None:
    """The node that holds the cluster figures back more than HOLD_US behind now, beyond
    what it always trails by: (node, what it waits for: `source down`, `backlog`,
    `request in flight`, and the words for the log, with until when), else None."""
    held = [
        (node_bound(ns, now_us, settings.max_request_us), n, ns)
        for n, ns in nodes.items()
        if not stalled(ns, now_us, settings.stall_us, latest_now_us)
    ]
    if not held:
        return None
    bound, name, ns = min(held, key=lambda b: b[0])
    if bound > now_us - HOLD_US:
        return None
    return _why_held(name, ns, settings, iso(stalls_at(ns, settings.stall_us, latest_now_us)))


def _why_held(
    name: str, ns: NodeState, settings: Settings, until: str
) -> tuple[str, str, str] | None:
    if ns.down_since_us is not None:
        return (
            name,
            "source down",
            f"its source is down (since {iso(ns.down_since_us)}): the figures wait for it "
            f"until {until}, then go on without it",
        )
    if not ns.caught_up:
        return (
            name,
            "backlog",
            f"its journal is being read, at {iso(ns.newest_us)}: the figures follow it until "
            f"{until}, then go on without it if it has not caught up (stall_seconds)",
        )
    if ns.start_lines and ns.in_flight:
        since = min(ns.in_flight.values())
        return (
            name,
            "request in flight",
            f"a request in flight since {iso(since)}: the figures wait for its end, at "
            f"most until {iso(since + settings.max_request_us)} (max_request_seconds)",
        )
    return None
