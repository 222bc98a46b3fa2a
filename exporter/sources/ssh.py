"""The `ssh` source kind: `journalctl` on a remote host over SSH, its node's settings and checks.

Its reader is `sources/sshreader.py`, over a connection `sources/sshconnect.py` opens (the
node's credentials and host keys). Secrets are never inline: a password and the client keys'
passphrase come from a file or an environment variable, one of the two.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.config.checker import Checker
from exporter.config.values import (
    as_bool,
    as_env_name,
    as_host,
    as_port,
    as_positive_float,
    as_positive_int,
    as_remote_path,
    as_user,
)
from exporter.sources.kind import COMMON_KEYS, Named, NodeEntry, SourceKind, node_unit

KNOWN_HOSTS = Path("/etc/sm-llm-exporter/ssh/known_hosts")
# the credential the unit hands KNOWN_HOSTS over as (LoadCredential=ssh:...)
KNOWN_HOSTS_CREDENTIAL = "ssh_known_hosts"
SSH_PORT = 22  # (a known_hosts line names a host on another port as `[HOST]:PORT`)
SECRETS = ("password", "passphrase")  # each from `<secret>_file` or `<secret>_env`


@dataclass(frozen=True)
class SshNode:
    name: str
    host: str
    unit: str
    port: int = SSH_PORT
    user: str = "root"
    known_hosts: Path | None = KNOWN_HOSTS
    verify_host_key: bool = True
    client_keys: tuple[Path, ...] = ()
    password_file: Path | None = None
    password_env: str | None = None
    passphrase_file: Path | None = None  # of encrypted client_keys
    passphrase_env: str | None = None
    journal_directory: str | None = None
    keepalive_interval: float = 15.0
    keepalive_count_max: int = 3
    source: str = "ssh"


_PATH = "must be a path"
_ENV_NAME = "must be an environment variable name"


def check(checker: Checker, path: str, entry: NodeEntry) -> SshNode | None:
    """An `ssh` node: `journalctl` on a remote host, over asyncssh."""
    n = entry.keys
    unit = node_unit(checker, path, entry)
    host = checker.get(n, "host", path, as_host, None, "must be a host name or an IP address")
    if host is None and n.get("host") is None:
        checker.problem(path, "an ssh node needs a host")
    d = SshNode(entry.name, host or "", unit)
    secrets = _secrets(checker, path, n)
    node = SshNode(
        name=entry.name,
        host=host or "",
        unit=unit,
        port=checker.get(n, "port", path, as_port, d.port, "must be a port 1..65535"),
        user=checker.get(
            n,
            "user",
            path,
            as_user,
            d.user,
            "must be a user name (letters, digits, _ . -; not starting with - or .)",
        ),
        known_hosts=checker.get(
            n, "known_hosts", path, checker.path, default_known_hosts(checker.env), _PATH
        ),
        verify_host_key=checker.get(
            n, "verify_host_key", path, as_bool, d.verify_host_key, "must be true or false"
        ),
        client_keys=checker.get(
            n, "client_keys", path, checker.paths, d.client_keys, "must be a list of paths"
        ),
        **secrets,
        journal_directory=checker.get(
            n, "journal_directory", path, as_remote_path, None, "must be a path on the node"
        ),
        keepalive_interval=checker.get(
            n,
            "keepalive_interval",
            path,
            as_positive_float,
            d.keepalive_interval,
            "must be positive seconds",
        ),
        keepalive_count_max=checker.get(
            n,
            "keepalive_count_max",
            path,
            as_positive_int,
            d.keepalive_count_max,
            "must be a positive integer",
        ),
    )
    return node if host is not None else None


def _secrets(checker: Checker, path: str, n: dict[str, Any]) -> dict[str, Any]:
    """Where an ssh node's password and its keys' passphrase come from: a file or a variable,
    one of the two."""
    out: dict[str, Any] = {}
    for secret in SECRETS:
        file = checker.get(n, f"{secret}_file", path, checker.path, None, _PATH)
        env = checker.get(n, f"{secret}_env", path, as_env_name, None, _ENV_NAME)
        if file is not None and env is not None:
            checker.problem(path, f"give {secret}_file or {secret}_env, not both")
        out[f"{secret}_file"], out[f"{secret}_env"] = file, env
    return out


def default_known_hosts(env: Mapping[str, str]) -> Path:
    """The service's (the unit hands KNOWN_HOSTS over as the credential ssh_known_hosts), else
    that file."""
    if "CREDENTIALS_DIRECTORY" in env:
        return Path(env["CREDENTIALS_DIRECTORY"]) / KNOWN_HOSTS_CREDENTIAL
    return KNOWN_HOSTS


def paths(node: SshNode, at: str) -> Iterator[Named]:
    """Its known_hosts (when host keys are verified), and its secrets' files (never shown)."""
    if node.verify_host_key and node.known_hosts is not None:
        yield Named(f"{at}.known_hosts", node.known_hosts)
    for j, key in enumerate(node.client_keys):
        yield Named(f"{at}.client_keys[{j}]", key, secret=True)
    if node.password_file is not None:
        yield Named(f"{at}.password_file", node.password_file, secret=True)
    if node.passphrase_file is not None:
        yield Named(f"{at}.passphrase_file", node.passphrase_file, secret=True)


def describe(node: SshNode) -> str:
    return f"node {node.name}: ssh {node.user}@{node.host}:{node.port}, unit {node.unit}"


KEYS = COMMON_KEYS | {
    "unit",
    "host",
    "port",
    "user",
    "known_hosts",
    "verify_host_key",
    "client_keys",
    "password_file",
    "password_env",
    "passphrase_file",
    "passphrase_env",
    "journal_directory",
    "keepalive_interval",
    "keepalive_count_max",
}
KIND = SourceKind("ssh", SshNode, KEYS, check, paths, describe, reader="exporter.sources.sshreader")
