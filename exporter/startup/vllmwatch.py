"""Follows an init-timeline node: its files read again whenever they change, as figures to show.

A `source: init-timeline` node is a vllm-omni engine's run directory and/or dump. `watch` looks
at their stat signature every `poll_seconds` and, when it changed (and at the start), reads them
in a worker thread (the event loop never reads a file) and hands over what the exporter shows of
the last start-up (`phases.Figures`): the merged timeline's phases and suggested timeouts, or,
when the files cannot be read, that they cannot and why. A file caught half-written is read
again at the next change: its truncated last line is counted as skipped meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from exporter.sources.inittimeline import InitTimelineNode
from exporter.startup.phases import DEFAULT_FACTOR, Figures
from exporter.startup.vllm import InitTimelineError, Loaded, load, signature


def paths_of(node: InitTimelineNode) -> list[Path]:
    return [node.path] if node.dump is None else [node.dump, node.path]


def read(node: InitTimelineNode) -> Loaded | str:
    """The node's files, merged, or why they cannot be read, naming the node (blocking: it
    reads them)."""
    try:
        return load(paths_of(node))
    except InitTimelineError as e:
        return f"init-timeline node {node.name}: {e}"


def figures(node: InitTimelineNode, loaded: Loaded | str, now: float) -> Figures:
    """What the exporter shows of what was read, `now` (a start-up not done runs to it). With
    a dump, its start-up's: the phases from its t0 on (a run directory kept across start-ups
    holds older ones' worker files too)."""
    if isinstance(loaded, str):
        return Figures(node.name, False, loaded)
    timeline = loaded.timeline if node.dump is None else loaded.timeline.from_t0()
    return Figures.of(node.name, timeline, loaded.skipped, DEFAULT_FACTOR, now)


def _look(
    node: InitTimelineNode, paths: list[Path], seen: object, loaded: Loaded | str, now: float
) -> tuple[object, Loaded | str, Figures | None]:
    """One look (in a worker thread): the files read again when they changed or could not be
    read last time, and the figures when there are new ones (a start-up not done: always)."""
    now_seen = signature(paths)
    if now_seen != seen or isinstance(loaded, str):
        loaded = read(node)
        return now_seen, loaded, figures(node, loaded, now)
    if loaded.timeline.t_end is None:
        return now_seen, loaded, figures(node, loaded, now)
    return now_seen, loaded, None


async def watch(
    node: InitTimelineNode,
    put: Callable[[Figures], None],
    clock: Callable[[], float] = time.time,
) -> None:
    """Hand `put` the node's figures at the start and after every change, until cancelled (and
    at every look while its start-up is not done: its total grows)."""
    paths = paths_of(node)
    seen: object = None
    loaded: Loaded | str = ""
    while True:
        seen, loaded, new = await asyncio.to_thread(_look, node, paths, seen, loaded, clock())
        if new is not None:
            put(new)
        await asyncio.sleep(node.poll_seconds)
