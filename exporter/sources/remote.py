"""The `journal-remote` source kind: a node's entries in a journal-remote collector's directory.

A collector runs `systemd-journal-remote --split-mode=host`; every node uploads its journal to
it with `systemd-journal-upload`. A node of this kind names the collector's output directory
and its host: the `_HOSTNAME` its entries carry (by default the node's name). The nodes of one
directory share one reader (`sources/remotereader.py`, which needs systemd-python), which hands
each entry to the node of its host.

An entry with `hosts: seen` in place of `host` is a `RemoteHosts`: a node for every host whose
entries of the unit are in the directory when the config is read (at start and at each
reload), named by the entry's `name` with `{host}` in it (`commands/seen.py` makes them).
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


@dataclass(frozen=True)
class RemoteHosts:
    """`hosts: seen`: a node for each host seen in a collector's directory, named by `name`
    with the host in place of `{host}`."""

    name: str  # with `{host}` in it
    unit: str
    directory: Path
    source: str = SOURCE

    def node(self, host: str) -> RemoteNode:
        """The node of `host` (its name may not be a valid one: check it)."""
        return RemoteNode(self.name.replace(HOST, host), self.unit, self.directory, host)


HOST = "{host}"  # in a `hosts: seen` entry's name: the host's name
SEEN = "seen"  # the one value of `hosts:`


def check(checker: Checker, path: str, entry: NodeEntry) -> RemoteNode | None:
    """A `journal-remote` node: a collector's directory and the node's host in it."""
    n = entry.keys
    unit = node_unit(checker, path, entry)
    directory = _directory(checker, path, n)
    host = checker.get(
        n, "host", path, as_host, entry.name, "must be a host name (the entries' _HOSTNAME)"
    )
    return None if directory is None else RemoteNode(entry.name, unit, directory, host)


def check_seen(checker: Checker, path: str, entry: NodeEntry) -> RemoteHosts | None:
    """A `journal-remote` entry with `hosts: seen`: a node for every host seen in a collector's
    directory, each named by the entry's name with the host in place of `{host}`."""
    n = entry.keys
    unit = node_unit(checker, path, entry)
    directory = _directory(checker, path, n)
    if n["hosts"] != SEEN:
        checker.problem(f"{path}.hosts", f"must be {SEEN} (a node for every host seen)")
    if "host" in n:
        checker.problem(path, "give host or hosts: seen, not both")
    if HOST not in entry.name:
        checker.problem(f"{path}.name", f"with hosts: seen, must have {HOST} in it")
    return None if directory is None else RemoteHosts(entry.name, unit, directory)


def _directory(checker: Checker, path: str, n: dict[str, object]) -> Path | None:
    directory: Path | None = checker.get(n, "directory", path, checker.path, None, "must be a path")
    if directory is None and n.get("directory") is None:
        checker.problem(path, "a journal-remote node needs the collector's directory")
    return directory


def is_hosts_seen(item: object) -> bool:
    """Is this node's mapping under `nodes:` a `hosts: seen` entry (its name a pattern)?"""
    return isinstance(item, dict) and item.get("source") == SOURCE and "hosts" in item


def paths(node: RemoteNode, at: str) -> Iterator[Named]:
    yield Named(f"{at}.directory", node.directory, directory=True, regular=False)


def describe(node: RemoteNode) -> str:
    return (
        f"node {node.name}: host {node.host} in the collector's directory {node.directory}, "
        f"unit {node.unit}"
    )


def describe_seen(hosts: RemoteHosts) -> str:
    return (
        f"nodes {hosts.name}: every host seen in the collector's directory {hosts.directory}, "
        f"unit {hosts.unit}"
    )


def claims(node: RemoteNode) -> Hashable:
    """What no other node may read as well: its host's entries of its unit in its directory."""
    return (SOURCE, str(node.directory), node.unit, node.host)


KIND = SourceKind(
    SOURCE,
    RemoteNode,
    COMMON_KEYS | {"unit", "directory", "host", "hosts"},
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
