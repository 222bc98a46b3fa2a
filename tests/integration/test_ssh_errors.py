"""SSH errors that say what is wrong: every one names the node, the host and the file or cause.

A real OpenSSH sshd on 127.0.0.1 (tests/support/sshd.py), keys made by ssh-keygen, a throwaway
user whose shell is nologin; the secrets given never appear in an error or a log line."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from exporter import cli
from exporter.sources.base import SourceError
from exporter.sources.ssh import SshNode

from support.dumps import window_batches
from support.ssh_nodes import local_node
from support.sshd import Sshd, public_key, require_ssh_tools, running_sshd, throwaway_user
from support.tools import missing, now_us, yaml_text

PASSPHRASE = "pp-" + "correct horse battery staple"


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    require_ssh_tools()
    if shutil.which("journalctl") is None:
        missing("journalctl")
    d = Path(tempfile.mkdtemp(prefix="smllm-ssh-errors-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def server(base: Path) -> Iterator[Sshd]:
    with running_sshd(base / "sshd") as s:
        yield s


@pytest.fixture(scope="module")
def encrypted_key(server: Sshd, base: Path) -> Path:
    """An ed25519 key with a passphrase, in the server's authorized_keys."""
    key = base / "encrypted_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", PASSPHRASE, "-C", "enc", "-f", str(key)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    with (server.directory / "authorized_keys").open("a") as f:
        f.write(public_key(key) + "\n")
    return key


@pytest.fixture
def node(server: Sshd, base: Path) -> SshNode:
    journals = base / "journals"
    journals.mkdir(exist_ok=True)
    kh = server.known_hosts(base / "known_hosts")
    return local_node("a", server.port, kh, server.client_key, str(journals))


@pytest.fixture(autouse=True)
def no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


def who(node: SshNode) -> str:
    """How each of the node's errors begins: the node and the host."""
    return f"node {node.name}: ssh {node.user}@{node.host}:{node.port}"


def error_of(node: SshNode) -> str:
    since = now_us() - 60_000_000
    with pytest.raises(SourceError) as e:
        window_batches(node, since, now_us())
    return str(e.value)


def test_the_node_reads_with_the_right_key(node: SshNode) -> None:
    batches = window_batches(node, now_us() - 60_000_000, now_us())
    assert batches and batches[-1].caught_up


def test_a_client_key_that_is_missing_or_no_key_is_named(node: SshNode, base: Path) -> None:
    missing_key = base / "no-such-key"
    assert error_of(replace(node, client_keys=(missing_key,))) == (
        f"{who(node)}: client key {missing_key}: No such file or directory"
    )
    not_a_key = base / "not-a-key"
    not_a_key.write_text("hello\n")
    error = error_of(replace(node, client_keys=(not_a_key,)))
    assert error.startswith(f"{who(node)}: client key {not_a_key} is not a private key")


def test_an_encrypted_key_needs_its_passphrase_from_a_file_or_the_environment(
    node: SshNode, encrypted_key: Path, base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    enc = replace(node, client_keys=(encrypted_key,))
    assert error_of(enc) == (
        f"{who(node)}: client key {encrypted_key} is encrypted: give its passphrase as "
        "passphrase_file or passphrase_env"
    )
    wrong = base / "wrong-passphrase"
    wrong.write_text("not it\n")
    assert error_of(replace(enc, passphrase_file=wrong)) == (
        f"{who(node)}: client key {encrypted_key} is encrypted, and the passphrase given does not "
        "open it"
    )
    right = base / "passphrase"
    right.write_text(PASSPHRASE + "\n")
    batches = window_batches(replace(enc, passphrase_file=right), now_us() - 1, now_us())
    assert batches and batches[-1].caught_up  # (it logged in and read the journal to its end)
    assert error_of(replace(enc, passphrase_env="SMLLM_NO_SUCH_VARIABLE")) == (
        f"{who(node)}: its passphrase_env variable is not set"  # (its name may be the secret)
    )
    assert PASSPHRASE not in caplog.text


def test_a_known_hosts_file_that_cannot_be_read_is_named(node: SshNode, base: Path) -> None:
    gone = base / "no-known-hosts"
    assert error_of(replace(node, known_hosts=gone)) == (
        f"{who(node)}: known_hosts {gone}: No such file or directory; `sm-llm-exporter known-hosts "
        "a` prints the lines to put there"
    )


def test_a_nologin_account_says_so(node: SshNode, server: Sshd, base: Path) -> None:
    nologin = shutil.which("nologin") or "/usr/sbin/nologin"
    with throwaway_user() as user:
        subprocess.run(["usermod", "-s", nologin, user.name], check=True, capture_output=True)
        password = base / "password"
        password.write_text(user.password + "\n")
        error = error_of(replace(node, user=user.name, client_keys=(), password_file=password))
    assert error.startswith(f"node a: ssh {user.name}@127.0.0.1:{server.port}: the remote ")
    assert "This account is currently not available." in error
    assert "chdir" not in error and user.password not in error


def test_report_with_an_unusable_key_names_it_and_ends_without_a_traceback(
    node: SshNode,
    encrypted_key: Path,
    base: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = base / "report.yaml"
    config.write_text(
        yaml_text(
            "nodes:",
            "  - name: a",
            "    source: ssh",
            "    host: 127.0.0.1",
            f"    port: {node.port}",
            f"    known_hosts: {node.known_hosts}",
            f"    client_keys: [{encrypted_key}]",
            f"    journal_directory: {node.journal_directory}",
        )
    )
    with caplog.at_level(logging.INFO):
        code = cli.main(["report", "--since", "-1h", "--until", "now", "--config", str(config)])
    assert code == 1
    assert f"{who(node)}: client key {encrypted_key} is encrypted" in caplog.text
    assert "Traceback" not in caplog.text + capsys.readouterr().err


def test_a_known_hosts_that_is_a_fifo_is_refused_not_waited_on(node: SshNode, base: Path) -> None:
    fifo = base / "known_hosts.fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    assert error_of(replace(node, known_hosts=fifo)) == (
        f"{who(node)}: known_hosts {fifo}: not a regular file (a FIFO); `sm-llm-exporter known-hosts "
        "a` prints the lines to put there"
    )
