"""The systemd service: the shipped unit, and the daemon's sd_notify on a real NOTIFY_SOCKET.

The unit passes `systemd-analyze verify` and rates 2.0 or lower in `systemd-analyze security
--offline=true`. The daemon, run as a process with NOTIFY_SOCKET pointing at a datagram socket
the test binds, sends READY=1 (with STATUS=) once /metrics answers and the sources are started,
WATCHDOG=1 from the ingest loop's heartbeat (also on a quiet night), one-line STATUS= updates,
and STOPPING=1 on SIGTERM followed by a last checkpoint.

And `make run`, the daemon on the embedded demo (as a process, like the service): on 127.0.0.1
only, its temporary journals removed when it stops (SIGINT, SIGTERM), a `--dir` given kept.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from exporter.base.times import SECOND
from exporter.commands.demo import NODES, TEMP_PREFIX, demo_directory, node_lines, short_iso
from exporter.commands.preflight import CREDENTIAL_DIRECTORIES
from exporter.config.schema import DEFAULT_PATH, Config
from exporter.daemon.notify import Notifier

from support.daemon_process import DaemonProcess, file_nodes
from support.scrape import http_get, sample
from support.tools import REPO, require_tool

UNIT = REPO / "deploy" / "sm-llm-exporter.service"
INSTALLED_BIN = "/opt/sm-llm-exporter/bin/sm-llm-exporter"  # ExecStart's path in the unit
MAX_EXPOSURE = 2.0

START = 1_790_000_000 * SECOND  # the dumps' window, long past
SINCE = datetime.fromtimestamp(START // SECOND, UTC).isoformat()
WATCHDOG_USEC = 1_000_000  # WATCHDOG=1 is due every 0.5 s; systemd would kill after 1 s
WATCHDOG_S = WATCHDOG_USEC / 1e6

# Linux socket options Python's socket module does not name (asm-generic/socket.h): the kernel
# stamps each datagram with CLOCK_REALTIME when it is sent, whenever the test reads it.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
TIMESPEC = struct.Struct("qq")  # struct timespec: seconds, nanoseconds
STATE_LINE = re.compile(r"[A-Z_]+=[^\n]*")


# -- the unit --------------------------------------------------------------------------------


def unit_settings(text: str) -> dict[tuple[str, str], list[str]]:
    """systemd unit syntax -> {(section, key): every value assigned, in order}."""
    settings: dict[tuple[str, str], list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        assert sep and section, f"not a unit file line: {raw!r}"
        settings.setdefault((section, key.strip()), []).append(value.strip())
    return settings


def entry_point() -> Path:
    """The installed `sm-llm-exporter` command of the interpreter running the tests."""
    found = shutil.which("sm-llm-exporter", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"no sm-llm-exporter beside {sys.executable}: pip install -e '.[test]'")
    return Path(found)


@pytest.fixture
def unit_copy(tmp_path: Path) -> Path:
    """The shipped unit with only ExecStart's binary replaced by the real entry point:
    `verify` checks that the binary exists and is executable."""
    text = UNIT.read_text()
    assert text.count(INSTALLED_BIN) == 1, f"ExecStart no longer runs {INSTALLED_BIN}"
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace(INSTALLED_BIN, str(entry_point())))
    return copy


def test_unit_keeps_what_the_service_needs() -> None:
    s = unit_settings(UNIT.read_text())

    def one(key: str) -> str:
        values = s.get(("Service", key), [])
        assert len(values) == 1 and values[0], f"[Service] {key}= set {values!r}"
        return values[0]

    assert one("Type") == "notify"
    assert one("Restart") == "on-failure"
    assert re.fullmatch(r"[1-9][0-9]*(s|sec|min)?", one("WatchdogSec")), one("WatchdogSec")
    assert one("NotifyAccess") in ("main", "exec", "all")  # never `none`: READY=1 would be lost
    assert one("ExecStart").split()[:2] == [INSTALLED_BIN, "run"]
    assert "systemd-journal" in one("SupplementaryGroups").split()
    assert one("ConfigurationDirectory").split()[0] == DEFAULT_PATH.parent.name
    # The checkpoint goes where the config's default state_dir says, the one writable place
    # under ProtectSystem=strict.
    assert Path("/var/lib", one("StateDirectory").split()[0]) == Config().state_dir
    credentials = s.get(("Service", "LoadCredential"), [])
    assert credentials and all(re.fullmatch(r"[\w.-]+:/\S+", c) for c in credentials), credentials
    assert s[("Install", "WantedBy")] == ["multi-user.target"]


def test_the_config_is_read_where_it_is_and_the_secrets_come_as_credentials() -> None:
    """The config holds no secret (an inline one is refused), so the dynamic user reads the
    documented path itself, and `systemctl reload` re-reads it as edited (systemd 252 copies a
    credential only at start). The secrets stay root-only files that systemd loads (as root)
    as credentials: a directory of them, each file a credential of its own. (Checked on the
    unit's text: this machine has no systemd as PID 1 to start it.)"""
    s = unit_settings(UNIT.read_text())
    assert s[("Service", "DynamicUser")] == ["yes"]
    credentials = dict(
        c.split(":", 1) for v in s.get(("Service", "LoadCredential"), []) for c in v.split()
    )
    argv = s[("Service", "ExecStart")][0].split()
    assert argv[argv.index("--config") + 1] == str(DEFAULT_PATH)
    assert s[("Service", "ConfigurationDirectoryMode")] == ["0755"]  # (its files 0644, ssh/ 0600)
    assert s[("Service", "ExecReload")] == ["/bin/kill -HUP $MAINPID"]
    assert credentials == {name: str(DEFAULT_PATH.parent / name) for name in ("ssh", "tls")}
    # what check-config --as-service reads for them
    assert {p.rstrip("_"): str(d) for p, d in CREDENTIAL_DIRECTORIES} == credentials
    made = s[("Service", "ConfigurationDirectory")][0].split()
    assert {f"sm-llm-exporter/{name}" for name in credentials} <= set(made)  # (never missing)
    guide = (UNIT.parent / "README.md").read_text()
    assert "install -m 0644 config.example.yaml /etc/sm-llm-exporter/config.yaml" in guide
    assert "install -m 0600 id_ed25519 known_hosts node_pw /etc/sm-llm-exporter/ssh/" in guide
    assert "install -m 0600 web-config.yml /etc/sm-llm-exporter/tls/" in guide


def test_systemd_analyze_verify_passes(unit_copy: Path, tmp_path: Path) -> None:
    """(verify runs `man` for each page of `Documentation=`: here the repository's man/, laid
    out as the install lays it out.)"""
    analyze = require_tool("systemd-analyze")
    require_tool("man")
    pages = tmp_path / "man"
    for page in (REPO / "man").iterdir():
        (pages / f"man{page.suffix[1:]}").mkdir(parents=True, exist_ok=True)
        shutil.copy(page, pages / f"man{page.suffix[1:]}" / page.name)
    r = subprocess.run(
        [analyze, "verify", str(unit_copy)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "MANPATH": str(pages)},
    )
    complaints = [line for line in (r.stdout + r.stderr).splitlines() if unit_copy.name in line]
    assert r.returncode == 0 and not complaints, r.stdout + r.stderr


def test_systemd_analyze_security_exposure_at_most_2(unit_copy: Path) -> None:
    analyze = require_tool("systemd-analyze")
    r = subprocess.run(
        [analyze, "security", "--offline=true", "--no-pager", str(unit_copy)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    found = re.search(
        rf"Overall exposure level for {re.escape(unit_copy.name)}: (\d+\.\d+)", r.stdout
    )
    assert found, r.stdout + r.stderr
    exposure = float(found[1])
    assert exposure <= MAX_EXPOSURE, "\n".join(
        line for line in r.stdout.splitlines() if line.startswith("✗")
    )


# -- sd_notify -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Notification:
    text: str
    pid: int  # the sender, from SCM_CREDENTIALS (NotifyAccess=main accepts the main PID only)
    sent_ns: int  # kernel CLOCK_REALTIME stamp of the send

    @property
    def fields(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in self.text.split("\n") if line)

    def has(self, state: str) -> bool:
        return state in self.text.split("\n")


class NotifySocket:
    """A real NOTIFY_SOCKET: an AF_UNIX datagram socket, as systemd binds it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.received: list[Notification] = []

    def close(self) -> None:
        self.sock.close()

    def receive(self, timeout: float) -> Notification | None:
        """The next datagram, or None when none arrives within `timeout` seconds."""
        ready, _, _ = select.select([self.sock], [], [], max(timeout, 0.0))
        if not ready:
            return None
        data, ancillary, flags, _ = self.sock.recvmsg(
            4096, socket.CMSG_SPACE(UCRED.size) + socket.CMSG_SPACE(TIMESPEC.size)
        )
        assert not flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC), flags
        pid, sent_ns = -1, -1
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = UCRED.unpack(payload[: UCRED.size])[0]
            elif level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                seconds, nanoseconds = TIMESPEC.unpack(payload[: TIMESPEC.size])
                sent_ns = seconds * 1_000_000_000 + nanoseconds
        assert pid > 0 and sent_ns > 0, ancillary
        text = data.decode()
        # sd_notify: newline-separated KEY=VALUE assignments; so STATUS= is one line
        assert all(STATE_LINE.fullmatch(line) for line in text.rstrip("\n").split("\n")), text
        n = Notification(text, pid, sent_ns)
        self.received.append(n)
        return n

    def wait_for(
        self, match: Callable[[Notification], bool], timeout: float, what: str
    ) -> Notification:
        """The first datagram from now on that `match`es; fails after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            n = self.receive(left)
            if n is not None and match(n):
                return n
        last = [n.text for n in self.received[-5:]]
        pytest.fail(f"no {what} within {timeout} s; last datagrams: {last!r}")

    def drain(self) -> None:
        while self.receive(0.0) is not None:
            pass

    def watchdogs(self, after_ns: int = 0) -> list[int]:
        return [n.sent_ns for n in self.received if n.has("WATCHDOG=1") and n.sent_ns > after_ns]


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[NotifySocket]:
    path = tmp_path / "notify"
    scratch = None
    if len(os.fsencode(path)) > 100:  # sun_path holds 108 bytes
        scratch = tempfile.mkdtemp(prefix="sd-")
        path = Path(scratch) / "notify"
    sock = NotifySocket(path)
    try:
        yield sock
    finally:
        sock.close()
        if scratch is not None:
            shutil.rmtree(scratch)


def write_dump(path: Path, node: str, start_us: int, seconds: int) -> int:
    """Append `node`'s demo lines ending in [start_us, +seconds); returns the requests in them."""
    lines = [short_iso(node, x) for x in node_lines(node, 7, start_us, start_us + seconds * SECOND)]
    with path.open("a") as f:
        f.write("".join(x + "\n" for x in lines))
    return sum("total time" in x for x in lines)


@contextmanager
def daemon_process(
    tmp_path: Path, dumps: dict[str, Path], notify: NotifySocket
) -> Iterator[DaemonProcess]:
    """`python -m exporter run` on file nodes, with NOTIFY_SOCKET and WATCHDOG_USEC set;
    started, not waited for (READY=1 says when it is ready)."""
    env = {"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": str(WATCHDOG_USEC)}
    config = {"since": SINCE, "nodes": file_nodes(dumps)}
    with DaemonProcess(tmp_path / "daemon", config, env=env) as d:
        d.launch()
        yield d


def status_says(n: Notification, sources: int, requests: int) -> bool:
    status = n.fields.get("STATUS", "")
    return f"{sources}/{sources} sources up" in status and f" {requests} requests" in status


def requests_in(n: Notification) -> int:
    found = re.search(r"\b(\d+) requests\b", n.fields.get("STATUS", ""))
    assert found, n.text
    return int(found[1])


def stop(d: DaemonProcess, notify: NotifySocket) -> Notification:
    """SIGTERM: STOPPING=1 arrives and the process exits 0."""
    d.terminate()
    stopping = notify.wait_for(lambda n: n.has("STOPPING=1"), 10, "STOPPING=1 after SIGTERM")
    d.stopped(10)
    notify.drain()
    return stopping


def check_pace(sent_ns: list[int]) -> None:
    """At most twice per WATCHDOG_USEC, and never so late that systemd would kill the service."""
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(sent_ns)]
    assert gaps and min(gaps) >= 0.4 * WATCHDOG_S, gaps
    assert max(gaps) < WATCHDOG_S, gaps


def test_ready_watchdog_status_and_stopping(tmp_path: Path, notify_socket: NotifySocket) -> None:
    dumps = {n: tmp_path / f"{n}.log" for n in NODES}
    total = sum(write_dump(p, n, START, 1200) for n, p in dumps.items())
    with daemon_process(tmp_path, dumps, notify_socket) as d:
        ready = notify_socket.wait_for(lambda n: n.has("READY=1"), 20, "READY=1")
        # READY=1 promises /metrics is bound and every source started: no retrying needed
        status, _, _ = http_get(d.url + "/-/ready")
        assert status == 200
        status, body, _ = http_get(d.url + "/metrics")
        assert status == 200 and b"smllm_exporter_build_info" in body
        assert ready.pid == d.pid
        assert re.search(rf"\d+/{len(NODES)} sources up, .*\d+ requests", ready.fields["STATUS"])

        # STATUS= keeps up: every node's source up, every request of the dumps counted
        notify_socket.wait_for(
            lambda n: status_says(n, len(NODES), total), 20, f"STATUS= with {total} requests"
        )
        # WATCHDOG=1 from the loop's heartbeat: at least 3 within 3 s, at the due pace
        notify_socket.wait_for(
            lambda n: len(notify_socket.watchdogs(after_ns=ready.sent_ns)) >= 4,
            3,
            "4 WATCHDOG=1 after READY=1",
        )
        check_pace(notify_socket.watchdogs())

        stopping = stop(d, notify_socket)
        checkpoint = d.checkpoint()

    received = notify_socket.received
    assert sum(n.has("READY=1") for n in received) == 1
    assert {n.pid for n in received} == {d.pid}
    assert received.index(ready) < received.index(stopping)
    # the last checkpoint was written at shutdown, after STOPPING=1 was sent ...
    assert checkpoint["written_at_us"] >= stopping.sent_ns // 1000
    # ... and holds the position after every line read
    for node, path in dumps.items():
        st = path.stat()
        assert checkpoint["positions"][node] == f"{st.st_dev}:{st.st_ino}:{st.st_size}"


def test_every_reloading_is_followed_by_ready_a_node_added_too(
    tmp_path: Path, notify_socket: NotifySocket
) -> None:
    """systemd holds the unit in `reloading` (and queues every later reload) until READY=1
    follows RELOADING=1: a reload that adds a node, whose source starts after the reload is
    taken, closes with READY=1 like any other; and so does the next one, and a refused one."""
    dumps = {n: tmp_path / f"{n}.log" for n in NODES}
    for n, p in dumps.items():
        write_dump(p, n, START, 60)
    with daemon_process(tmp_path, dumps, notify_socket) as d:
        notify_socket.wait_for(lambda n: n.has("READY=1"), 20, "READY=1")
        assert d.settings is not None and d.proc is not None
        added = tmp_path / "added.log"
        write_dump(added, "added", START, 60)
        for nodes in ({**dumps, "added": added}, {**dumps, "added": added, "more": added}):
            settings = {**d.settings, "nodes": file_nodes(nodes), "listen": f"127.0.0.1:{d.port}"}
            d.config.write_text(json.dumps(settings))
            d.proc.send_signal(signal.SIGHUP)
            notify_socket.wait_for(lambda n: n.has("RELOADING=1"), 20, "RELOADING=1")
            notify_socket.wait_for(lambda n: n.has("READY=1"), 20, "READY=1 after RELOADING=1")
        d.config.write_text("nodes: [")  # (refused: the config in force stays)
        d.proc.send_signal(signal.SIGHUP)
        notify_socket.wait_for(lambda n: n.has("RELOADING=1"), 20, "RELOADING=1")
        notify_socket.wait_for(lambda n: n.has("READY=1"), 20, "READY=1 after a refused reload")
        stop(d, notify_socket)


def test_watchdog_keeps_coming_on_a_quiet_night(
    tmp_path: Path, notify_socket: NotifySocket
) -> None:
    path = tmp_path / "node0.log"
    total = write_dump(path, "node0", START, 600)
    with daemon_process(tmp_path, {"node0": path}, notify_socket) as d:
        notify_socket.wait_for(lambda n: status_says(n, 1, total), 20, "every line read")
        entries = sample(d.metrics(), "smllm_source_entries_total", node="node0")
        quiet_from = time.time_ns()
        notify_socket.wait_for(
            lambda n: len(notify_socket.watchdogs(after_ns=quiet_from)) >= 5,
            4,
            "5 WATCHDOG=1 with no new line",
        )
        # nothing was read meanwhile: the heartbeat is the loop's, not the entries'
        samples = d.metrics()
        assert sample(samples, "smllm_source_entries_total", node="node0") == entries
        assert all(
            requests_in(n) == total
            for n in notify_socket.received
            if "STATUS" in n.fields and n.sent_ns > quiet_from
        )
        check_pace(notify_socket.watchdogs(after_ns=quiet_from))

        # and the loop that fed the watchdog is the one that reads: new lines are counted
        more = write_dump(path, "node0", START + 600 * SECOND, 300)
        notify_socket.wait_for(
            lambda n: "STATUS" in n.fields and requests_in(n) == total + more,
            10,
            "the appended requests in STATUS=",
        )
        stop(d, notify_socket)


def test_without_notify_socket_nothing_is_sent(
    notify_socket: NotifySocket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No NOTIFY_SOCKET (not under systemd): every call is a no-op, the watchdog included."""
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify_socket.path))  # where sd_notify would send
    quiet = Notifier(env={"WATCHDOG_USEC": str(WATCHDOG_USEC)})
    assert not quiet.enabled
    quiet.ready("r")
    quiet.status("s")
    quiet.heartbeat()
    quiet.stopping()
    # the control: the same calls with NOTIFY_SOCKET in its env reach the socket
    loud = Notifier(env=os.environ | {"WATCHDOG_USEC": str(WATCHDOG_USEC)})
    loud.heartbeat()
    first = notify_socket.wait_for(lambda n: True, 5, "the control datagram")
    assert first.text == "WATCHDOG=1" and first.pid == os.getpid()


# -- make run: the demo ----------------------------------------------------------------------


def demo(tmp_path: Path, *args: str) -> tuple[DaemonProcess, Path]:
    """`sm-llm-exporter demo --listen 127.0.0.1:0 ARGS` (not started) and its TMPDIR."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    argv = [str(entry_point()), "demo", "--listen", "127.0.0.1:0", *args]
    return DaemonProcess(tmp_path / "demo", command=lambda _: argv, env={"TMPDIR": str(temp)}), temp


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_demo_removes_the_directory_it_made_when_stopped(tmp_path: Path, signum: int) -> None:
    d, temp = demo(tmp_path)
    with d:
        d.start()  # (serving on 127.0.0.1: the log line start() waits for names the address)
        made = list(temp.glob(TEMP_PREFIX + "*"))
        assert len(made) == 1, made
        assert {f"{n}.log" for n in NODES} <= {p.name for p in made[0].iterdir()}
        assert d.proc is not None
        d.proc.send_signal(signum)
        d.stopped(10)
    assert not made[0].exists()
    assert not list(temp.iterdir())


def test_demo_keeps_the_directory_it_was_given(tmp_path: Path) -> None:
    given = tmp_path / "journals"
    d, temp = demo(tmp_path, "--dir", str(given))
    with d:
        d.start()
        assert d.proc is not None
        d.proc.send_signal(signal.SIGINT)
        d.stopped(10)
    assert all((given / f"{n}.log").stat().st_size > 0 for n in NODES)
    assert not list(temp.iterdir())  # and no temporary one either


def test_demo_directory_is_removed_on_a_normal_exit_and_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with demo_directory() as made:
        assert made.parent == tmp_path and made.name.startswith(TEMP_PREFIX)
        (made / "node0.log").write_text("x\n")
    assert not made.exists()
    with pytest.raises(RuntimeError), demo_directory() as failed:
        raise RuntimeError("the demo failed")
    assert not failed.exists()
    given = tmp_path / "given"
    given.mkdir()
    with demo_directory(given) as used:
        assert used == given
        (used / "node0.log").write_text("x\n")
    assert (given / "node0.log").read_text() == "x\n"


def test_make_run_listens_on_this_host_only() -> None:
    make = require_tool("make")
    r = subprocess.run(
        [make, "-n", "-o", ".venv/.base", "run"],  # the recipe, printed, nothing rebuilt
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"sm-llm-exporter demo .*--listen (\S+)", r.stdout)
    assert found, r.stdout
    assert found[1].rpartition(":")[0] == "127.0.0.1", found[1]
