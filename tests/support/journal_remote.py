"""Journals gathered by journald's own remote protocol on one machine: a real
systemd-journal-remote collector and hosts that upload to it with real systemd-journal-upload,
each host in a network namespace of its own.

`Collector(directory, authority)` runs `systemd-journal-remote --listen-https --split-mode=host
--output=directory` in a new network namespace, with a server certificate from `authority`
(support.certs). `collector.host(name)` adds a host: a network namespace joined to the
collector's by a veth pair, an address of its own (10.77.x.y), a client certificate with
`name` as its CN. `host.upload(file=...)` or `host.upload(directory=...)` sends a journal once
and returns when journal-upload exits; `host.follow(directory)` keeps journal-upload following
a directory until `stop()`. `write_host_journal` writes a source journal whose entries carry a
host's `_HOSTNAME`, `_MACHINE_ID` and `_BOOT_ID`.

What systemd 252 (Debian 12) does, found with these binaries and their source:
- Debian builds systemd without GnuTLS. journal-remote's `--trust` is refused ("Option --trust
  is not available"), and it logs "Certificate checking disabled": it checks no client
  certificate and accepts an upload from any client that reaches it. Its TLS proves the
  server to the uploader, not the uploader to the server.
- So `--split-mode=host` names each output file after the client's address as the collector
  sees it: `remote-<address>.journal` (for example `remote-10.77.0.2.journal`). Neither the
  client certificate nor the entries' `_HOSTNAME` plays a part. A build with GnuTLS and
  `--trust` would name it after the certificate's distinguished name (`remote-CN=...`): so
  says the source; no such build is tried here.
- Distinct certificates therefore do not give distinct files. Connecting to 127.0.0.2 does not
  either: the kernel picks 127.0.0.1 as the source for every 127/8 destination, and
  journal-upload cannot bind a source address. A network namespace per host does. It needs
  root, `unshare` and `nsenter` (util-linux) and `ip` (iproute2). The namespaces are anonymous,
  each held open by a `cat` that reads a pipe from this process. Nothing is added to the
  machine's own namespace, and everything goes away when the holders exit. (A TCP relay that
  binds 127.0.0.N before connecting also gives distinct files without root, but it puts code of
  ours between uploader and collector.)
- Hosts behind one address (NAT) share one file: entries there are told apart only by their
  fields (`_HOSTNAME`, `_MACHINE_ID`).
- journal-upload still needs a client certificate and key for an https URL (curl loads them;
  it fails when the default files are missing), though the collector does not check them.
- `--file` needs `--follow=no`: with it, journal-upload sends every entry once and exits 0
  ("No more entries, closing journal"). Following (`--follow`, the default) works on
  `--directory` only: on `--file` it fails with "sd_journal_get_fd failed: Destination address
  required". SIGTERM stops a follower with exit code 0.
- `--save-state=FILE` keeps the host's cursor of the last entry sent (`LAST_CURSOR=`): a run
  that ends by itself and a follower stopped by SIGTERM both leave it there. A run that resumes
  from it sends the entry at the saved cursor again: one duplicate per restart.
- journal-remote keeps every entry it receives: an entry uploaded twice is stored twice. A
  reader of the collector's files must drop duplicates itself. A key that works is the
  entry's `_BOOT_ID`, `__MONOTONIC_TIMESTAMP`, `__REALTIME_TIMESTAMP` and fields.
- The collector's entries keep the source's fields and `__REALTIME_TIMESTAMP`,
  `__MONOTONIC_TIMESTAMP` and `_BOOT_ID` (`_HOSTNAME`, `_MACHINE_ID` as ordinary fields). Their
  cursors are new: the seqnum ID is the output file's own, and the seqnum counts in that file.
- Here an upload of about 1,000 entries takes 50 to 80 ms, start to exit, and 10,000 take
  about 0.3 s. Making a host (namespace, veth pair, addresses) takes about 40 ms.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

import pytest

from support.certs import Authority, Pair
from support.journals import JOURNAL_REMOTE, Entry, count_in, export
from support.tools import missing, wait_for

JOURNAL_UPLOAD = "/usr/lib/systemd/systemd-journal-upload"
PORT = 19532  # journal-remote's own port: free in the collector's namespace, which is new
COLLECTOR_ADDRESS = "10.77.0.1"
START_S = 10.0  # a namespace made, the collector listening
UPLOAD_S = 60.0  # one journal-upload run, at most
STOP_S = 10.0  # after SIGTERM, then SIGKILL


def usable() -> None:
    """Root and the tools: a failure in CI, a skip elsewhere, when one is missing."""
    if os.geteuid() != 0:
        missing("root (network namespaces for the uploading hosts)")
    for path in (JOURNAL_REMOTE, JOURNAL_UPLOAD):
        if not Path(path).exists():
            missing(f"{path} (Debian's systemd-journal-remote)")
    for tool, package in (("unshare", "util-linux"), ("nsenter", "util-linux"), ("ip", "iproute2")):
        if shutil.which(tool) is None:
            missing(f"{tool} ({package})")


def stop(proc: subprocess.Popen[bytes], timeout: float = STOP_S) -> int:
    """SIGTERM, a wait with a deadline, then SIGKILL: the exit code (negative for a signal)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    return proc.returncode


