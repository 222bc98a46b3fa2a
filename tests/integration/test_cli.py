"""The command line as a process: `run --listen` serves where it says; `known-hosts` with no SSH
node, or one that cannot be reached."""

from __future__ import annotations

import logging
import signal
import subprocess
from pathlib import Path

import pytest

from exporter import cli

from support.scrape import answer
from support.tools import REPO, free_port, wait_for, yaml_text

EXPORTER = REPO / ".venv" / "bin" / "sm-llm-exporter"


def config_file(tmp_path: Path, *extra: str) -> Path:
    dump = tmp_path / "a.log"
    dump.write_text("")
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml_text(
            f'listen: "127.0.0.1:{free_port()}"',
            f"state_dir: {tmp_path}/state",
            *extra,
            "nodes:",
            f"  - {{name: a, source: file, path: {dump}}}",
        )
    )
    return path


def test_run_listen_serves_where_it_says_not_where_the_config_does(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            str(EXPORTER),
            "run",
            "--config",
            str(config_file(tmp_path)),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        status = wait_for(lambda: answer(f"http://127.0.0.1:{port}/-/ready"), 20, "ready")
        assert status[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert f"listening on http://127.0.0.1:{port}/metrics" in err


def test_known_hosts_with_no_ssh_node_says_there_is_nothing_to_do(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path)
    with caplog.at_level(logging.INFO):
        assert cli.main(["known-hosts", "--config", str(path)]) == 0
    assert f"{path} has no ssh nodes: no host keys to fetch" in caplog.text
    assert capsys.readouterr().out == ""


def test_known_hosts_with_an_unreachable_node_names_it_and_ends_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()  # (nothing listens there)
    path = config_file(tmp_path)
    path.write_text(
        path.read_text().replace(
            "nodes:\n", f"nodes:\n  - {{name: s, source: ssh, host: 127.0.0.1, port: {port}}}\n"
        )
    )
    with caplog.at_level(logging.INFO):
        assert cli.main(["known-hosts", "--config", str(path)]) == 1
    assert f"node s: 127.0.0.1:{port}: cannot fetch its host key" in caplog.text
    assert "Traceback" not in caplog.text + capsys.readouterr().err
