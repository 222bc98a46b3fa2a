"""A real OpenSSH sshd on 127.0.0.1 for the SSH source's tests (test_ssh.py), and a throwaway login user.

`running_sshd` starts `/usr/sbin/sshd -D -e -f CONFIG` with its own config and ed25519 host key
(StrictModes no, UsePAM no, keys and passwords both accepted, root may log in) on a free port:
sshd cannot report a port the kernel chose, so a clash is retried on another. `throwaway_user`
creates a local user with a password for password logins (`useradd` + `chpasswd`) and deletes it
afterwards; root's own password is never touched.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.tools import free_port, missing

SSHD = "/usr/sbin/sshd"
USER_PREFIX = "smllmtest"


def require_ssh_tools() -> str:
    """sshd and ssh-keygen, or fail in CI / skip elsewhere; the path of ssh-keygen."""
    keygen = shutil.which("ssh-keygen")
    if not os.access(SSHD, os.X_OK) or keygen is None:
        missing(f"{SSHD} or ssh-keygen (Debian openssh-server)")
    assert keygen is not None
    return keygen


def keygen(path: Path, comment: str = "smllm-test") -> Path:
    """A new ed25519 key pair without passphrase at `path` (and `path`.pub)."""
    subprocess.run(
        [require_ssh_tools(), "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return path


def public_key(private: Path) -> str:
    """`ssh-ed25519 AAAA...` of a key pair, without its comment."""
    algorithm, blob = Path(f"{private}.pub").read_text().split()[:2]
    return f"{algorithm} {blob}"


@dataclass(frozen=True)
class Sshd:
    """A running sshd and the keys that go with it."""

    port: int
    directory: Path
    host_key: Path  # private; the public half beside it, .pub
    client_key: Path  # in authorized_keys (for every user)
    log: Path
    pid: int

    @property
    def host_entry(self) -> str:
        return f"[127.0.0.1]:{self.port}"

    def known_hosts(self, path: Path, key: Path | None = None) -> Path:
        """A known_hosts file for this server holding `key`'s public half (default: the
        server's own host key)."""
        path.write_text(f"{self.host_entry} {public_key(key or self.host_key)}\n")
        return path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile {directory}/sshd.pid
AuthorizedKeysFile {directory}/authorized_keys
PermitRootLogin yes
PasswordAuthentication yes
PubkeyAuthentication yes
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
LogLevel VERBOSE
"""


@contextmanager
def running_sshd(directory: Path, extra: Sequence[str] = ()) -> Iterator[Sshd]:
    """sshd on 127.0.0.1 with its own config in `directory` (`extra` lines appended to it)."""
    require_ssh_tools()
    directory.mkdir(parents=True, exist_ok=True)
    os.makedirs("/run/sshd", exist_ok=True)  # its privilege separation directory
    host_key = keygen(directory / "host_ed25519", "smllm-test-host")
    client_key = keygen(directory / "client_ed25519", "smllm-test-client")
    (directory / "authorized_keys").write_text(public_key(client_key) + "\n")
    config = directory / "sshd_config"
    log = directory / "sshd.log"
    tried = []
    for _ in range(10):
        port = free_port()
        tried.append(port)
        text = CONFIG.format(port=port, host_key=host_key, directory=directory)
        config.write_text(text + "".join(f"{line}\n" for line in extra))
        with log.open("wb") as err:
            proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=err
            )
        try:
            listening = f"Server listening on 127.0.0.1 port {port}."
            deadline = time.monotonic() + 15
            while proc.poll() is None and listening not in log.read_text(errors="replace"):
                if time.monotonic() > deadline:
                    pytest.fail(f"sshd did not listen within 15 s: {log.read_text()}")
                time.sleep(0.02)
            if proc.poll() is None:
                yield Sshd(port, directory, host_key, client_key, log, proc.pid)
                return
            text = log.read_text(errors="replace")
            if "Address already in use" not in text:
                pytest.fail(f"sshd exited with {proc.returncode}: {text}")
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)
    pytest.fail(f"sshd found no free port after trying {tried}")


@dataclass(frozen=True)
class User:
    name: str
    password: str


def _user_exists(name: str) -> bool:
    return subprocess.run(["id", "-u", name], capture_output=True, check=False).returncode == 0


def _stale_users() -> list[str]:
    """Users an earlier run left behind (its process is gone): `smllmtest<pid>`."""
    out = []
    for line in Path("/etc/passwd").read_text().splitlines():
        name = line.split(":", 1)[0]
        pid = name.removeprefix(USER_PREFIX)
        if name.startswith(USER_PREFIX) and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            out.append(name)
    return out


@contextmanager
def throwaway_user() -> Iterator[User]:
    """A local user `smllmtest<pid>` with a random password (and /bin/sh), deleted afterwards.
    Fails in CI and skips elsewhere when users cannot be created (not root, no useradd)."""
    tools = [shutil.which(t) for t in ("useradd", "chpasswd", "userdel")]
    if os.geteuid() != 0 or None in tools:
        missing("root with useradd, chpasswd and userdel (for a throwaway password user)")
    for stale in _stale_users():
        subprocess.run(["userdel", stale], capture_output=True, check=False)
    name = f"{USER_PREFIX}{os.getpid()}"
    if _user_exists(name):
        subprocess.run(["userdel", name], capture_output=True, check=True)
    # ':' and newlines cannot be in it (chpasswd's format); the prefix makes a leak easy to spot
    password = "pw-" + secrets.token_urlsafe(24)
    done = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--home-dir", "/", "--shell", "/bin/sh", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        missing(f"a throwaway user (useradd failed: {done.stderr.strip()})")
    try:
        subprocess.run(
            ["chpasswd"], input=f"{name}:{password}\n", text=True, capture_output=True, check=True
        )
        yield User(name, password)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
    assert not _user_exists(name), f"user {name} was not deleted"
