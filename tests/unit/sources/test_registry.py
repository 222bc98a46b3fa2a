"""The table of source kinds: one record per kind, each reader what the registry asks of it, the
kinds this installation cannot read refused by name, and the positions each kind resumes from."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import importlib.util
import inspect
import os
import typing
from pathlib import Path

import pytest

from exporter.sources import registry
from exporter.sources.base import Reader, SourceError
from exporter.sources.file import FileNode, FilePosition
from exporter.sources.inittimeline import InitTimelineNode
from exporter.sources.journal import JournalNode
from exporter.sources.kind import COMMON_KEYS
from exporter.sources.registry import KINDS, NodeConfig
from exporter.sources.ssh import SshNode


def test_each_kind_is_one_record_named_by_its_source() -> None:
    assert sorted(KINDS) == ["file", "init-timeline", "journal", "journal-remote", "ssh"]
    for source, kind in KINDS.items():
        assert kind.source == source
        assert dataclasses.is_dataclass(kind.node)
        assert kind.node.__dataclass_params__.frozen  # type: ignore[attr-defined]
        assert {f.name: f.default for f in dataclasses.fields(kind.node)}["source"] == source
        assert kind.keys >= COMMON_KEYS


def test_the_nodes_whose_journal_is_read_are_the_kinds_with_a_reader() -> None:
    with_reader = {k.node for k in KINDS.values() if k.reader is not None}
    assert with_reader == set(typing.get_args(NodeConfig))
    assert {k.node for k in KINDS.values() if k.reader is None} == {InitTimelineNode}


@pytest.mark.parametrize("source", sorted(s for s, k in KINDS.items() if k.reader is not None))
def test_each_reader_offers_what_the_registry_asks(source: str) -> None:
    """Read from its source, not imported: a reader's vendor library stays unloaded here."""
    reader = KINDS[source].reader
    assert reader is not None
    spec = importlib.util.find_spec(reader)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    defined = {
        f.name: f for f in tree.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    for name in ("follow", "window"):
        wanted = list(inspect.signature(getattr(Reader, name)).parameters)[1:]  # (no self)
        got = [a.arg for a in defined[name].args.args]
        assert got[: len(wanted)] == wanted, f"{reader}.{name}"
    assert isinstance(defined["window"], ast.AsyncFunctionDef)
    assert isinstance(defined["follow"], ast.FunctionDef)


def test_a_kind_this_installation_cannot_read_is_refused_naming_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "AVAILABLE", registry.AVAILABLE - {"journal"})
    node = JournalNode("j", "sm-llm.service")
    said = (
        "node j: source 'journal' is not available here (the journal source needs "
        "systemd-python: pip install 'sm-llm-exporter[journal]')"
    )
    with pytest.raises(SourceError) as follow:
        registry.follow(node, 0, "")
    with pytest.raises(SourceError) as window:
        registry.window(node, 0, 1)
    assert str(follow.value) == str(window.value) == said
    assert registry.resumes(node, "s=1;i=2")  # (a cursor: no reader asked)


def test_every_kind_is_available_whose_package_is_installed() -> None:
    assert {"file", "ssh", "init-timeline"} <= registry.AVAILABLE <= registry.ALL_SOURCES
    needs = KINDS["journal"].needs
    assert needs is not None and needs.package == "systemd"


def test_a_dump_resumes_only_in_its_own_file_within_its_size(tmp_path: Path) -> None:
    dump = tmp_path / "a.log"
    dump.write_bytes(b"line\n" * 4)
    st = dump.stat()
    node = FileNode("a", dump)
    assert registry.resumes(node, "")
    assert registry.resumes(node, str(FilePosition(st.st_dev, st.st_ino, st.st_size)))
    assert not registry.resumes(node, str(FilePosition(st.st_dev, st.st_ino, st.st_size + 1)))
    assert not registry.resumes(node, str(FilePosition(st.st_dev, st.st_ino + 1, 0)))
    assert not registry.resumes(node, "s=0123;i=4")  # (a journal cursor: another kind's)
    assert not registry.resumes(FileNode("b", tmp_path / "not-yet.log"), "1:2:3")


