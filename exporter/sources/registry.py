"""Sources: where a node's journal lines come from, and the registry that picks a node's reader.

Every kind (`file`, `journal`, `ssh`) offers `follow` (the daemon: Batches until cancelled,
resuming from a position) and `window(since, until)` (the report: the Batches of a past window,
then the end), both over the same line layer. This registry is the only place that switches on a
node's kind; a kind's module is imported only when a node of that kind is read, so an `ssh` node
never needs systemd-python.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator, Callable, Sequence

from exporter.base.records import Batch
from exporter.config.config import FileNode, JournalNode, NodeConfig, SshNode
from exporter.sources.base import Progress, Source, SourceError

__all__ = [
    "AVAILABLE",
    "Progress",
    "Source",
    "SourceError",
    "follow",
    "host_keys",
    "read_windows",
    "resumes",
    "window",
]

# The kinds of source this installation can read (`journal` needs systemd-python).
AVAILABLE = frozenset(
    {"file", "ssh", "init-timeline"}
    | ({"journal"} if importlib.util.find_spec("systemd") is not None else set())
)


def _unavailable(node: NodeConfig) -> SourceError:
    return SourceError(
        f"node {node.name}: source {node.source!r} is not available here "
        f"(the journal source needs systemd-python: pip install 'sm-llm-exporter[journal]')"
    )


def follow(node: NodeConfig, since_us: int, position: str) -> Source:
    """The daemon's source for a configured node, from `position` (or `since_us` without one)."""
    if isinstance(node, FileNode):
        from exporter.sources.file import FileSource

        return FileSource(node.name, node.path, since_us=since_us, position=position)
    if isinstance(node, SshNode):
        from exporter.sources.ssh import SshSource

        return SshSource(node, since_us=since_us, position=position)
    if "journal" not in AVAILABLE:
        raise _unavailable(node)
    from exporter.sources.journal import JournalSource

    return JournalSource(
        node.name,
        node.unit,
        since_us=since_us,
        position=position,
        directory=node.directory,
        files=node.files,
    )


def resumes(node: NodeConfig, position: str) -> bool:
    """Can `node`'s source go on from `position` (saved by a source of its kind)? A dump's is
    a place in one file (its inode, within its size); the journal's and SSH's go on from
    their cursor's time whatever became of it. Blocking (a stat): call it off the loop."""
    if not position or not isinstance(node, FileNode):
        return True
    from exporter.sources.file import FilePosition

    saved = FilePosition.parse(position)
    try:
        return saved is not None and saved.of(node.path.stat())
    except OSError:  # (not there yet: read from its start once it is)
        return False


def window(
    node: NodeConfig, since_us: int, until_us: int, progress: Progress | None = None
) -> AsyncIterator[Batch]:
    """A configured node's entries from `since_us` to (at least) `until_us` that may matter, as
    Batches; SourceError when they cannot be read."""
    if isinstance(node, FileNode):
        from exporter.sources import file

        return file.window(node.name, node.path, since_us, until_us)
    if isinstance(node, SshNode):
        from exporter.sources import ssh

        return ssh.window(node, since_us, until_us, progress)
    if "journal" not in AVAILABLE:
        raise _unavailable(node)
    from exporter.sources import journal

    assert isinstance(node, JournalNode)
    return journal.window(node, since_us, until_us)


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


async def host_keys(
    nodes: Sequence[NodeConfig], *, named: bool = False
) -> tuple[list[str], list[str]]:
    """known_hosts lines (with SHA256 fingerprints as comments) of every SSH node reached, and
    why each of the others could not be; a node of another kind is one of those when `named`."""
    lines: list[str] = []
    problems: list[str] = []
    for node in nodes:
        if not isinstance(node, SshNode):
            if named:
                problems.append(f"node {node.name}: not an ssh node (source: {node.source})")
            continue
        from exporter.sources.ssh import host_key

        try:
            lines += await host_key(node.name, node.host, node.port)
        except SourceError as e:
            problems.append(str(e))
    return lines, problems
