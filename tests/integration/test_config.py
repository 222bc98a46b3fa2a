"""A config through the command as a process: `run` on a taken port says so and exits 1;
`check-config` exits 0 on a good config and 1 on a bad one, its problems on stderr."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from support.configs import FILE_NODE, ROOT
from support.tools import yaml_text as y


def test_run_on_a_taken_port_says_so_and_exits_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = tmp_path / "c.yaml"
        path.write_text(
            y(f'listen: "127.0.0.1:{port}"', f"state_dir: {tmp_path / 'state'}", *FILE_NODE),
            encoding="utf-8",
        )
        r = subprocess.run(
            [sys.executable, "-m", "exporter", "run", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            cwd=ROOT,
        )
    assert r.returncode == 1, r.stderr
    assert "ERROR exporter.commands.run: cannot run: " in r.stderr
    assert "address already in use" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("content", "code", "stdout", "stderr"),
    [
        (y("nodes:", "  - {name: a, source: file, path: /etc/passwd}"), 0, "valid, 1 node(s)", ""),
        (
            y("stall_seconds: -1", *FILE_NODE),
            1,
            "",
            "c.yaml:1: stall_seconds: must be a positive integer, got -1",
        ),
    ],
    ids=["good", "bad"],
)
def test_check_config_command_in_a_process(
    tmp_path: Path, content: str, code: int, stdout: str, stderr: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(content, encoding="utf-8")
    r = subprocess.run(
        [sys.executable, "-m", "exporter", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=ROOT,
    )
    assert r.returncode == code, r.stderr
    assert stdout in r.stdout
    assert stderr in r.stderr
    if code:
        assert r.stdout == ""
