"""The `file` source kind: a journal dump followed like `tail -F`, its node and its position.

Its reader is `sources/filereader.py`. A position is (device, inode, byte offset after the last
whole line read): it resumes only in the same file, within its size.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from exporter.config.checker import Checker
from exporter.sources.kind import COMMON_KEYS, Named, NodeEntry, SourceKind, node_unit


@dataclass(frozen=True)
class FileNode:
    name: str
    path: Path
    source: str = "file"


@dataclass(frozen=True)
class FilePosition:
    """Where a dump was read to: its device and inode, and the offset after the last line."""

    dev: int
    ino: int
    offset: int

    def __str__(self) -> str:
        return f"{self.dev}:{self.ino}:{self.offset}"

    @classmethod
    def parse(cls, text: str) -> FilePosition | None:
        try:
            dev, ino, offset = (int(x) for x in text.split(":"))
        except ValueError:
            return None
        return cls(dev, ino, offset) if offset >= 0 else None

    def of(self, st: os.stat_result) -> bool:
        """Is this a position in the file of `st` (its inode, within its size)?"""
        return (self.dev, self.ino) == (st.st_dev, st.st_ino) and self.offset <= st.st_size


def check(checker: Checker, path: str, entry: NodeEntry) -> FileNode | None:
    """A `file` node: a journal dump followed like `tail -F`."""
    n = entry.keys
    node_unit(checker, path, entry)  # (not a file node's key: checked as the others read it)
    file_path = checker.get(n, "path", path, checker.path, None, "must be a path")
    if file_path is None:
        if n.get("path") is None:
            checker.problem(path, "a file node needs a path")
        return None
    return FileNode(entry.name, file_path)


def paths(node: FileNode, at: str) -> Iterator[Named]:
    yield Named(f"{at}.path", node.path, regular=False, waited=True)  # (a FIFO is followed too)


def describe(node: FileNode) -> str:
    return f"node {node.name}: file {node.path}"


def resumes(node: FileNode, position: str) -> bool:
    """Is `position` a place in the node's dump as it is now (its inode, within its size)?
    Blocking (a stat): call it off the loop."""
    if not position:
        return True
    saved = FilePosition.parse(position)
    try:
        return saved is not None and saved.of(node.path.stat())
    except OSError:  # (not there yet: read from its start once it is)
        return False


KIND = SourceKind(
    "file",
    FileNode,
    COMMON_KEYS | {"path"},
    check,
    paths,
    describe,
    reader="exporter.sources.filereader",
    resumes=resumes,
    descriptors=2,  # (the file followed, and the one it left at the path, read to its end)
)
