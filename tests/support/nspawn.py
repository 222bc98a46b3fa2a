"""systemd booted as PID 1 in a `systemd-nspawn` container built from this machine's own /usr,
with the exporter installed as deploy/README.md says: for the tests of the service under a real
systemd.

The root is a folder of the test's: /usr bound read-only from the host (so no download: the
container runs this machine's systemd, journald, Python and OpenSSH), a copy of the host's /etc
with every unit the host enabled left out (nothing listens but what a test starts), the usual
empty directories. The container shares the host's network namespace (127.0.0.1 is the
host's: an sshd the test runs there is reachable from the service). Commands run inside through
`nsenter` into the container's PID 1 (no machined or D-Bus on the host).

The install is deploy/README.md's steps, with two stand-ins: the venv at /opt/sm-llm-exporter is
made with the container's `python3 -m venv` and filled by `pip install --no-index` from wheels
built on the host beforehand (the same package and dependencies, without a network install in
every test session), and the source tree is bound read-only at /src. The man pages go where the
install puts them, /usr/local/share/man: a tmpfs of the container's over the read-only /usr.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from support.tools import REPO, missing

NSPAWN = Path("/usr/bin/systemd-nspawn")
NSENTER = Path("/usr/bin/nsenter")
BOOT_S = 60.0  # systemd up in the container (it takes about a second here)
STOP_S = 20.0  # an orderly shutdown, then it is killed
COMMAND_S = 120.0  # one command inside, at most
SOURCE = Path("/src")  # the source tree, inside
VENV = Path("/opt/sm-llm-exporter")
MAN_DIR = Path("/usr/local/share/man")  # (the install's man pages: a tmpfs over the host's)


def usable() -> None:
    """systemd-nspawn and root, or a failure in CI and a skip elsewhere."""
    if os.geteuid() != 0:
        missing("root (systemd-nspawn boots a container)")
    if not NSPAWN.exists():
        missing(f"{NSPAWN} (Debian's systemd-container)")
    if not NSENTER.exists():
        missing(f"{NSENTER} (util-linux)")


def wheels(into: Path) -> Path:
    """The exporter's wheel with its dependencies' (the `journal` extra too), built on the host
    with the project's own pip into `into`: what the container's venv installs from. Built from
    a copy of the checkout's files (tracked or not ignored), so no build/ left in the tree by an
    earlier build ever reaches the wheel."""
    into.mkdir(parents=True, exist_ok=True)
    src = into.parent / "src"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(into), f"{src}[journal]"],
        check=True,
        timeout=600,
        capture_output=True,
    )
    return into


def make_root(root: Path) -> None:
    """The container's root: /usr bound later, /etc copied without the host's enabled units."""
    for d in ("usr", "var/lib", "var/log/journal", "tmp", "root", "proc", "sys", "dev", "run"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for d in ("opt", "home", "src"):
        (root / d).mkdir(exist_ok=True)
    for d in ("bin", "lib", "lib64", "sbin"):
        (root / d).symlink_to(f"usr/{d}")
    shutil.copytree("/etc", root / "etc", symlinks=True, ignore_dangling_symlinks=True)
    # (a machine ID of its own: no first boot, which would enable every unit by preset)
    (root / "etc/machine-id").write_text(uuid.uuid4().hex + "\n")
    (root / "etc/os-release").unlink(missing_ok=True)
    shutil.copy2("/usr/lib/os-release", root / "etc/os-release")
    system = root / "etc/systemd/system"
    for wants in list(system.glob("*.wants")) + list(system.glob("*.requires")):
        shutil.rmtree(wants)  # (what the host enabled: sshd, prometheus, ...)
    for unit in system.glob("*.service"):
        if unit.is_symlink() or unit.is_file():
            unit.unlink()  # (aliases such as sshd.service)
    (root / "etc/sm-llm-exporter").mkdir(exist_ok=True)  # (the install makes it anew)
    shutil.rmtree(root / "etc/sm-llm-exporter")


class Container:
    """A booted container (see the module docstring); `run` a command in it."""

    def __init__(self, root: Path, name: str, binds: Sequence[str] = ()) -> None:
        self.root, self.name, self.binds = root, name, list(binds)
        self.proc: subprocess.Popen[bytes] | None = None
        self.leader = 0  # the container's PID 1, as the host sees it
        self.console = root.parent / f"{name}.console.log"

    def boot(self) -> None:
        make_root(self.root)
        argv = [
            str(NSPAWN),
            "-D",
            str(self.root),
            f"--machine={self.name}",
            "--register=no",
            "--keep-unit",
            "--bind-ro=/usr",
            f"--tmpfs={MAN_DIR}:mode=0755",
            f"--bind-ro={REPO}:{SOURCE}",
            *self.binds,
            "--console=read-only",
            "-b",
        ]
        with self.console.open("wb") as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + BOOT_S
        said = ""
        while not self.leader:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the container did not start: {self.log()}")
            self.leader = self._leader()
            time.sleep(0.05)
        while True:  # (its bus answers a moment after it started)
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise AssertionError(f"systemd in the container: {said!r}; {self.log()}")
            state = self.run("systemctl", "is-system-running", "--wait", check=False, timeout=left)
            said = state.stdout.strip() + state.stderr.strip()
            if state.stdout.strip() in ("running", "degraded"):
                return
            time.sleep(0.1)

    def _leader(self) -> int:
        """The container's PID 1: the nspawn process's child running systemd."""
        assert self.proc is not None
        for task in Path(f"/proc/{self.proc.pid}/task").glob("*"):
            with contextlib.suppress(OSError):
                for child in (task / "children").read_text().split():
                    comm = Path(f"/proc/{child}/comm").read_text().strip()
                    if comm == "systemd":
                        return int(child)
        return 0

    def run(
        self,
        *argv: str,
        check: bool = True,
        timeout: float = COMMAND_S,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`argv` inside the container (as root, in all its namespaces), its output as text."""
        r = subprocess.run(
            [str(NSENTER), "-t", str(self.leader), "-a", "--", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            input=input,
        )
        if check and r.returncode != 0:
            raise AssertionError(
                f"{shlex.join(argv)} exited {r.returncode}: {r.stdout[-2000:]} {r.stderr[-2000:]}"
            )
        return r

    def sh(self, script: str, *, check: bool = True, timeout: float = COMMAND_S) -> str:
        """A shell script inside the container; its standard output."""
        return self.run("/bin/sh", "-ec", script, check=check, timeout=timeout).stdout

    def path(self, inside: str) -> Path:
        """Where a path of the container's is on the host (its root's files)."""
        return self.root / inside.lstrip("/")

    def log(self) -> str:
        return self.console.read_text(errors="replace")[-3000:] if self.console.exists() else ""

    def close(self) -> None:
        """An orderly shutdown (nspawn turns SIGTERM into one), killed after STOP_S."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


def install(c: Container, wheelhouse: str) -> None:
    """The exporter installed as deploy/README.md's Install says (see the module docstring for
    the venv's stand-in): the unit, the man pages, the config directory with ssh/ and tls/."""
    c.sh(
        f"""
        python3 -m venv {VENV}
        {VENV}/bin/pip install -q --no-index --find-links {wheelhouse} 'sm-llm-exporter[journal]'
        cd {SOURCE}
        install -m 0644 deploy/sm-llm-exporter.service /etc/systemd/system/
        install -m 0644 -D man/sm-llm-exporter.1 {MAN_DIR}/man1/sm-llm-exporter.1
        install -m 0644 -D man/sm-llm-exporter.yaml.5 {MAN_DIR}/man5/sm-llm-exporter.yaml.5
        install -d -m 0755 /etc/sm-llm-exporter /etc/sm-llm-exporter/ssh /etc/sm-llm-exporter/tls
        systemctl daemon-reload
        """,
        timeout=300,
    )


@contextlib.contextmanager
def booted(
    tmp: Path, name: str, wheelhouse: Path, binds: Sequence[str] = ()
) -> Iterator[Container]:
    """A container booted with the exporter installed; shut down (or killed) at the end."""
    usable()
    c = Container(tmp / "root", name, [f"--bind-ro={wheelhouse}:/wheels", *binds])
    try:
        c.boot()
        install(c, "/wheels")
        yield c
    finally:
        c.close()