def test_a_journal_or_ssh_cursor_always_resumes() -> None:
    for node in (JournalNode("j", "u.service"), SshNode("s", "h", "u.service")):
        assert registry.resumes(node, "s=0123;i=4")
        assert registry.resumes(node, "1:2:3")


def test_file_positions_read_back() -> None:
    assert FilePosition.parse("1:2:3") == FilePosition(1, 2, 3)
    assert str(FilePosition(1, 2, 3)) == "1:2:3"
    assert FilePosition.parse("1:2:-3") is None
    assert FilePosition.parse("1:2") is None
    assert FilePosition.parse("s=1;i=2") is None


def test_each_kind_describes_its_node_in_one_line() -> None:
    nodes: list[registry.AnyNode] = [
        FileNode("f", Path("/srv/f.log")),
        JournalNode("j", "a.service"),
        JournalNode("d", "a.service", directory=Path("/var/log/journal/x")),
        JournalNode("fs", "a.service", files=(Path("/a.journal"), Path("/b.journal"))),
        SshNode("s", "h.example", "a.service", port=2222, user="u"),
        InitTimelineNode("t", Path("/run/omni"), Path("/run/omni.json"), 2.5),
    ]
    assert [registry.describe(n) for n in nodes] == [
        "node f: file /srv/f.log",
        "node j: journal the local journal, unit a.service",
        "node d: journal /var/log/journal/x, unit a.service",
        "node fs: journal /a.journal, /b.journal, unit a.service",
        "node s: ssh u@h.example:2222, unit a.service",
        "node t: init-timeline /run/omni, dump /run/omni.json (every 2.5 s)",
    ]


def test_each_kind_names_the_paths_check_config_checks(tmp_path: Path) -> None:
    def named(node: registry.AnyNode) -> list[tuple[str, str, bool, bool, bool, bool]]:
        return [
            (n.key, n.shown, n.directory, n.regular, n.secret, n.waited)
            for n in registry.paths(node, "nodes[1]")
        ]

    assert named(FileNode("f", Path("/f.log"))) == [
        ("nodes[1].path", "/f.log", False, False, False, True)
    ]
    journal = JournalNode("j", "u", files=(Path("/a.journal"),))
    assert named(journal) == [("nodes[1].files[0]", "/a.journal", False, True, False, False)]
    directory = JournalNode("j", "u", directory=Path("/d"))
    assert named(directory) == [("nodes[1].directory", "/d", True, False, False, False)]
    ssh = SshNode(
        "s",
        "h",
        "u",
        known_hosts=Path("/k"),
        client_keys=(Path("/id"),),
        password_file=Path("/pw"),
        passphrase_file=Path("/pp"),
    )
    secret = "the path given"
    assert named(ssh) == [
        ("nodes[1].known_hosts", "/k", False, True, False, False),
        ("nodes[1].client_keys[0]", secret, False, True, True, False),
        ("nodes[1].password_file", secret, False, True, True, False),
        ("nodes[1].passphrase_file", secret, False, True, True, False),
    ]
    assert named(dataclasses.replace(ssh, verify_host_key=False))[0][0] == (
        "nodes[1].client_keys[0]"
    )
    run = tmp_path / "run"
    run.mkdir()
    assert named(InitTimelineNode("t", run, Path("/d.json"))) == [
        ("nodes[1].path", str(run), True, False, False, True),
        ("nodes[1].dump", "/d.json", False, True, False, True),
    ]
    assert named(InitTimelineNode("t", tmp_path / "t.json"))[0][2] is False


def test_read_windows_says_which_nodes_could_not_be_read_and_reads_the_others(
    tmp_path: Path,
) -> None:
    dump = tmp_path / "a.log"
    dump.write_bytes(b"")
    nodes: list[NodeConfig] = [FileNode("a", dump), FileNode("b", tmp_path / "missing.log")]
    got: list[str] = []
    failed = asyncio.run(registry.read_windows(nodes, 0, 1, lambda b: got.append(b.node)))
    assert got == ["a"]
    assert list(failed) == ["b"]
    assert failed["b"].startswith(f"node b: cannot read {tmp_path / 'missing.log'}: ")
    assert os.strerror(2) in failed["b"]
