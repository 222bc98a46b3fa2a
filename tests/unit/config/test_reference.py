"""The config reference (`config/reference.py`) holds every key of the schema with the schema's
default; docs/configuration.md shows its tables; config.example.yaml agrees with it and checks
clean."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.base.kinds import KindRule
from exporter.commands import preflight
from exporter.config.reference import EVERY_SOURCE, KINDS, NODES, REQUIRED, Key, keys, markdown
from exporter.config.schema import DEFAULTS, KIND_KEYS, TOP_KEYS, Config
from exporter.sources.file import FileNode
from exporter.sources.inittimeline import InitTimelineNode
from exporter.sources.journal import JournalNode
from exporter.sources.registry import ALL_SOURCES, NODE_KEYS
from exporter.sources.remote import RemoteNode
from exporter.sources.ssh import SshNode

from support.configs import FILE_NODE, good
from support.golden import UPDATE_ENV
from support.tools import REPO
from support.tools import yaml_text as y

PAGE = REPO / "docs" / "configuration.md"
EXAMPLE = REPO / "config.example.yaml"
BEGIN = "<!-- generated: exporter/config/reference.py -->"
END = "<!-- end generated -->"
NODE_CLASSES: dict[str, type[Any]] = {
    "file": FileNode,
    "journal": JournalNode,
    "journal-remote": RemoteNode,
    "ssh": SshNode,
    "init-timeline": InitTimelineNode,
}
# the least a node of each source needs, before the key under test
NODE_BASE = {
    "file": "{name: a, source: file, path: /x}",
    "journal": "{name: a, source: journal}",
    "journal-remote": "{name: a, source: journal-remote, directory: /x}",
    "ssh": "{name: a, source: ssh, host: h}",
    "init-timeline": "{name: a, source: init-timeline, path: /x}",
}
SERVICE_ENV = {"CREDENTIALS_DIRECTORY": str(preflight.SERVICE_CREDENTIALS)}

TOP = [k for k in keys() if not k.path.startswith((KINDS, NODES))]
KIND = [k for k in keys() if k.path.startswith(KINDS)]
NODE = [k for k in keys() if k.path.startswith(NODES)]


def test_the_top_level_keys_are_the_schemas() -> None:
    assert sorted(k.path for k in TOP) == sorted(TOP_KEYS)
    assert [k.path for k in TOP if k.sources] == []


def test_a_kinds_keys_are_the_schemas() -> None:
    assert sorted(k.path.removeprefix(KINDS) for k in KIND) == sorted(KIND_KEYS)
    assert [k.path for k in KIND if k.sources] == []


@pytest.mark.parametrize("source", sorted(ALL_SOURCES))
def test_each_sources_keys_are_the_schemas(source: str) -> None:
    taken = [k.path.removeprefix(NODES) for k in NODE if source in k.sources]
    assert len(taken) == len(set(taken)), "a key listed twice for one source"
    assert sorted(taken) == sorted(NODE_KEYS[source])


def test_every_node_key_names_known_sources_in_order() -> None:
    assert set(EVERY_SOURCE) == ALL_SOURCES
    for k in NODE:
        assert k.sources, k.path
        assert list(k.sources) == [s for s in EVERY_SOURCE if s in k.sources], k.path


def test_every_key_says_what_it_means() -> None:
    for k in keys():
        assert k.meaning.endswith(".") and k.meaning[0].isupper(), k.path
        assert "\n" not in k.meaning, k.path


@pytest.mark.parametrize("key", TOP, ids=lambda k: k.path)
def test_a_top_level_default_is_the_schemas(key: Key) -> None:
    """Set to the reference's default, the key reads back as the schema's default."""
    if not key.default:
        required = key.meaning.startswith(REQUIRED)
        assert required or getattr(DEFAULTS, key.path) in (None, ()), key.path
        return
    assert not key.meaning.startswith(REQUIRED)
    yaml.safe_load(f"v: {key.default}")  # (reads as YAML on its own)
    cfg = good(y(f"{key.path}: {key.default}", *FILE_NODE))
    assert dataclasses.replace(cfg, nodes=()) == Config()


@pytest.mark.parametrize("key", KIND, ids=lambda k: k.path)
def test_a_kinds_default_is_the_schemas(key: Key) -> None:
    name = key.path.removeprefix(KINDS)
    (field,) = (f for f in dataclasses.fields(KindRule) if f.name == name)
    if not key.default:
        assert key.meaning.startswith(REQUIRED) or field.default is None
        return
    assert yaml.safe_load(key.default) == field.default


NODE_CASES = [(k, s) for k in NODE for s in k.sources]


@pytest.mark.parametrize(
    ("key", "source"), NODE_CASES, ids=[f"{s}.{k.path}" for k, s in NODE_CASES]
)
def test_a_node_keys_default_is_the_dataclass_fields(key: Key, source: str) -> None:
    """The default is the node dataclass's field default; given so, the node reads as without
    the key."""
    name = key.path.removeprefix(NODES)
    fields = [f for f in dataclasses.fields(NODE_CLASSES[source]) if f.name == name]
    if not fields:  # (the one key that makes other nodes, `hosts: seen`: no default to have)
        assert (source, name, key.default) == ("journal-remote", "hosts", ""), key.path
        return
    (field,) = fields
    if not key.default:
        empty = (dataclasses.MISSING, None, ())
        assert key.meaning.startswith(REQUIRED) or field.default in empty, key.path
        return
    value = yaml.safe_load(key.default)
    assert value == field.default or Path(value) == field.default
    base = NODE_BASE[source]
    given = base[:-1] + f", {name}: {key.default}}}"
    assert good(y("nodes:", f"  - {given}")) == good(y("nodes:", f"  - {base}"))


def generated(text: str) -> str:
    """The part of the page between its markers (without them)."""
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"{PAGE.name}: markers"
    start = text.index(BEGIN) + len(BEGIN)
    return text[start : text.index(END)].strip("\n")


def test_the_page_shows_the_reference() -> None:
    """The generated part of docs/configuration.md is `markdown()`; with SMLLM_UPDATE_GOLDEN=1
    it is written instead."""
    text = PAGE.read_text(encoding="utf-8")
    want = markdown().strip("\n")
    if os.environ.get(UPDATE_ENV):
        head, tail = text.split(BEGIN)[0], text.split(END)[1]
        PAGE.write_text(f"{head}{BEGIN}\n{want}\n{END}{tail}", encoding="utf-8")
        text = PAGE.read_text(encoding="utf-8")
    assert generated(text) == want, (
        f"{PAGE.relative_to(REPO)} differs from exporter/config/reference.py: rewrite it with "
        f"{UPDATE_ENV}=1 and review the diff"
    )


def test_every_anchor_of_the_tables_is_a_heading() -> None:
    """The per-source headings keep their anchors (`#source-ssh`)."""
    headings = re.findall(r"(?m)^### (.*)$", markdown())
    assert [h for h in headings if h.startswith("`source:")] == [
        f"`source: {s}`" for s in EVERY_SOURCE
    ]


EXAMPLE_TEXT = EXAMPLE.read_text(encoding="utf-8")


def test_the_example_sets_each_top_level_key_to_the_references_default() -> None:
    data = yaml.safe_load(EXAMPLE_TEXT)
    by_path = {k.path: k for k in TOP}
    for key, value in data.items():
        if key == "nodes":
            continue
        want = yaml.safe_load(by_path[key].default) if by_path[key].default else None
        assert value == want, key


def test_the_example_gives_each_node_keys_default() -> None:
    for k in NODE:
        if k.default:
            assert f"{k.path.removeprefix(NODES)}: {k.default}" in EXAMPLE_TEXT, k.path


def test_the_example_checks_clean_but_for_its_placeholder_dump() -> None:
    """Through check-config's own checks: no problem; the one warning is its dump, not there
    yet (the daemon waits for it)."""
    checked = preflight.check(EXAMPLE, env={})
    assert checked.config is not None
    assert list(checked.problems) == []
    assert len(checked.warnings) == 1
    assert "nodes[0].path: /srv/dumps/node0.json does not exist yet" in checked.warnings[0]


def uncommented(text: str) -> str:
    """The example with its commented nodes uncommented: `# - {...}` lines, and `# - name:`
    blocks with their `#   key: value` lines."""
    out, in_block = [], False
    for line in text.splitlines():
        m = re.fullmatch(r"(\s*)# (- \{.*\}|- name: .*)", line)
        if m:
            in_block = m.group(2).startswith("- name:")
            out.append(m.group(1) + m.group(2))
            continue
        m = re.fullmatch(r"(\s*)# (  \w+: .*)", line)
        if in_block and m:
            out.append(m.group(1) + m.group(2))
            continue
        in_block = False
        out.append(line)
    return "\n".join(out) + "\n"


def test_the_examples_commented_nodes_are_valid_under_the_service() -> None:
    cfg = good(uncommented(EXAMPLE_TEXT), env=SERVICE_ENV)
    nodes = (*cfg.nodes, *cfg.init_timelines)
    assert {n.source for n in nodes} == ALL_SOURCES
    ssh = [n for n in cfg.nodes if isinstance(n, SshNode)]
    credentials = preflight.SERVICE_CREDENTIALS
    assert [n.known_hosts for n in ssh] == [credentials / "ssh_known_hosts"] * len(ssh)
    assert (credentials / "ssh_id_ed25519",) in [n.client_keys for n in ssh]
