"""The state file: positions and every counter in one versioned JSON file, written atomically.

A write goes to a new temporary file in the same directory, is fsynced, renamed over the old
file and the directory fsynced, so a crash at any moment leaves either the old checkpoint or the
new one, whole. The file is mode 0600; its directory is made 0700 when missing. One daemon per state
directory: `StateLock` holds an flock on its `lock` file, which names the holder's PID.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FORMAT = 1
NAME = "checkpoint.json"
LOCK_NAME = "lock"


class CheckpointError(Exception):
    """A checkpoint exists but cannot be used; the message says which file and why."""


class Checkpoint:
    """One state file; `write` may be called from a worker thread (writes are serialized)."""

    def __init__(self, state_dir: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = state_dir / NAME
        self.clock = clock
        self._lock = threading.Lock()

    def load(self) -> dict[str, Any] | None:
        """The saved state; None when there is none; CheckpointError when it is unusable."""
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
        found = data.get("format") if isinstance(data, dict) else None
        if not isinstance(data, dict) or type(found) is not int or found != FORMAT:
            raise CheckpointError(
                f"{self.path}: checkpoint format {found!r}, this version reads format {FORMAT}"
            )
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

    @staticmethod
    def encode(state: dict[str, Any]) -> bytes:
        return json.dumps({"format": FORMAT, **state}, separators=(",", ":")).encode()

    def write(self, data: bytes) -> None:
        """Replace the checkpoint with `data`, atomically; raises OSError (disk full, read-only)."""
        with self._lock:
            directory = self.path.parent
            if not directory.is_dir():
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = directory / f".{NAME}.{os.getpid()}.{threading.get_ident()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
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
        directory cannot be made or the file opened."""
        directory = self.path.parent
        if not directory.is_dir():
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        # held read-only (a file open for writing would keep its file system from going
        # read-only); the PID is written through a second descriptor, closed at once
        fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            holder = f"PID {text}" if text.isdigit() else "a process that wrote no PID"
            raise StateInUse(
                f"state directory {directory} is in use by another sm-llm-exporter ({holder}); "
                "one daemon per state directory (set state_dir to run a second one)"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        with contextlib.suppress(OSError):  # (the PID is for the refusal's message only)
            out = os.open(self.path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
            try:
                os.write(out, f"{os.getpid()}\n".encode())
            finally:
                os.close(out)

    def probe(self) -> None:
        """Write, fsync and remove a file in the state directory: OSError naming the directory
        and why when a checkpoint could not be written there (read-only, not its owner's, no
        room), so that start-up refuses instead of serving counters it can never keep."""
        directory = self.path.parent
        probe = directory / f".probe-{os.getpid()}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, b"probe\n")
                os.fsync(fd)
            finally:
                os.close(fd)
                with contextlib.suppress(OSError):  # (nothing left behind, whatever failed)
                    os.unlink(probe)
        except OSError as e:
            raise OSError(
                f"state directory {directory} cannot hold checkpoints "
                f"({e.strerror or type(e).__name__}): set state_dir to a writable directory"
            ) from None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
