"""The `journal-remote` source kind: a node's entries in a journal-remote collector's directory.

A collector runs `systemd-journal-remote --split-mode=host`; every node uploads its journal to
it with `systemd-journal-upload`. A node of this kind names the collector's output directory
and its host: the `_HOSTNAME` its entries carry (by default the node's name). The nodes of one
directory share one reader (`sources/remotereader.py`, which needs systemd-python), which hands
each entry to the node of its host.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path

from exporter.config.checker import Checker
from exporter.config.values import as_host
from exporter.sources.kind import COMMON_KEYS, Named, Needs, NodeEntry, SourceKind, node_unit

SOURCE = "journal-remote"


@dataclass(frozen=True)
class RemoteNode:
    name: str
    unit: str
    directory: Path
    host: str  # the `_HOSTNAME` of its entries
    source: str = SOURCE


def check(checker: Checker, path: str, entry: NodeEntry) -> RemoteNode | None:
    """A `journal-remote` node: a collector's directory and the node's host in it."""
    n = entry.keys
    unit = node_unit(checker, path, entry)
    directory = checker.get(n, "directory", path, checker.path, None, "must be a path")
    if directory is None and n.get("directory") is None:
        checker.problem(path, "a journal-remote node needs the collector's directory")
    host = checker.get(
        n, "host", path, as_host, entry.name, "must be a host name (the entries' _HOSTNAME)"
    )
    if directory is None:
        return None
    return RemoteNode(entry.name, unit, directory, host)


def paths(node: RemoteNode, at: str) -> Iterator[Named]:
    yield Named(f"{at}.directory", node.directory, directory=True, regular=False)


def describe(node: RemoteNode) -> str:
    return (
        f"node {node.name}: host {node.host} in the collector's directory {node.directory}, "
        f"unit {node.unit}"
    )


def claims(node: RemoteNode) -> Hashable:
    """What no other node may read as well: its host in its directory."""
    return (SOURCE, str(node.directory), node.host)


KIND = SourceKind(
    SOURCE,
    RemoteNode,
    COMMON_KEYS | {"unit", "directory", "host"},
    check,
    paths,
    describe,
    reader="exporter.sources.remotereader",
    # the nodes of a directory share its one reader, which holds a descriptor for each journal
    # file there: a host's file
    descriptors=1,
    claims=claims,
    needs=Needs(
        "systemd",
        "the journal-remote source needs systemd-python: pip install 'sm-llm-exporter[journal]'",
    ),
)
