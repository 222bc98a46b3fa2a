"""`journal-remote` nodes in the config: listed by host, or taken from the hosts seen."""

from __future__ import annotations

from pathlib import Path

from exporter.config.load import parse
from exporter.sources.remote import RemoteHosts, RemoteNode

from support.configs import problems

LISTED = """\
nodes:
  - name: gpu-a
    source: journal-remote
    directory: /var/log/journal/remote
  - name: b
    source: journal-remote
    directory: /var/log/journal/remote
    host: gpu-b.lab
    unit: other.service
"""

SEEN = """\
nodes:
  - name: gpu-a
    source: journal-remote
    directory: /var/log/journal/remote
  - name: "lab-{host}"
    source: journal-remote
    directory: /var/log/journal/remote
    hosts: seen
"""


def test_a_listed_node_reads_its_host_by_default_its_name() -> None:
    cfg = parse(LISTED, "cfg.yaml", {})
    remote = Path("/var/log/journal/remote")
    assert cfg.nodes == (
        RemoteNode("gpu-a", "sm-llm.service", remote, "gpu-a"),
        RemoteNode("b", "other.service", remote, "gpu-b.lab"),
    )
    assert cfg.hosts_seen == ()


def test_hosts_seen_is_kept_apart_from_the_nodes_with_its_name_a_pattern() -> None:
    cfg = parse(SEEN, "cfg.yaml", {})
    remote = Path("/var/log/journal/remote")
    assert [n.name for n in cfg.nodes] == ["gpu-a"]
    assert cfg.hosts_seen == (RemoteHosts("lab-{host}", "sm-llm.service", remote),)
    assert cfg.node_order == ("gpu-a", "lab-{host}")
    assert cfg.hosts_seen[0].node("gpu-c") == RemoteNode(
        "lab-gpu-c", "sm-llm.service", remote, "gpu-c"
    )


def test_the_problems_of_a_hosts_seen_entry_are_said_at_once() -> None:
    text = """\
nodes:
  - name: lab
    source: journal-remote
    directory: /r
    hosts: all
    host: gpu-a
  - name: "x {host}"
    source: journal-remote
    directory: /r
    hosts: seen
  - name: "{host}"
    source: journal-remote
    hosts: seen
  - name: {host}
    source: journal-remote
    directory: /r
    hosts: seen
"""
    assert problems(text) == [
        "cfg.yaml:2: nodes[0]: give host or hosts: seen, not both",
        "cfg.yaml:2: nodes[0].name: with hosts: seen, must have {host} in it",
        "cfg.yaml:5: nodes[0].hosts: must be seen (a node for every host seen)",
        "cfg.yaml:7: nodes[1].name: must be a name of letters, digits, _ . : - and {host}, "
        "quoted (\"{host}\"), got 'x {host}'",
        "cfg.yaml:11: nodes[2]: a journal-remote node needs the collector's directory",
        "cfg.yaml:14: nodes[3].name: must be a name of letters, digits, _ . : - and {host}, "
        "quoted (\"{host}\"), got {'host': None}",
    ]


def test_what_two_entries_both_read_is_refused() -> None:
    """One host of a directory read by two nodes, or every host seen there by two entries,
    would count the same entries twice (another unit of the host is another node's)."""
    text = """\
nodes:
  - {name: a, source: journal-remote, directory: /r, host: gpu-a}
  - {name: b, source: journal-remote, directory: /r, host: gpu-a}
  - {name: c, source: journal-remote, directory: /r, host: gpu-a, unit: other.service}
  - {name: "x-{host}", source: journal-remote, directory: /r, hosts: seen}
  - {name: "y-{host}", source: journal-remote, directory: /r, hosts: seen}
  - {name: "z-{host}", source: journal-remote, directory: /s, hosts: seen}
"""
    said = problems(text)
    assert said == [
        "cfg.yaml:3: nodes[1]: it reads what node 'a' reads: node b: host gpu-a in the "
        "collector's directory /r, unit sm-llm.service",
        "cfg.yaml:6: nodes[4]: it reads what node 'x-{host}' reads: nodes y-{host}: every host "
        "seen in the collector's directory /r, unit sm-llm.service",
    ]
