"""Where the CLI and the daemon write: `report --output` and the backfill's `--output` replace a
regular file whole, write a device or a FIFO in place and never replace a link; their temporary
files have names nobody can plant; the state directory's lock file is never followed, never
truncated unless it is a plain file of the daemon's own.

The device nodes are made with mknod (the tests run as root, as `make test` does) in the test's
own directory: /dev/null's numbers, and a loop device's number for a block device that is never
opened."""

from __future__ import annotations

import json
import os
import select
import stat
import threading
from pathlib import Path

import pytest

from exporter.checkpoint.store import NAME as CHECKPOINT_NAME
from exporter.checkpoint.store import Checkpoint, StateLock

from support import tools
from support.cli import Cli
from support.daemon_process import DaemonProcess, file_nodes
from support.outputs import WINDOW, Ran, cli, kind_of, node_dump, temporaries

NULL = os.makedev(1, 3)  # /dev/null's numbers
LOOP = os.makedev(7, 250)  # a loop device's (never opened)
NOBODY = 65534
DRAIN_S = 30.0  # (the reader's deadline)
EXIT_S = 20.0  # (the daemon's deadline to refuse)
PRECIOUS = "precious\n"
FORMATS = {
    "report": ("--format", "json"),
    "backfill": ("--format", "openmetrics", "--step", "1m"),
}


def root_only() -> None:
    if os.geteuid() != 0:
        tools.missing("root: device nodes and other users' files need it (make test runs as root)")


def one_error(ran: Ran, path: Path) -> str:
    """The run's one ERROR line, which names `path`; no traceback, no temporary name."""
    errors = ran.lines("ERROR")
    assert len(errors) == 1, ran.err
    assert str(path) in errors[0] and "Traceback" not in ran.err and ".tmp" not in ran.err
    return errors[0]


class Drain:
    """A FIFO's reader, present before any writer comes: what is written to it, up to EOF
    (which comes once `close_writer` is called and the writers are gone)."""

    def __init__(self, fifo: Path) -> None:
        self.fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.held = os.open(fifo, os.O_WRONLY)  # (no EOF before the writer under test is done)
        self.data = bytearray()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            select.select([self.fd], [], [], 1.0)
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                return
            self.data += chunk

    def close_writer(self) -> bytes:
        os.close(self.held)
        self.thread.join(DRAIN_S)
        assert not self.thread.is_alive(), "the FIFO's writer never closed it"
        os.close(self.fd)
        return bytes(self.data)


@pytest.mark.slow
@pytest.mark.parametrize("what", FORMATS)
def test_output_writes_a_device_or_fifo_in_place_and_never_replaces_a_link(
    tmp_path: Path, what: str
) -> None:
    root_only()
    base = ["report", *WINDOW, *node_dump(tmp_path / "dumps"), *FORMATS[what]]
    plain = tmp_path / "plain"
    ran = cli(*base, "--output", str(plain))
    assert ran.code == 0, ran.err
    expected = plain.read_bytes()
    out = tmp_path / "out"
    out.mkdir()

    # a character device: written to, still the same device
    null = out / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, NULL)
    ran = cli(*base, "--output", str(null))
    assert ran.code == 0, ran.err
    assert kind_of(null) == "char" and os.lstat(null).st_rdev == NULL

    # a FIFO with a reader: the reader gets the whole output, the FIFO stays
    fifo = out / "fifo"
    os.mkfifo(fifo)
    drain = Drain(fifo)
    ran = cli(*base, "--output", str(fifo))
    assert drain.close_writer() == expected
    assert ran.code == 0, ran.err
    assert kind_of(fifo) == "fifo"

    # a FIFO nobody reads: refused at once (not waited on), still a FIFO
    lonely = out / "lonely"
    os.mkfifo(lonely)
    ran = cli(*base, "--output", str(lonely))
    assert ran.code == 1 and "no reader" in one_error(ran, lonely)
    assert kind_of(lonely) == "fifo"

    # a link to a device (as /dev/stdout is): written through, the link kept
    to_null = out / "to-null"
    to_null.symlink_to(null)
    ran = cli(*base, "--output", str(to_null))
    assert ran.code == 0, ran.err
    assert kind_of(to_null) == "link" and kind_of(null) == "char"

    # a link to a regular file: refused; the link and the file as they were
    victim = out / "victim"
    victim.write_text(PRECIOUS)
    link = out / "link"
    link.symlink_to(victim)
    ran = cli(*base, "--output", str(link))
    assert ran.code == 1 and "symbolic link" in one_error(ran, link)
    assert kind_of(link) == "link" and victim.read_text() == PRECIOUS

    # a block device: refused, still the device
    disk = out / "disk"
    os.mknod(disk, stat.S_IFBLK | 0o600, LOOP)
    ran = cli(*base, "--output", str(disk))
    assert ran.code == 1 and "block device" in one_error(ran, disk)
    assert kind_of(disk) == "block"

    # a directory that is not there: one line naming the path
    missing = out / "missing" / "x"
    ran = cli(*base, "--output", str(missing))
    assert ran.code == 1 and "No such file or directory" in one_error(ran, missing)

    # a regular file: replaced whole
    again = out / "again"
    again.write_text(PRECIOUS)
    ran = cli(*base, "--output", str(again))
    assert ran.code == 0, ran.err
    assert again.read_bytes() == expected and kind_of(again) == "file"
    assert temporaries(out) == []


