"""What /proc says: a process's memory, CPU time and read position, the machine's CPU pressure."""

from __future__ import annotations

import os
from pathlib import Path


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    """The process's resident memory (VmRSS; or `RssAnon`, its own, without the files it maps),
    in kB; 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the process so far (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_stall_us() -> int:
    """Microseconds so far in which some task on the machine waited for a CPU (the kernel's
    pressure stall information, "some" line); 0 where the kernel does not keep it."""
    try:
        first = Path("/proc/pressure/cpu").read_text().split("\n", 1)[0]
    except OSError:
        return 0
    return int(first.rpartition("total=")[2] or 0)


class ReadPosition:
    """How far a process has read a file: the position of its descriptor on it
    (/proc/PID/fdinfo), found again if it reopens the file."""

    def __init__(self, pid: int, path: Path) -> None:
        self.pid, self.target = pid, str(path.resolve())
        self.fd: int | None = None

    def _find(self) -> int | None:
        try:
            names = os.listdir(f"/proc/{self.pid}/fd")
        except OSError:
            return None
        for name in names:
            try:
                if os.readlink(f"/proc/{self.pid}/fd/{name}") == self.target:
                    return int(name)
            except OSError:
                continue
        return None

    def __call__(self) -> int | None:
        """The byte it has read up to, or None while it has the file closed."""
        for _ in range(2):
            if self.fd is None:
                self.fd = self._find()
                if self.fd is None:
                    return None
            try:
                if os.readlink(f"/proc/{self.pid}/fd/{self.fd}") == self.target:
                    info = Path(f"/proc/{self.pid}/fdinfo/{self.fd}").read_text()
                    return int(info.split("\n", 1)[0].split()[1])  # "pos:\t1234"
            except (OSError, ValueError, IndexError):
                pass
            self.fd = None
        return None
