"""The nodes of `hosts: seen` entries: a node for each host seen in a collector's directory.

Made whenever the config is read (at start, at each reload, for a report or a check), from the
host names that entries of the unit carry in the directory's journal files then. A host that a
node of the config lists already keeps that node. A host whose name makes no valid node name
(the names come from the hosts' own journals) is skipped and said, escaped. A directory that
cannot be read refuses the config, as any other problem of it would; but a daemon that starts
does so with its other nodes, and says so.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Hashable

from exporter.config.errors import ConfigError
from exporter.config.schema import Config
from exporter.config.values import as_host, as_node_name
from exporter.sources.remote import RemoteHosts, RemoteNode, claims, describe_seen

log = logging.getLogger(__name__)


def with_hosts_seen(cfg: Config, source: str, *, refuse: bool = True) -> Config:
    """`cfg` with the nodes of its `hosts: seen` entries among its nodes (blocking: it reads
    the directories). A directory that cannot be read: ConfigError, naming `source` (a reload
    keeps the config in force); or, not `refuse`, logged as an error and no node made from it
    (a daemon starting with its other nodes, the collector not up yet)."""
    if not cfg.hosts_seen:
        return cfg
    from exporter.sources.remotefiles import hosts_seen  # (needs systemd-python)

    nodes = list(cfg.nodes)
    names = {n.name for n in nodes} | {t.name for t in cfg.init_timelines}
    claimed = {claims(n) for n in nodes if isinstance(n, RemoteNode)}
    problems: list[str] = []
    for entry in cfg.hosts_seen:
        try:
            hosts = hosts_seen(entry.directory, entry.unit)
        except OSError as e:
            problems.append(f"{describe_seen(entry)}: cannot read the directory: {e}")
            continue
        made: list[RemoteNode] = []
        for host in hosts:
            node = _node_of(entry, host)
            if node is not None and _new(node, names, claimed):
                names.add(node.name)
                claimed.add(claims(node))
                made.append(node)
        nodes += made
        log.info("%s: %d hosts seen, %d nodes made", describe_seen(entry), len(hosts), len(made))
    if problems and refuse:
        raise ConfigError(source, problems)
    for problem in problems:
        log.error("%s: %s; no node made from it until a reload", source, problem)
    return dataclasses.replace(cfg, nodes=tuple(nodes))


def _node_of(entry: RemoteHosts, raw: bytes) -> RemoteNode | None:
    """The node of the host named `raw`, or None (said) when that makes no valid node."""
    host = raw.decode("utf-8", "replace")
    node = entry.node(host)
    try:
        as_host(host)
        as_node_name(node.name)
    except ValueError:
        log.warning("%s: host %s skipped: it makes no valid node name", describe_seen(entry), host)
        return None
    return node


def _new(node: RemoteNode, names: set[str], claimed: set[Hashable]) -> bool:
    """Is `node` one to add (its host not read by a node already, its name free)?"""
    if claims(node) in claimed:
        return False
    if node.name in names:
        log.warning("host %s: no node made, the name %s is another node's", node.host, node.name)
        return False
    return True