def test_links_planted_at_the_old_temporary_names_are_never_followed(
    tmp_path: Path, cli: Cli
) -> None:
    """The report's temporary file was `.NAME.PID.tmp` and the backfill's `.NAME.tmp`, opened
    following links: a link planted there had its target overwritten. Now each is a new name,
    created O_EXCL|O_NOFOLLOW."""
    dumps = node_dump(tmp_path / "dumps")
    victim = tmp_path / "victim"
    victim.write_text(PRECIOUS)
    report, backfill = tmp_path / "report.json", tmp_path / "backfill.om"
    planted = [tmp_path / f".{report.name}.{os.getpid()}.tmp", tmp_path / f".{backfill.name}.tmp"]
    for link in planted:
        link.symlink_to(victim)
    code, _, err = cli("report", *WINDOW, *dumps, "--format", "json", "--output", str(report))
    assert code == 0, err
    args = ["--format", "openmetrics", "--step", "1m", "--output", str(backfill)]
    code, _, err = cli("report", *WINDOW, *dumps, *args)
    assert code == 0, err
    assert victim.read_text() == PRECIOUS
    assert kind_of(report) == "file" and json.loads(report.read_text())["nodes"]["node0"]
    assert kind_of(backfill) == "file" and backfill.read_text().endswith("# EOF\n")
    assert all(kind_of(link) == "link" for link in planted)
    assert temporaries(tmp_path) == sorted(p.name for p in planted)


def test_the_checkpoint_and_the_probe_never_follow_a_planted_link(tmp_path: Path) -> None:
    """Their temporary files were `.checkpoint.json.PID.THREAD.tmp` and `.probe-PID`, opened
    with O_CREAT|O_TRUNC: a link planted in the state directory had its target emptied."""
    victim = tmp_path / "victim"
    victim.write_text(PRECIOUS)
    state = tmp_path / "state"
    state.mkdir()
    planted = [
        state / f".{CHECKPOINT_NAME}.{os.getpid()}.{threading.get_ident()}.tmp",
        state / f".probe-{os.getpid()}",
    ]
    for link in planted:
        link.symlink_to(victim)
    Checkpoint(state).write(b'{"format":1}')
    assert victim.read_text() == PRECIOUS
    assert (state / CHECKPOINT_NAME).read_bytes() == b'{"format":1}'
    StateLock(state).probe()
    assert victim.read_text() == PRECIOUS
    assert all(kind_of(link) == "link" for link in planted)


def plant(lock: Path, how: str, victim: Path) -> str:
    """Something planted at the lock's place; the kind it must still be afterwards."""
    if how == "symlink":
        lock.symlink_to(victim)
        return "link"
    if how == "hard link":
        os.link(victim, lock)
    elif how == "fifo":
        os.mkfifo(lock)
        return "fifo"
    else:  # another user's file
        lock.write_text(PRECIOUS)
        os.chown(lock, NOBODY, NOBODY)
    return "file"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["symlink", "hard link", "fifo", "another user's"])
def test_a_planted_lock_file_is_refused_and_nothing_is_truncated(tmp_path: Path, how: str) -> None:
    """A state directory others can write: the daemon (root) takes its flock on `lock` and
    writes its PID there. A link there had its target truncated (a FIFO hung the start);
    now the daemon refuses in one line and leaves everything as it was."""
    root_only()
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o1777)
    victim = tmp_path / "victim"
    victim.write_text(PRECIOUS)
    lock = state / "lock"
    kind = plant(lock, how, victim)
    dump = tmp_path / "node0.log"
    dump.write_text("")
    settings = {"nodes": file_nodes({"node0": dump}), "state_dir": str(state)}
    with DaemonProcess(tmp_path / "daemon", settings) as d:
        assert d.launch().wait(EXIT_S) == 1
        text = d.log_text()
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1, text
    assert f"lock file {lock}" in errors[0] and "refused" in errors[0]
    assert "Traceback" not in text and "serving" not in text
    assert victim.read_text() == PRECIOUS
    assert kind_of(lock) == kind
    if kind == "file" and how != "hard link":
        assert lock.read_text() == PRECIOUS
