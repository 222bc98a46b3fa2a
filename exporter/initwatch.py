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

from exporter.config import InitTimelineNode
from exporter.inittimeline import InitTimelineError, Loaded, load, signature
from exporter.phases import DEFAULT_FACTOR, Figures


def paths_of(node: InitTimelineNode) -> list[Path]:
    return [node.path] if node.dump is None else [node.dump, node.path]


def read(node: InitTimelineNode) -> Loaded | str:
    """The node's files, merged, or why they cannot be read (blocking: it reads them)."""
    try:
        return load(paths_of(node))
    except InitTimelineError as e:
        return str(e)


def figures(node: InitTimelineNode, loaded: Loaded | str, now: float) -> Figures:
    """What the exporter shows of what was read, `now` (a start-up not done runs to it)."""
    if isinstance(loaded, str):
        return Figures(node.name, False, loaded)
    return Figures.of(node.name, loaded.timeline, len(loaded.skipped), DEFAULT_FACTOR, now)


async def watch(
    node: InitTimelineNode,
    put: Callable[[Figures], None],
    clock: Callable[[], float] = time.time,
) -> None:
    """Hand `put` the node's figures at the start and after every change, until cancelled (and
    at every look while its start-up is not done: its total grows)."""
    paths = paths_of(node)
    seen: tuple[object, ...] | None = None
    loaded: Loaded | str = ""
    while True:
        now_seen = await asyncio.to_thread(signature, paths)
        if now_seen != seen:
            seen = now_seen
            loaded = await asyncio.to_thread(read, node)
            put(figures(node, loaded, clock()))
        elif not isinstance(loaded, str) and loaded.timeline.t_end is None:
            put(figures(node, loaded, clock()))
        await asyncio.sleep(node.poll_seconds)
