"""The exporter process's own metrics (CPU, memory, descriptors, the Python build), from /proc.

`/metrics` ends with them, as prometheus_client's `ProcessCollector` and `PlatformCollector`
write them: the same families, help texts and order, the values read the same way. They are
written here so that the daemon does not import prometheus_client at start (a tenth of its
start-up); `reference.process_reference` is the prometheus_client original a test holds this to.
Where /proc cannot be read (not Linux), a family is left out, as prometheus_client leaves it.
"""

from __future__ import annotations

import os
import platform
import resource
from collections.abc import Iterator
from pathlib import Path

from exporter.exposition.families import COUNTER, GAUGE
from exporter.exposition.numbers import go_float

PROC = Path("/proc")
# (name, type, help) of each family, in prometheus_client's order
VIRTUAL = ("process_virtual_memory_bytes", GAUGE, "Virtual memory size in bytes.")
RESIDENT = ("process_resident_memory_bytes", GAUGE, "Resident memory size in bytes.")
STARTED = (
    "process_start_time_seconds",
    GAUGE,
    "Start time of the process since unix epoch in seconds.",
)
CPU = ("process_cpu_seconds", COUNTER, "Total user and system CPU time spent in seconds.")
OPEN_FDS = ("process_open_fds", GAUGE, "Number of open file descriptors.")
MAX_FDS = ("process_max_fds", GAUGE, "Maximum number of open file descriptors.")
PYTHON_INFO = ("python_info", GAUGE, "Python platform information")
# /proc/PID/stat's fields after the command's closing parenthesis (proc(5), from 0 there)
STAT_UTIME, STAT_STIME, STAT_STARTTIME, STAT_VSIZE, STAT_RSS = 11, 12, 19, 20, 21

Sample = tuple[tuple[str, str, str], str, float]  # (family, labels as written, value)


class ProcessMetrics:
    """The process's metrics, read at each call, in the text format 0.0.4 or OpenMetrics."""

    def __init__(self, proc: Path = PROC) -> None:
        self.proc = proc
        self.ticks = os.sysconf("SC_CLK_TCK")
        self.page = resource.getpagesize()
        self.boot_s = _boot_time(proc)
        v = platform.python_version_tuple()
        info = {
            "implementation": platform.python_implementation(),
            "major": v[0],
            "minor": v[1],
            "patchlevel": v[2],
            "version": platform.python_version(),
        }
        self.info = ",".join(f'{k}="{info[k]}"' for k in sorted(info))

    def text(self) -> bytes:
        """In the text format 0.0.4."""
        return "".join(_family(s, openmetrics=False) for s in self.samples()).encode()

    def openmetrics(self) -> bytes:
        """In OpenMetrics 1.0.0, `# EOF` last."""
        body = "".join(_family(s, openmetrics=True) for s in self.samples())
        return (body + "# EOF\n").encode()

    def samples(self) -> Iterator[Sample]:
        """Each family's one sample, in prometheus_client's order."""
        if self.boot_s:  # (prometheus_client writes no process_* without /proc/stat's btime)
            yield from self._stat()
            yield from self._descriptors()
        yield PYTHON_INFO, "{" + self.info + "}", 1.0

    def _stat(self) -> Iterator[Sample]:
        try:
            raw = (self.proc / "self" / "stat").read_bytes()
        except OSError:
            return
        parts = raw.rsplit(b")", 1)[-1].split()
        yield VIRTUAL, "", float(parts[STAT_VSIZE])
        yield RESIDENT, "", float(parts[STAT_RSS]) * self.page
        yield STARTED, "", float(parts[STAT_STARTTIME]) / self.ticks + self.boot_s
        cpu = float(parts[STAT_UTIME]) / self.ticks + float(parts[STAT_STIME]) / self.ticks
        yield CPU, "", cpu

    def _descriptors(self) -> Iterator[Sample]:
        try:
            limits = (self.proc / "self" / "limits").read_bytes().splitlines()
            most = next(line for line in limits if line.startswith(b"Max open file"))
            max_fds = float(most.split()[3])  # ("unlimited" is no number: left out)
            open_fds = len(os.listdir(self.proc / "self" / "fd"))
        except (OSError, StopIteration, ValueError, IndexError):
            return
        yield OPEN_FDS, "", float(open_fds)
        yield MAX_FDS, "", max_fds


def _boot_time(proc: Path) -> float:
    """/proc/stat's btime (the boot, Unix seconds); 0.0 where it cannot be read."""
    try:
        with open(proc / "stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def _family(sample: Sample, *, openmetrics: bool) -> str:
    """One family of one sample, with its HELP and TYPE lines."""
    (name, kind, help_text), labels, value = sample
    sample_name = name
    if kind == COUNTER:
        sample_name = f"{name}_total"
        name = name if openmetrics else sample_name
    head = f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"
    return f"{head}{sample_name}{labels} {go_float(value)}\n"
