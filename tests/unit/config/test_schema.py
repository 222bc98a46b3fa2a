"""The schema: a minimal config takes every default, the dataclasses are frozen, and
config.example.yaml documents every accepted key, every source and every default."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from exporter.accounting.settings import DEFAULT_BUCKETS_S
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.config.schema import KIND_KEYS, TOP_KEYS, Config
from exporter.sources.file import FileNode
from exporter.sources.journal import JournalNode
from exporter.sources.registry import ALL_SOURCES, NODE_KEYS
from exporter.sources.ssh import SshNode

from support.configs import (
    FILE_NODE,
    ROOT,
    good,
)
from support.tools import yaml_text as y

EXAMPLE = ROOT / "config.example.yaml"


def test_minimal_config_takes_every_default() -> None:
    assert good(y(*FILE_NODE)) == Config(
        listen_host="",
        listen_port=10027,
        state_dir=Path("/var/lib/sm-llm-exporter"),
        unit="sm-llm.service",
        max_request_seconds=600,
        stall_seconds=300,
        since="now",
        duration_buckets=DEFAULT_BUCKETS_S,
        kinds=Kinds(DEFAULT_RULES),
        nodes=(FileNode("a", Path("/x")),),
    )


@pytest.mark.parametrize(
    ("obj", "attribute", "value"),
    [
        (Config(), "listen_port", 1),
        (Config(), "nodes", ()),
        (FileNode("a", Path("/x")), "path", Path("/y")),
        (JournalNode("a", "u.service"), "unit", "v.service"),
        (SshNode("a", "h", "u.service"), "port", 2222),
        (SshNode("a", "h", "u.service"), "client_keys", (Path("/k"),)),
    ],
    ids=["Config", "Config.nodes", "FileNode", "JournalNode", "SshNode", "SshNode.client_keys"],
)
def test_config_dataclasses_are_frozen(obj: object, attribute: str, value: object) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, attribute, value)


EXAMPLE_TEXT = EXAMPLE.read_text(encoding="utf-8")


ACCEPTED = sorted(
    {("top", k) for k in TOP_KEYS}
    | {(f"node[{source}]", k) for source, keys in NODE_KEYS.items() for k in keys}
    | {("kind", k) for k in KIND_KEYS}
)


@pytest.mark.parametrize(("where", "key"), ACCEPTED, ids=[f"{w}.{k}" for w, k in ACCEPTED])
def test_example_mentions_every_accepted_key(where: str, key: str) -> None:
    assert re.search(rf"(?<![\w$]){re.escape(key)}(?!\w)", EXAMPLE_TEXT), (
        f"{where} key {key!r} is accepted by the config (exporter/config/) but not documented in "
        f"config.example.yaml"
    )


@pytest.mark.parametrize("source", sorted(ALL_SOURCES))
def test_example_documents_every_source(source: str) -> None:
    assert f"source: {source}" in EXAMPLE_TEXT


def test_example_sets_every_top_level_key_to_its_default() -> None:
    data = yaml.safe_load(EXAMPLE_TEXT)
    assert set(data) == TOP_KEYS
    cfg = good(EXAMPLE_TEXT)
    assert dataclasses.replace(cfg, nodes=()) == Config()


def _show_default(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


SSH_DEFAULTS = [
    (f.name, _show_default(f.default))
    for f in dataclasses.fields(SshNode)
    if f.name != "source" and f.default not in (dataclasses.MISSING, None, ())
]


@pytest.mark.parametrize(("key", "default"), SSH_DEFAULTS)
def test_example_gives_the_ssh_defaults(key: str, default: str) -> None:
    assert f"{key}: {default}" in EXAMPLE_TEXT


def test_example_commented_nodes_are_valid_once_uncommented() -> None:
    text, n = re.subn(r"(?m)^(\s*)# (- \{.*\})\s*$", r"\1\2", EXAMPLE_TEXT)
    assert n >= 2
    cfg = good(text)
    assert {n.source for n in (*cfg.nodes, *cfg.init_timelines)} == ALL_SOURCES
