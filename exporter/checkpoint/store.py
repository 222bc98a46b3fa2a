"""The state file: one JSON file written atomically, and the lock of its state directory.

What the file holds, and its versions, are exporter/checkpoint/codec.py's. A write goes to a new
temporary file in the same directory, is fsynced, renamed over the old file and the directory
fsynced, so a crash at any moment leaves either the old checkpoint or the new one, whole. The
file is mode 0600; its directory is made 0700 when missing. One daemon per state directory:
`StateLock` holds an flock on its `lock` file, which names the holder's PID.

A state directory other users can write must not turn the daemon's writes onto their targets:
the temporary files have unpredictable names, created O_EXCL|O_NOFOLLOW (outfile.create_temp),
and the lock file is opened without following a link or waiting on a FIFO, and used only when
it is a regular file of this user's with one name (else start-up is refused, nothing written).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exporter.base.outfile import create_temp, shown

log = logging.getLogger(__name__)

NAME = "checkpoint.json"
LOCK_NAME = "lock"
FILE_MODE = 0o600  # the checkpoint's and the lock's
PID_BYTES = 32  # of the lock file, read for the refusal's message


class CheckpointError(Exception):
    """A checkpoint exists but cannot be used; the message says which file and why."""


class Checkpoint:
    """One state file; `write` may be called from a worker thread (writes are serialized)."""

    def __init__(self, state_dir: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = state_dir / NAME
        self.clock = clock
        self._lock = threading.Lock()

    def load(self) -> dict[str, Any] | None:
        """The saved JSON object (of any version: see codec.load); None when there is none;
        CheckpointError when it cannot be read or is no JSON object."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CheckpointError(f"{self.path}: cannot read: {e}") from None
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise CheckpointError(f"{self.path}: not a checkpoint (not JSON: {e})") from None
        if not isinstance(data, dict):
            raise CheckpointError(f"{self.path}: not a checkpoint (not a JSON object)")
        state: dict[str, Any] = data
        return state

    def remove_stale_temps(self) -> None:
        """Temporary files a crash left in the middle of a write (never the checkpoint)."""
        for tmp in self.path.parent.glob(f".{NAME}.*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()

    def set_aside(self) -> Path | None:
        """Move an unusable checkpoint out of the way (kept for a look); returns where."""
        aside = self.path.with_name(f"{NAME}.unusable-{int(self.clock() * 1e6)}")
        try:
            self.path.rename(aside)
        except OSError:
            return None
        return aside

    def write(self, data: bytes) -> None:
        """Replace the checkpoint with `data`, atomically; raises OSError (disk full, read-only)."""
        with self._lock:
            directory = self.path.parent
            if not directory.is_dir():
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = create_temp(directory, NAME, FILE_MODE)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
            os.close(fd)
            try:
                os.replace(tmp, self.path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


class StateInUse(OSError):
    """Another process holds the state directory's lock; the message names its PID."""


class StateLock:
    """One daemon per state directory: an exclusive flock on `state_dir/lock` for as long as
    the daemon runs (the kernel drops it when the process ends, however it ends). The file
    holds the holder's PID, for the refusal to name."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock; StateInUse when another process holds it, OSError when the
        directory cannot be made or the file opened, or when `lock` is anything but a regular
        file of this user's with one name (a link planted there is refused, never followed or
        truncated)."""
        directory = self.path.parent
        if not directory.is_dir():
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        # held read-only (a file open for writing would keep its file system from going
        # read-only); the PID is written through a second descriptor, closed at once
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, PID_BYTES, 0).decode("ascii", "replace").strip()
            os.close(fd)
            holder = f"PID {text}" if text.isdigit() else "a process that wrote no PID"
            raise StateInUse(
                f"state directory {shown(directory)} is in use by another sm-llm-exporter "
                f"({holder}); one daemon per state directory (set state_dir to run a second one)"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        with contextlib.suppress(OSError):  # (the PID is for the refusal's message only)
            self._write_pid(fd)

    def _open(self) -> int:
        """The lock file, made when missing (O_NOFOLLOW, O_NONBLOCK: a link is not followed,
        a FIFO not waited on); OSError naming it unless it is a regular file of this user's
        with one name."""
        flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags | os.O_NOCTTY, FILE_MODE)
        except OSError as e:
            why = "a symbolic link" if e.errno == errno.ELOOP else e.strerror
            raise OSError(self._refusal(f"is {why}" if why else "cannot be opened")) from None
        st = os.fstat(fd)
        why = ""
        if not stat.S_ISREG(st.st_mode):
            why = "is not a regular file"
        elif st.st_uid != os.geteuid():
            why = f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
        elif st.st_nlink != 1:
            why = f"has {st.st_nlink} names (a hard link)"
        if why:
            os.close(fd)
            raise OSError(self._refusal(why))
        return fd

    def _refusal(self, why: str) -> str:
        return (
            f"state directory {shown(self.path.parent)}: its lock file {shown(self.path)} {why}: "
            "refused, nothing written (remove it; the daemon makes its own, and a state "
            "directory other users can write is no place for state)"
        )

    def _write_pid(self, locked: int) -> None:
        """This process's PID into the lock file held as `locked`: opened again without
        following a link and written only when it is the very file locked."""
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        out = os.open(self.path, flags)
        try:
            held, again = os.fstat(locked), os.fstat(out)
            if (held.st_dev, held.st_ino) != (again.st_dev, again.st_ino):
                return
            os.ftruncate(out, 0)
            os.write(out, f"{os.getpid()}\n".encode())
        finally:
            os.close(out)

    def probe(self) -> None:
        """Write, fsync and remove a file in the state directory: OSError naming the directory
        and why when a checkpoint could not be written there (read-only, not its owner's, no
        room), so that start-up refuses instead of serving counters it can never keep."""
        directory = self.path.parent
        try:
            fd, probe = create_temp(directory, "probe", FILE_MODE)
            try:
                os.write(fd, b"probe\n")
                os.fsync(fd)
            finally:
                os.close(fd)
                with contextlib.suppress(OSError):  # (nothing left behind, whatever failed)
                    os.unlink(probe)
        except OSError as e:
            raise OSError(
                f"state directory {shown(directory)} cannot hold checkpoints "
                f"({e.strerror or type(e).__name__}): set state_dir to a writable directory"
            ) from None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
