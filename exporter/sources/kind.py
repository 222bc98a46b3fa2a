"""What a source kind declares in its one record (`SourceKind`), and what the records share.

A node of the config names its kind with `source:`. Each kind is one module of this folder
holding one `SourceKind`: its node's settings (a frozen dataclass), the keys its mapping may
have, its checks, the local paths `check-config` checks, its description, and the module that
reads its journal (`base.Reader`: `follow` for the daemon, `window` for the report), imported
by name only when a node of the kind is read. `registry.py` lists the records in one table.
Nothing here imports a reader: the config reads the records without asyncssh or systemd.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from exporter.config.checker import Checker
from exporter.config.values import as_unit

N = TypeVar("N")

COMMON_KEYS = frozenset({"name", "source"})  # what every node's mapping has
NOT_SHOWN = "the path given"  # how a problem names a path that may be a secret


@dataclass(frozen=True)
class NodeEntry:
    """A node's mapping under `nodes:`, its keys checked against its kind's already."""

    name: str  # its name, read already
    keys: dict[str, Any]
    unit: str  # the top-level `unit:`, a node's unit unless it names its own


@dataclass(frozen=True)
class Named:
    """A path the config names: its key path, whether it is a directory to read, whether it
    must be a regular file (a FIFO there would be read once, or block), whether it may be a
    secret (never shown), and whether the daemon waits for it to appear (a dump)."""

    key: str
    path: Path
    directory: bool = False
    regular: bool = True
    secret: bool = False
    waited: bool = False

    @property
    def shown(self) -> str:
        """The path as a problem names it."""
        return NOT_SHOWN if self.secret else str(self.path)


@dataclass(frozen=True)
class Needs:
    """A package a kind's reader imports that an installation may lack."""

    package: str  # its import name, looked for without importing it
    install: str  # what to install, as an error says it


def always(node: object, position: str) -> bool:
    """A position any source of the kind goes on from (a journal cursor: from its time, if it
    is gone)."""
    return True


@dataclass(frozen=True)
class SourceKind(Generic[N]):
    """One kind of source, all the exporter knows of it: a node's settings and checks, the
    paths check-config checks, its description, and where its reader is."""

    source: str  # its `source:` value
    node: type[N]  # its node's settings, as checked
    keys: frozenset[str]  # the keys its mapping may have
    # the node read from its checked mapping, or None when it cannot be used (a problem says
    # why), given the Checker and the node's key path (`nodes[2]`)
    check: Callable[[Checker, str, NodeEntry], N | None]
    paths: Callable[[N, str], Iterator[Named]]  # its local paths, under its key path
    describe: Callable[[N], str]  # the node in one line, for logs and check-config
    # the module that follows its journal and reads its windows (`base.Reader`); None for a
    # kind whose node has no journal (the daemon watches an init-timeline node's files)
    reader: str | None
    needs: Needs | None = None  # what its reader imports that may not be installed
    # can its reader go on from a saved position (blocking: called off the loop)?
    resumes: Callable[[N, str], bool] = always
    # the file descriptors a running source of it holds at most (its descriptor budget share)
    descriptors: int = 1
    # what a node reads that no other node may read as well (None: nothing of the kind)
    claims: Callable[[N], Hashable] | None = None


def node_unit(checker: Checker, path: str, entry: NodeEntry) -> str:
    """The node's `unit:`, else the top-level one."""
    unit: str = checker.get(
        entry.keys, "unit", path, as_unit, entry.unit, "must be a systemd unit name"
    )
    return unit
