"""check-config checks what a config names, not only its form: every path there and readable
(the state directory creatable and writable, by a real write), duplicate keys with both lines,
hosts and users nothing can read as more, `${VAR}` only where it expands; and with
`--as-service` the paths as the unit's dynamic user will see them."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.configs import check
from support.nobody import as_nobody
from support.tools import missing, yaml_text


def test_every_bad_value_is_listed_with_its_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml_text(
            'listen: "${NOPE}:10027"',
            "nodes:",
            "  - name: a",
            "    source: ssh",
            '    host: "h; touch /x"',
            '    user: "root -oProxyCommand=touch /x"',
            "  - name: b",
            "    source: ssh",
            "    host: -oProxyCommand=x",
            "    port: 22",
            "    port: 2222",
            "  - {name: c, source: ssh, host: '[::1]', user: smllm}",
            "  - {name: d, source: ssh, host: node-4.example, journal_directory: '${HOME}/j'}",
        )
    )
    code, errors = check(caplog, str(path))
    assert code == 1
    # (with them, in one list: the default known_hosts of nodes c and d, where it is not there)
    assert [e for e in errors[1:] if ".known_hosts: " not in e] == [
        f'{path}:1: listen: must be "HOST:PORT" or ":PORT" with a port 0..65535, '
        "got '${NOPE}:10027'",
        f"{path}:5: nodes[0].host: must be a host name or an IP address, got 'h; touch /x'",
        f"{path}:6: nodes[0].user: must be a user name (letters, digits, _ . -; not starting "
        "with - or .), got 'root -oProxyCommand=touch /x'",
        f"{path}:9: nodes[1].host: must be a host name or an IP address, got '-oProxyCommand=x'",
        f"{path}:11: nodes[1].port: given twice, on lines 10 and 11 (which one?)",
        f"{path}:13: nodes[3].journal_directory: must be a path on the node, got '${{HOME}}/j'",
    ]


def test_a_good_config_and_its_paths_are_valid(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "dump.json").write_text("")
    (tmp_path / "kh").write_text("")
    path = tmp_path / "good.yaml"
    path.write_text(
        yaml_text(
            f"state_dir: {tmp_path}/state/deeper",  # (not there yet: made at start)
            "nodes:",
            f"  - {{name: a, source: file, path: {tmp_path}/dump.json}}",
            f"  - {{name: b, source: ssh, host: 10.0.0.2, known_hosts: {tmp_path}/kh}}",
        )
    )
    assert check(caplog, str(path)) == (0, [])
    assert capsys.readouterr().out.startswith(f"{path}: valid, 2 node(s)")
    assert not (tmp_path / "state").exists()  # (the probe leaves nothing behind)
    code, errors = check(caplog, str(path), "--config", str(path))
    assert code == 2 and errors == ["give the config once: as FILE or as --config"]


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory anyone may pass through (pytest's own temporary directories are 0700), where
    the unit's sandbox shows it (not under /tmp: PrivateTmp=yes)."""
    if os.geteuid() != 0:
        missing("root (for a directory under /var/lib)")
    path = Path(tempfile.mkdtemp(prefix="smllm-check-", dir="/var/lib"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_as_the_service_credentials_come_from_their_sources_and_files_must_be_readable(
    open_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tmp_path = open_dir
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "dump.json").write_text("")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "dump.json").write_text("")
    for p in (tmp_path, shared, shared / "dump.json"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    path = tmp_path / "svc.yaml"
    path.write_text(
        yaml_text(
            "nodes:",
            f"  - {{name: a, source: file, path: {private}/dump.json}}",
            f"  - {{name: b, source: file, path: {shared}/dump.json}}",
            "  - {name: t, source: file, path: /tmp/dump.json}",
            "  - name: c",
            "    source: ssh",
            "    host: c.example",
            "    known_hosts: ${CREDENTIALS_DIRECTORY}/ssh_no-such-known-hosts-here",
            '    client_keys: ["${CREDENTIALS_DIRECTORY}/id_ed25519"]',
        )
    )
    code, errors = check(caplog, "--as-service", str(path))
    creds = "/run/credentials/sm-llm-exporter.service"
    assert code == 1
    assert errors[1:] == [
        f"{path}:2: nodes[0].path: {private} is mode 0700: the service's dynamic user cannot "
        f"read {private}/dump.json",
        f"{path}:4: nodes[2].path: /tmp/dump.json is hidden from the service (the unit's "
        "PrivateTmp=yes)",
        f"{path}:8: nodes[3].known_hosts: {creds}/ssh_no-such-known-hosts-here comes from "
        "/etc/sm-llm-exporter/ssh/no-such-known-hosts-here, which does not exist",
        f"{path}:9: nodes[3].client_keys[0]: the path given is not a credential the unit "
        "hands over (ssh_FILE for a file of /etc/sm-llm-exporter/ssh or tls_FILE for a file of "
        "/etc/sm-llm-exporter/tls) (the path is not shown: it may be a secret)",
    ]
    # the same config checked as this user: the private dump reads (root), the credentials
    # directory does not exist here
    code, errors = check(caplog, str(path))
    assert code == 1 and not any("nodes[0]" in e or "nodes[1]" in e for e in errors)


def test_paths_that_are_relative_not_regular_or_hidden_from_the_checker(
    open_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fifo = open_dir / "kh.fifo"
    os.mkfifo(fifo)
    locked = open_dir / "locked"
    locked.mkdir(mode=0o700)
    path = open_dir / "odd.yaml"
    path.write_text(
        yaml_text(
            "nodes:",
            "  - {name: a, source: file, path: relative/dump.json}",
            f"  - {{name: b, source: ssh, host: b.example, known_hosts: {fifo}}}",
            f"  - {{name: c, source: ssh, host: c.example, known_hosts: {locked}/kh}}",
        )
    )
    path.chmod(0o644)
    code, errors = as_nobody(["check-config", str(path)])
    assert code == 1, errors
    assert f"{path}:2: nodes[0].path: relative/dump.json is relative: give the whole path" in errors
    assert f"{path}:3: nodes[1].known_hosts: {fifo} is not a regular file (a FIFO)" in errors
    assert (
        f"{path}:4: nodes[2].known_hosts: {locked}/kh cannot be checked as this user (Permission denied)"
        in errors
    )
    assert "Traceback" not in errors


def test_merge_keys_are_no_duplicates_and_odd_hosts_and_users_are(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "merge.yaml"
    path.write_text(
        yaml_text(
            "nodes:",
            "  - &a {name: a, source: ssh, host: a.example, known_hosts: /etc/passwd}",
            "  - <<: *a",
            "    name: b",
            "  - {name: c, source: ssh, host: 'fe80::1%$(touch x)', user: 0700}",
            "  - {name: d, source: ssh, host: '10.1'}",
        )
    )
    code, errors = check(caplog, str(path))
    assert code == 1
    assert errors[1:] == [
        f"{path}:5: nodes[2].host: must be a host name or an IP address, got 'fe80::1%$(touch x)'",
        f"{path}:5: nodes[2].user: must be a user name (letters, digits, _ . -; not starting "
        "with - or .), got 448",
        f"{path}:6: nodes[3].host: must be a host name or an IP address, got '10.1'",
    ]


def test_as_the_service_the_config_itself_must_be_readable_where_the_unit_reads_it(
    open_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = yaml_text("nodes:", "  - {name: a, source: file, path: /srv/dumps/a.json}")
    hidden = tmp_path / "config.yaml"  # (under /tmp: PrivateTmp=yes hides it)
    private = open_dir / "config.yaml"
    readable = open_dir / "shared.yaml"
    for path, mode in ((hidden, 0o644), (private, 0o600), (readable, 0o644)):
        path.write_text(text)
        path.chmod(mode)
    code, errors = check(caplog, "--as-service", str(hidden))
    assert code == 1
    assert errors[1:] == [
        f"{hidden}:1: the config itself: {hidden} is hidden from the service (the unit's "
        "PrivateTmp=yes)"
    ]
    code, errors = check(caplog, "--as-service", str(private))
    assert code == 1
    assert errors[1:] == [
        f"{private}:1: the config itself: {private} is mode 0600: the service's dynamic user "
        f"cannot read {private}"
    ]
    assert check(caplog, "--as-service", str(readable)) == (0, [])
    assert check(caplog, str(private)) == (0, [])  # (as this user, root, it reads)