class Namespace:
    """An empty network namespace, held open by a `cat` reading a pipe from this process: when
    this process ends, however it ends, cat sees the end of its input and exits, and the kernel
    removes the namespace with every interface in it."""

    def __init__(self) -> None:
        self._holder = subprocess.Popen(
            ["unshare", "--net", "cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL
        )
        self.pid = self._holder.pid
        ours = os.readlink("/proc/self/ns/net")
        wait_for(lambda: self._apart(ours), START_S, "unshare's new network namespace")

    def _apart(self, ours: str) -> bool:
        if self._holder.poll() is not None:
            pytest.fail(f"unshare --net exited with {self._holder.returncode}")
        try:
            return os.readlink(f"/proc/{self.pid}/ns/net") != ours
        except FileNotFoundError:
            return False

    def argv(self, *command: str) -> list[str]:
        """`command` run inside this namespace."""
        return ["nsenter", f"--target={self.pid}", "--net", *command]

    def ip(self, *commands: str) -> None:
        """`ip` commands (one `ip -batch` run) inside this namespace."""
        done = subprocess.run(
            self.argv("ip", "-batch", "-"),
            input="".join(f"{c}\n" for c in commands),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, f"ip {commands}: {done.stderr}"

    def listening(self, port: int) -> bool:
        """A TCP socket of this namespace listens on `port` (from /proc, per namespace)."""
        for table in ("tcp", "tcp6"):
            try:
                rows = Path(f"/proc/{self.pid}/net/{table}").read_text().splitlines()[1:]
            except FileNotFoundError:
                continue
            for row in rows:
                fields = row.split()
                if fields[1].rsplit(":", 1)[1] == f"{port:04X}" and fields[3] == "0A":
                    return True
        return False

    def close(self) -> None:
        if self._holder.stdin is not None:
            self._holder.stdin.close()
        stop(self._holder)


def host_address(index: int) -> str:
    """The address of the `index`th host (from 0): 10.77.0.2, 10.77.0.3, ... (65,000 room)."""
    n = index + 2
    assert n < 256 * 255, index
    return f"10.77.{n // 256}.{n % 256}"


@dataclass(frozen=True)
class Identity:
    """What a host's journald stamps on every entry."""

    hostname: str
    machine_id: str
    boot_id: str

    @classmethod
    def of(cls, hostname: str) -> Identity:
        """IDs made from the name: the same name gives the same host in every run."""
        digest = hashlib.sha256(hostname.encode()).hexdigest()
        return cls(hostname, digest[:32], digest[32:])


def host_export(entries: Sequence[Entry], who: Identity) -> bytes:
    """Export format of `entries` (support.journals.export) as host `who` wrote them: its
    `_HOSTNAME` and `_BOOT_ID` in place of node0's and the shared boot's, and its
    `_MACHINE_ID`."""
    out = bytearray()
    for e in entries:
        block = export([e])
        lines = block.split(b"\n")
        # the fields before MESSAGE are text lines: key=value, one a line
        for i, line in enumerate(lines):
            if line.startswith(b"_BOOT_ID="):
                lines[i] = b"_BOOT_ID=" + who.boot_id.encode()
            elif line.startswith(b"_HOSTNAME="):
                lines[i] = b"_HOSTNAME=%s\n_MACHINE_ID=%s" % (
                    who.hostname.encode(),
                    who.machine_id.encode(),
                )
                break
        else:
            raise AssertionError(f"no _HOSTNAME line in {block!r}")
        out += b"\n".join(lines)
    return bytes(out)


def write_host_journal(path: Path, entries: Sequence[Entry], who: Identity) -> None:
    """Append `entries`, stamped as host `who`'s, to the journal file `path` (one
    systemd-journal-remote run), and check that every one arrived."""
    path.parent.mkdir(parents=True, exist_ok=True)
    before = count_in(path)
    done = subprocess.run(
        [JOURNAL_REMOTE, "-o", str(path), "-"],
        input=host_export(entries, who),
        capture_output=True,
        timeout=60,
        check=False,
    )
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 0, err
    stored = count_in(path) - before
    assert stored == len(entries), f"stored {stored} of {len(entries)} in {path}: {err}"


class Follower:
    """journal-upload following a directory of a host's, until `stop()`."""

    def __init__(self, argv: list[str]) -> None:
        self._err: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self._err)

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> tuple[int, str]:
        """SIGTERM (then SIGKILL after a deadline): its exit code and standard error."""
        code = stop(self.proc)
        if self._err.closed:
            return code, ""
        self._err.seek(0)
        err = self._err.read().decode(errors="replace")
        self._err.close()
        return code, err


class Host:
    """A machine that uploads its journal: a network namespace of its own, joined to the
    collector's by a veth pair, with its own address and client certificate."""

    def __init__(self, collector: Collector, name: str, index: int) -> None:
        self.collector = collector
        self.name = name
        self.address = host_address(index)
        self.pair: Pair = collector.authority.client(name)
        self.pair.key.chmod(0o600)
        self.net = Namespace()
        self.followers: list[Follower] = []
        link = f"h{index}"
        try:
            collector.net.ip(
                f"link add {link} type veth peer name eth0 netns {self.net.pid}",
                f"link set {link} up",
                f"route add {self.address}/32 dev {link}",
            )
            self.net.ip(
                "link set lo up",
                f"addr add {self.address}/32 dev eth0",
                "link set eth0 up",
                f"route add {COLLECTOR_ADDRESS}/32 dev eth0",
            )
        except BaseException:
            self.net.close()
            raise

    @property
    def file(self) -> Path:
        """Where the collector writes what this host uploads."""
        return self.collector.directory / f"remote-{self.address}.journal"

    def upload_argv(
        self,
        *,
        file: Path | None = None,
        directory: Path | None = None,
        state: Path | None = None,
        follow: bool = False,
    ) -> list[str]:
        assert (file is None) != (directory is None), "a file or a directory"
        source = f"--file={file}" if file is not None else f"--directory={directory}"
        return self.net.argv(
            JOURNAL_UPLOAD,
            f"--url=https://{COLLECTOR_ADDRESS}:{PORT}",
            f"--key={self.pair.key}",
            f"--cert={self.pair.cert}",
            f"--trust={self.collector.authority.path}",
            source,
            f"--follow={'yes' if follow else 'no'}",
            *([f"--save-state={state}"] if state is not None else []),
        )

    def upload(
        self, *, file: Path | None = None, directory: Path | None = None, state: Path | None = None
    ) -> str:
        """Send every entry of a journal file or directory once (from the cursor in `state`
        when it holds one); journal-upload's standard error."""
        done = subprocess.run(
            self.upload_argv(file=file, directory=directory, state=state),
            capture_output=True,
            timeout=UPLOAD_S,
            check=False,
        )
        err = done.stderr.decode(errors="replace")
        assert done.returncode == 0, f"journal-upload on {self.name}: {err}"
        return err

    def follow(self, directory: Path, state: Path | None = None) -> Follower:
        """journal-upload following `directory` (new entries sent as they are written)."""
        follower = Follower(self.upload_argv(directory=directory, state=state, follow=True))
        self.followers.append(follower)
        return follower

    def close(self) -> None:
        for f in self.followers:
            f.stop()
        self.net.close()


class Collector:
    """systemd-journal-remote listening for uploads over HTTPS in a network namespace of its
    own, one file per client address in `directory`."""

    def __init__(self, directory: Path, authority: Authority) -> None:
        usable()
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.authority = authority
        self.server = authority.issue("collector", ips=(COLLECTOR_ADDRESS,), client=False)
        self.server.key.chmod(0o600)  # (else journal-remote warns that others can read it)
        self.hosts: list[Host] = []
        self._log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self.net = Namespace()
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            self.net.ip("link set lo up", f"addr add {COLLECTOR_ADDRESS}/32 dev lo")
            self.proc = subprocess.Popen(
                self.net.argv(
                    JOURNAL_REMOTE,
                    f"--listen-https={COLLECTOR_ADDRESS}:{PORT}",
                    "--split-mode=host",
                    f"--output={directory}",
                    f"--key={self.server.key}",
                    f"--cert={self.server.cert}",
                ),
                stdout=self._log,
                stderr=subprocess.STDOUT,
            )
            wait_for(self._listening, START_S, "journal-remote listening")
        except BaseException:
            self.close()
            raise

    def _listening(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"journal-remote exited with {self.proc.returncode}: {self.log()}")
        return self.net.listening(PORT)

    def host(self, name: str) -> Host:
        """A new host named `name` (its certificate's CN; its journal says who it is)."""
        host = Host(self, name, len(self.hosts))
        self.hosts.append(host)
        return host

    def files(self) -> list[Path]:
        """The journal files the collector has written so far."""
        return sorted(self.directory.glob("remote-*.journal"))

    def log(self) -> str:
        """What journal-remote wrote to its standard output and error so far."""
        if self._log.closed:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def close(self) -> None:
        """Stop every follower, the collector (SIGTERM: it closes its files), the namespaces."""
        for host in self.hosts:
            host.close()
        if self.proc is not None:
            stop(self.proc)
        self.net.close()
        self._log.close()

    def __enter__(self) -> Collector:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
