"""CLI paper cuts: the demo on a taken port (one line, not a traceback), a config written for
the service read by `report` from a shell as check-config reads it (its credentials from where
the unit takes them), and the line about `$CREDENTIALS_DIRECTORY` only when a path names it."""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.base.times import SECOND, iso
from exporter.commands import preflight
from exporter.commands.demo import TEMP_PREFIX

from support.cli import Cli
from support.journals import JOURNAL_REMOTE, T0, workload, write_journal
from support.outputs import cli
from support.sshd import Sshd, running_sshd
from support.tools import missing, yaml_text

MINUTE = 60 * SECOND
SAID = "$CREDENTIALS_DIRECTORY is not set"


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port of 127.0.0.1 another process's socket listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.slow
def test_the_demo_and_run_on_a_taken_port_say_so_in_one_line(
    tmp_path: Path, taken_port: int
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    ran = cli("demo", "--listen", f"127.0.0.1:{taken_port}", env={"TMPDIR": str(temp)})
    errors = ran.lines("ERROR")
    assert ran.code == 1 and len(errors) == 1, ran.err
    assert "address already in use" in errors[0] and str(taken_port) in errors[0]
    assert "Traceback" not in ran.err
    assert not [p for p in temp.iterdir() if p.name.startswith(TEMP_PREFIX)]  # (removed)
    config = tmp_path / "config.yaml"
    dump = tmp_path / "node0.log"
    dump.write_text("")
    config.write_text(
        json.dumps(
            {
                "listen": f"127.0.0.1:{taken_port}",
                "state_dir": str(tmp_path / "state"),
                "nodes": [{"name": "node0", "source": "file", "path": str(dump)}],
            }
        )
    )
    ran = cli("run", "--config", str(config))
    errors = ran.lines("ERROR")
    assert ran.code == 1 and len(errors) == 1 and "Traceback" not in ran.err, ran.err
    assert "address already in use" in errors[0]


@pytest.mark.slow
def test_the_demo_checks_its_listen_address(tmp_path: Path) -> None:
    ran = cli("demo", "--listen", "nonsense", env={"TMPDIR": str(tmp_path)})
    assert ran.code == 2 and "Traceback" not in ran.err, ran.err
    assert "--listen: expected HOST:PORT" in ran.err
    assert list(tmp_path.iterdir()) == []


def service_config(path: Path, server: Sshd, journals: Path) -> Path:
    """A config as deploy/README.md writes one: the SSH node's known_hosts and key as the
    service's credentials."""
    path.write_text(
        yaml_text(
            "# the unit hands /etc/sm-llm-exporter/ssh/FILE over as ssh_FILE",
            "nodes:",
            "  - name: a",
            "    source: ssh",
            "    host: 127.0.0.1",
            f"    port: {server.port}",
            f"    journal_directory: {journals}",  # (the unit: sm-llm.service, the default)
            "    known_hosts: ${CREDENTIALS_DIRECTORY}/ssh_known_hosts",
            '    client_keys: ["${CREDENTIALS_DIRECTORY}/ssh_id_ed25519"]',
        ),
        encoding="utf-8",
    )
    return path


@pytest.mark.slow
def test_report_and_backfill_read_a_service_config_from_a_shell(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real sshd in front of a real journal; the credentials' sources are a directory of the
    test's (the unit's, /etc/sm-llm-exporter/ssh, is the machine's: not a test's to fill)."""
    if not os.access(JOURNAL_REMOTE, os.X_OK) or shutil.which("journalctl") is None:
        missing(f"{JOURNAL_REMOTE} (Debian systemd-journal-remote) or journalctl")
    if preflight.SERVICE_CREDENTIALS.exists():
        missing(f"a machine without the service: {preflight.SERVICE_CREDENTIALS} is here")
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)  # (only the key the config names)
    journals = tmp_path / "journals"
    journals.mkdir()
    write_journal(journals / "remote.journal", workload(12, T0, T0 + 10 * MINUTE))
    sources = tmp_path / "ssh"
    sources.mkdir(mode=0o700)
    monkeypatch.setattr(preflight, "CREDENTIAL_DIRECTORIES", (("ssh_", sources),))
    with running_sshd(tmp_path / "sshd") as server:
        server.known_hosts(sources / "known_hosts")
        shutil.copy(server.client_key, sources / "id_ed25519")
        config = service_config(tmp_path / "config.yaml", server, journals)
        window = ["--config", str(config), "--since", iso(T0), "--until", iso(T0 + 11 * MINUTE)]

        code, out, err = cli("report", *window, "--format", "json")
        assert code == 0, err
        assert json.loads(out)["nodes"]["a"]["requests"] > 5
        said = [line for line in err.splitlines() if SAID in line]
        assert len(said) == 1 and str(sources) in said[0], err

        code, out, err = cli("report", *window, "--startups", "--format", "json")
        assert code == 0, err
        assert "startups" in json.loads(out)

        backfill = tmp_path / "a.om"
        code, _, err = cli("report", *window, "--format", "openmetrics", "--output", str(backfill))
        assert code == 0, err
        assert 'smllm_requests_total{kind="extraction",node="a"}' in backfill.read_text()


SSH_NODE = (
    "nodes:",
    "  - name: a",
    "    source: ssh",
    "    host: 127.0.0.1",
)


def test_the_credentials_line_comes_only_when_a_path_names_the_variable(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check-config reads an unset `$CREDENTIALS_DIRECTORY` as the service's, and says so: only
    when some path of the config names it (not for the default known_hosts, not for a
    comment)."""
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    quiet = tmp_path / "quiet.yaml"
    quiet.write_text(yaml_text("# keys: ${CREDENTIALS_DIRECTORY}/ssh_FILE", *SSH_NODE))
    named = tmp_path / "named.yaml"
    named.write_text(
        yaml_text(*SSH_NODE, "    known_hosts: ${CREDENTIALS_DIRECTORY}/ssh_known_hosts")
    )
    _, _, err = cli("check-config", str(quiet))
    assert SAID not in err
    _, _, err = cli("check-config", str(named))
    assert err.count(SAID) == 1, err
