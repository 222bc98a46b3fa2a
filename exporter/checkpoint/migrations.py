"""Every checkpoint version written, told apart and migrated to this one, step by step.

Versions 1 to 8 were all written as `"format": 1`, before the version was kept; `written_as`
tells them apart by the keys each added (the commits that wrote them are named at each
migration; tests/testdata/checkpoints/ holds one of each, made by the code of its commit).
From 9 on, the version is the file's `format`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from exporter.base.records import CANCELLED, REASONS
from exporter.checkpoint.layout import (
    FIRST_KEPT,
    HISTOGRAM_AT,
    KIND_COUNTERS,
    UNVERSIONED,
    VERSION,
)
from exporter.checkpoint.store import CheckpointError


def written_as(saved: Mapping[str, Any]) -> int:
    """The version of a checkpoint, told by its `format` (9 on) or, for one written as
    `"format": 1`, by the keys each later version added (CheckpointError for any other)."""
    found = saved.get("format")
    if type(found) is int and FIRST_KEPT <= found <= VERSION:
        return found
    if type(found) is not int or found != UNVERSIONED:
        raise CheckpointError(
            f"checkpoint format {found!r}, this version reads format {VERSION} (and the "
            f"checkpoints written as format {UNVERSIONED} before it)"
        )
    if "sources" in saved:
        return 8
    nodes = _each(saved, "accounting", "nodes")
    parsers = _each(saved, "parsers")
    for version, found_in in (
        (7, any("startups" in n for n in nodes)),
        (6, any("untimed" in n for n in nodes) or any("up" in p for p in parsers)),
        (5, any("newest_since_us" in p for p in parsers)),
        (4, any("seen" in p for p in parsers)),
        (3, any(len(k) > HISTOGRAM_AT for n in nodes for k in _each(n, "kinds"))),
        (2, any("started" in p for p in parsers)),
    ):
        if found_in:
            return version
    return 1


def _each(d: Mapping[str, Any], *path: str) -> list[Any]:
    """The values of the object at `path` in `d` ([] where there is none)."""
    for key in path:
        d = d.get(key) if isinstance(d, dict) else None  # type: ignore[assignment]
    return list(d.values()) if isinstance(d, dict) else []


def upgrade(saved: dict[str, Any]) -> dict[str, Any]:
    """`saved` (a checkpoint of any version written) migrated to this version, step by step;
    KeyError, TypeError or ValueError when it is not what its version wrote."""
    version = written_as(saved)
    for step in MIGRATIONS[version - 1 :]:
        step(saved)
    saved["format"] = VERSION
    return saved


def _parsers(saved: dict[str, Any]) -> list[dict[str, Any]]:
    """Every parser state of a checkpoint: each node's, and its model instances' (router mode)."""
    out: list[dict[str, Any]] = []
    todo = list(saved["parsers"].values())
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [sub for _, _, sub in p.get("instances", [])]
    return out


def _nodes(saved: dict[str, Any]) -> list[dict[str, Any]]:
    return list(saved["accounting"]["nodes"].values())


def _to_2(saved: dict[str, Any]) -> None:
    """dc54f56: each parser keeps its launched tasks."""
    for p in _parsers(saved):
        p["started"] = []


def _to_3(saved: dict[str, Any]) -> None:
    """64d2778: each kind's histogram keeps its own sum (it held every request until then)."""
    for node in _nodes(saved):
        for values in node["kinds"].values():
            values.append(values[KIND_COUNTERS.index("request_us")])


def _to_4(saved: dict[str, Any]) -> None:
    """776c14c: each parser tells its PIDs apart (the older ones that may still log) and keeps
    the slot count its server logged."""
    for p in _parsers(saved):
        pid = p["pid"]
        p.update(n_slots=0, newest_pid=pid, last_us=0, others=[], seen=[pid] if pid else [])


def _to_5(saved: dict[str, Any]) -> None:
    """3a416a7: a PID that logs well after the newest began is a second server; each older
    PID keeps its own slot count."""
    for p in _parsers(saved):
        p.update(newest_since_us=0, second=False)
        p["others"] = [[*other, 0, False] for other in p["others"]]


def _to_6(saved: dict[str, Any]) -> None:
    """25dc302: every occupancy an interval: untimed reasons (the cancels counted before are
    `cancelled`, of no seconds), slot-busy time, slots, the server's state, router mode."""
    for node in _nodes(saved):
        untimed = {reason: [0, 0] for reason in REASONS}
        untimed[CANCELLED][0] = node.pop("cancelled")
        node.update(untimed=untimed, slot_busy_us=0, slots=None, server_up=None, models={})
    for p in _parsers(saved):
        p.update(up=-1, marks=[], children=[], instances=[])
        for _, _, context, _, _ in p["others"]:
            context.update(marks=[], children=[])


def _to_7(saved: dict[str, Any]) -> None:
    """96d10f9: each node's llama-server start-ups."""
    for node in _nodes(saved):
        node["startups"] = {"last": None, "current": None, "last_pid": 0, "started_due": False}


def _to_8(saved: dict[str, Any]) -> None:
    """e9421ea: each position's kind of source (none known: each node's configured kind), and
    the model instances each router started (those that run)."""
    saved["sources"] = {}
    for p in _parsers(saved):
        p["spawned"] = [[model, ""] for _, model, _ in p["instances"]]


def _to_9(saved: dict[str, Any]) -> None:
    """The version kept in `format` (the content is version 8's)."""


def _to_10(saved: dict[str, Any]) -> None:
    """Issue 32: each kind's prompt-eval and generation histograms (of no buckets before: they
    start from 0) and draft tokens; each node's sleep and its router's queues; each parser's
    last timed requests (a draft line follows one)."""
    saved["accounting"].update(prompt_buckets_us=[], generation_buckets_us=[])
    for p in _parsers(saved):
        p["recent_totals"] = []
    for node in _nodes(saved):
        node.update(asleep_since_us=None, asleep_us=0, queues={})
        for values in node["kinds"].values():
            values += [[0], 0, [0], 0, 0, 0]


MIGRATIONS: tuple[Callable[[dict[str, Any]], None], ...] = (
    _to_2,
    _to_3,
    _to_4,
    _to_5,
    _to_6,
    _to_7,
    _to_8,
    _to_9,
    _to_10,
)
