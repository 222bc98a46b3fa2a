"""The `journal` source kind: a journal read through systemd-python, matched on a unit.

Its reader is `sources/journalreader.py`, which needs systemd-python: an installation without it
has no `journal` kind (`registry.AVAILABLE`). A node reads the local journal, a journal
directory, or journal files.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from exporter.config.checker import Checker
from exporter.sources.kind import COMMON_KEYS, Named, Needs, NodeEntry, SourceKind, node_unit


@dataclass(frozen=True)
class JournalNode:
    name: str
    unit: str
    directory: Path | None = None
    files: tuple[Path, ...] = ()
    source: str = "journal"


def check(checker: Checker, path: str, entry: NodeEntry) -> JournalNode:
    """A `journal` node: the local journal, a journal directory, or journal files."""
    n = entry.keys
    unit = node_unit(checker, path, entry)
    directory = checker.get(n, "directory", path, checker.path, None, "must be a path")
    files = checker.get(n, "files", path, checker.paths, (), "must be a list of paths")
    if directory is not None and files:
        checker.problem(path, "give directory or files, not both")
    return JournalNode(entry.name, unit, directory, files)


def paths(node: JournalNode, at: str) -> Iterator[Named]:
    if node.directory is not None:
        yield Named(f"{at}.directory", node.directory, directory=True, regular=False)
    for j, f in enumerate(node.files):
        yield Named(f"{at}.files[{j}]", f)


def describe(node: JournalNode) -> str:
    where = node.directory or (", ".join(map(str, node.files)) or "the local journal")
    return f"node {node.name}: journal {where}, unit {node.unit}"


KIND = SourceKind(
    "journal",
    JournalNode,
    COMMON_KEYS | {"unit", "directory", "files"},
    check,
    paths,
    describe,
    reader="exporter.sources.journalreader",
    descriptors=32,  # (sd_journal opens each journal file of the directory)
    needs=Needs(
        "systemd",
        "the journal source needs systemd-python: pip install 'sm-llm-exporter[journal]'",
    ),
)
