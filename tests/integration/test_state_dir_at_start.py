"""Start-up refuses what cannot work: a state directory that cannot hold checkpoints is one
line and exit 1, not a daemon that serves counters it can never keep.

The daemon runs as its own process, as the service runs it. A read-only file system is a real
read-only tmpfs mount; the non-root case runs the daemon as a throwaway system user with the
default state directory (/var/lib/sm-llm-exporter, which only root may create)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.nobody import as_nobody
from support.tools import REPO, free_port, missing

EXPORTER = REPO / ".venv" / "bin" / "sm-llm-exporter"


def write_config(directory: Path, state_dir: Path | None) -> Path:
    dump = directory / "a.log"
    dump.write_text("")
    lines = [f'listen: "127.0.0.1:{free_port()}"']
    if state_dir is not None:
        lines.append(f"state_dir: {state_dir}")
    lines += ["nodes:", f"  - {{name: a, source: file, path: {dump}}}"]
    path = directory / "config.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


@contextlib.contextmanager
def read_only_mount(path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        missing("root and mount(8) (for a read-only file system)")
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


def refused(proc: subprocess.CompletedProcess[str], directory: str, why: str) -> None:
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert proc.returncode == 1, proc.stderr
    assert len(errors) == 1, proc.stderr
    assert directory in errors[0] and why in errors[0], errors
    assert "Traceback" not in proc.stderr


def test_a_read_only_state_dir_is_refused_at_start(tmp_path: Path) -> None:
    with read_only_mount(tmp_path / "ro") as state:
        proc = run([str(EXPORTER), "run", "--config", str(write_config(tmp_path, state))])
    refused(proc, str(state), "Read-only file system")


def test_a_state_dir_the_lock_survives_in_but_no_checkpoint_is_refused(tmp_path: Path) -> None:
    """The lock file there already (it opens read-only): the write probe still says no."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "lock").write_text("")
    with read_only_mount(tmp_path / "ro") as ro:
        subprocess.run(["mount", "--bind", "-o", "ro", str(state), str(ro)], check=False)
        try:
            proc = run([str(EXPORTER), "run", "--config", str(write_config(tmp_path, ro))])
        finally:
            subprocess.run(["umount", str(ro)], check=False)
    refused(proc, str(ro), "cannot hold checkpoints")


def test_the_default_state_dir_is_refused_for_a_user_that_cannot_create_it() -> None:
    if Path("/var/lib/sm-llm-exporter").exists():
        pytest.fail("/var/lib/sm-llm-exporter exists on this machine: the test needs it absent")
    directory = Path(tempfile.mkdtemp(prefix="smllm-startup-"))
    try:
        directory.chmod(0o755)
        config = write_config(directory, None)
        config.chmod(0o644)
        (directory / "a.log").chmod(0o644)
        code, err = as_nobody(["run", "--config", str(config)])
    finally:
        shutil.rmtree(directory)
    refused(
        subprocess.CompletedProcess([], code, "", err),
        "/var/lib/sm-llm-exporter",
        "Permission denied",
    )
