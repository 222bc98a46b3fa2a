"""The source kinds in one table, and what the config, the daemon and the report ask of a node's.

Every kind is one record (`kind.SourceKind`) in its own module: `file`, `journal`,
`journal-remote`, `ssh` (the kinds whose journal is read, each offering `follow` for the
daemon: Batches until cancelled, resuming from a position, and `window(since, until)` for the
report, over the same line layer) and `init-timeline` (only shown). This is the only place
that switches on a node's kind. A kind's reader module is imported by name when a node of that
kind is read, so the config loads without systemd-python or asyncssh, and an `ssh` node never
needs systemd-python.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, cast

from exporter.base.records import Batch
from exporter.sources import file, inittimeline, journal, remote, ssh
from exporter.sources.base import Progress, Reader, Source, SourceError
from exporter.sources.file import FileNode
from exporter.sources.inittimeline import InitTimelineNode
from exporter.sources.journal import JournalNode
from exporter.sources.kind import Named, SourceKind
from exporter.sources.remote import RemoteNode
from exporter.sources.ssh import SshNode

KINDS: dict[str, SourceKind[Any]] = {
    k.source: k for k in (file.KIND, journal.KIND, remote.KIND, ssh.KIND, inittimeline.KIND)
}
NodeConfig = FileNode | JournalNode | RemoteNode | SshNode  # a node whose journal is read
AnyNode = NodeConfig | InitTimelineNode

NODE_KEYS = {source: kind.keys for source, kind in KINDS.items()}
ALL_SOURCES = frozenset(KINDS)
ANY_NODE_KEY = frozenset().union(*NODE_KEYS.values())
# The kinds of source this installation can read (`journal` needs systemd-python).
AVAILABLE = frozenset(
    source
    for source, kind in KINDS.items()
    if kind.needs is None or importlib.util.find_spec(kind.needs.package) is not None
)


def kind_of(node: AnyNode) -> SourceKind[Any]:
    """The record of the node's kind."""
    return KINDS[node.source]


def describe(node: AnyNode) -> str:
    """The node in one line, for logs and check-config."""
    return kind_of(node).describe(node)


def paths(node: AnyNode, at: str) -> Iterator[Named]:
    """Every local path the node names, under its key path `at` (`nodes[2]`)."""
    return kind_of(node).paths(node, at)


def reader(node: NodeConfig) -> Reader:
    """The reader module of the node's kind, imported now; SourceError when this installation
    cannot read that kind."""
    kind = kind_of(node)
    if kind.reader is None:
        raise SourceError(f"node {node.name}: source {node.source!r} has no journal to read")
    if kind.source not in AVAILABLE:
        install = f" ({kind.needs.install})" if kind.needs is not None else ""
        raise SourceError(
            f"node {node.name}: source {node.source!r} is not available here{install}"
        )
    return cast(Reader, importlib.import_module(kind.reader))


def descriptors(node: NodeConfig) -> int:
    """The file descriptors the node's source holds at most while it runs."""
    return kind_of(node).descriptors


def follow(node: NodeConfig, since_us: int, position: str) -> Source:
    """The daemon's source for a configured node, from `position` (or `since_us` without one)."""
    return reader(node).follow(node, since_us, position)


def resumes(node: NodeConfig, position: str) -> bool:
    """Can `node`'s source go on from `position` (saved by a source of its kind)? A dump's is
    a place in one file (its inode, within its size); the journal's and SSH's go on from
    their cursor's time whatever became of it. Blocking (a stat): call it off the loop."""
    return kind_of(node).resumes(node, position)


def window(
    node: NodeConfig, since_us: int, until_us: int, progress: Progress | None = None
) -> AsyncIterator[Batch]:
    """A configured node's entries from `since_us` to (at least) `until_us` that may matter, as
    Batches; SourceError when they cannot be read."""
    return reader(node).window(node, since_us, until_us, progress)


async def read_windows(
    nodes: Sequence[NodeConfig],
    since_us: int,
    until_us: int,
    add: Callable[[Batch], None],
    progress: Progress | None = None,
) -> dict[str, str]:
    """Every node's window, all at once, each Batch to `add` as it comes; returns, for each
    node that could not be read (to its end), why. One node's failure stops no other."""
    failed: dict[str, str] = {}

    async def one(node: NodeConfig) -> None:
        try:
            async for batch in window(node, since_us, until_us, progress):
                add(batch)
        except asyncio.CancelledError:
            raise
        except SourceError as e:
            failed[node.name] = str(e)
        except Exception as e:  # anything else: this node's, not the report's
            failed[node.name] = f"node {node.name}: {type(e).__name__}: {e}"

    async with asyncio.TaskGroup() as tg:
        for node in nodes:
            tg.create_task(one(node), name=f"window {node.name}")
    return failed
