"""The `init-timeline` kind: a vllm-omni engine's start-up files, shown, never counted.

It has no journal and no reader: the daemon watches its files (`startup/vllmwatch.py`) and the
config keeps its nodes apart (`Config.init_timelines`). Its figures count in no busy or
concurrency figure.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from exporter.config.checker import Checker
from exporter.config.values import MAX_POLL_S, MIN_POLL_S, as_poll
from exporter.sources.kind import COMMON_KEYS, Named, NodeEntry, SourceKind

_PATH = "must be a path"


@dataclass(frozen=True)
class InitTimelineNode:
    """A vllm-omni engine's init timeline: its run directory (`worker_*.jsonl`) and/or dump."""

    name: str
    path: Path  # the run directory, or the dump
    dump: Path | None = None  # the dump, beside a run directory
    poll_seconds: float = 5.0
    source: str = "init-timeline"


def check(checker: Checker, path: str, entry: NodeEntry) -> InitTimelineNode | None:
    """An `init-timeline` node: a vllm-omni engine's start-up files, only shown."""
    n = entry.keys
    where = checker.get(n, "path", path, checker.path, None, _PATH)
    dump = checker.get(n, "dump", path, checker.path, None, _PATH)
    poll = checker.get(
        n,
        "poll_seconds",
        path,
        as_poll,
        InitTimelineNode.poll_seconds,
        f"must be seconds {MIN_POLL_S:g}..{MAX_POLL_S}",
    )
    if where is None:
        if n.get("path") is None:
            checker.problem(path, "an init-timeline node needs a path (its run directory)")
        return None
    return InitTimelineNode(entry.name, where, dump, poll)


def paths(node: InitTimelineNode, at: str) -> Iterator[Named]:
    """Its run directory (or dump), and its dump beside a run directory: waited for."""
    is_dir = _is_dir(node.path)
    yield Named(f"{at}.path", node.path, directory=is_dir, regular=False, waited=True)
    if node.dump is not None:
        yield Named(f"{at}.dump", node.dump, waited=True)


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # (checking it says why)
        return False


def describe(node: InitTimelineNode) -> str:
    dump = "" if node.dump is None else f", dump {node.dump}"
    return f"node {node.name}: init-timeline {node.path}{dump} (every {node.poll_seconds:g} s)"


KIND = SourceKind(
    "init-timeline",
    InitTimelineNode,
    COMMON_KEYS | {"path", "dump", "poll_seconds"},
    check,
    paths,
    describe,
    reader=None,
)
