"""exporter.checkpoint.store: the state file, written atomically (0600, in a 0700 directory),
read back whole, refused with its path when it cannot be used, and set aside."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from exporter.checkpoint.codec import encode
from exporter.checkpoint.layout import VERSION
from exporter.checkpoint.store import NAME, Checkpoint, CheckpointError

from support.checkpoints import mode_of, names_in, states


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_write_makes_a_0600_file_in_a_0700_directory(tmp_path: Path, umask: int) -> None:
    state_dir = tmp_path / "var" / "lib" / "sm-llm-exporter"
    cp = Checkpoint(state_dir)
    old = os.umask(umask)
    try:
        cp.write(encode({"x": 1}))
    finally:
        os.umask(old)
    assert mode_of(state_dir) == 0o700
    assert mode_of(cp.path) == 0o600
    assert names_in(state_dir) == [NAME]


def test_write_over_a_readable_file_leaves_it_0600(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.write_text("{}")
    cp.path.chmod(0o644)
    cp.write(encode({"x": 1}))
    assert mode_of(cp.path) == 0o600
    assert cp.load() == {"format": VERSION, "x": 1}


def test_write_fsyncs_the_file_renames_it_then_fsyncs_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real calls, watched: a crash at any point leaves the old file or the new one."""
    calls: list[tuple[str, ...]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace_(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls.append(("replace", str(src), str(dst)))
        real_replace(src, dst)

    cp = Checkpoint(tmp_path)
    cp.write(encode({"x": 1}))
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace_)
    cp.write(encode({"x": 2}))
    monkeypatch.undo()
    assert [c[0] for c in calls] == ["fsync", "replace", "fsync"], calls
    tmp = calls[0][1]
    assert Path(tmp).parent == tmp_path and Path(tmp).name != NAME
    assert calls[1] == ("replace", tmp, str(cp.path))
    assert calls[2] == ("fsync", str(tmp_path))
    assert cp.load() == {"format": VERSION, "x": 2}


@settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None, max_examples=40
)
@given(first=states, second=states)
def test_write_then_load_round_trips(
    tmp_path: Path, first: dict[str, Any], second: dict[str, Any]
) -> None:
    cp = Checkpoint(tmp_path / "state")
    cp.write(encode(first))
    assert cp.load() == {"format": VERSION, **first}
    cp.write(encode(second))  # replaces the first, whole
    assert cp.load() == {"format": VERSION, **second}
    assert names_in(cp.path.parent) == [NAME]


def test_a_failed_replace_leaves_no_temp_file_and_the_old_checkpoint(tmp_path: Path) -> None:
    """The rename fails (the checkpoint's name is taken by a non-empty directory)."""
    cp = Checkpoint(tmp_path)
    cp.path.mkdir()
    (cp.path / "keep").write_text("x")
    with pytest.raises(OSError):
        cp.write(encode({"x": 2}))
    assert names_in(tmp_path) == [NAME]
    assert names_in(cp.path) == ["keep"]


def test_load_without_a_checkpoint_is_none(tmp_path: Path) -> None:
    assert Checkpoint(tmp_path / "nowhere").load() is None
    assert Checkpoint(tmp_path).load() is None


UNUSABLE = [
    pytest.param(b"\x00\xff\xfe garbage \x89PNG\r\n", id="garbage bytes"),
    pytest.param(b"not json at all", id="not JSON"),
    pytest.param(b'{"format": 1, "accounting": {"origin_us": 17', id="truncated JSON"),
    pytest.param(b"", id="empty file"),
    pytest.param(b"[1, 2, 3]", id="a JSON list"),
    pytest.param(b"null", id="JSON null"),
    pytest.param(b'"format"', id="a JSON string"),
    pytest.param(b'{"format": 1} trailing', id="trailing junk"),
]


@pytest.mark.parametrize("content", UNUSABLE)
def test_an_unusable_file_is_refused_with_its_path(tmp_path: Path, content: bytes) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.write_bytes(content)
    with pytest.raises(CheckpointError) as e:
        cp.load()
    assert str(cp.path) in str(e.value)


def test_an_unreadable_checkpoint_is_refused(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.mkdir()
    with pytest.raises(CheckpointError, match="cannot read") as e:
        cp.load()
    assert str(cp.path) in str(e.value)


def test_a_deeply_nested_file_is_refused(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.write_bytes(b"[" * 100_000)
    with pytest.raises(CheckpointError):
        cp.load()


def test_set_aside_moves_the_file_away(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path, clock=lambda: 1_790_000_123.9)
    assert cp.set_aside() is None  # nothing to move
    cp.path.write_bytes(b"garbage")
    aside = cp.set_aside()
    assert aside == tmp_path / f"{NAME}.unusable-1790000123900000"
    assert aside.read_bytes() == b"garbage"
    assert not cp.path.exists()
    assert cp.load() is None
