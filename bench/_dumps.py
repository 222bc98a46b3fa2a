"""A generated workload in journal files and in the dumps journalctl prints of them.

As an operator finds it: in journal files written by Debian's systemd-journal-remote (every
field journald keeps for a unit's standard error), and in the dumps `journalctl --directory D
-u UNIT -o FORM` prints of them (so `__CURSOR`, the field order and the escaping are real
journalctl's).
"""

from __future__ import annotations

import random
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from _common import environment, journal_remote
from _workload import (
    EPOCH_US,
    NODE,
    PID,
    SYSTEMD_PID,
    UNIT,
    Entry,
    mixed_workload,
    real_workload,
)

from exporter.base.times import SECOND
from exporter.parse.tokens import KEYWORDS

UPTIME_US = 3 * 86_400 * SECOND + 417_123_456  # the boot's age at the first entry

# The parts of journald's fields that stay the same from entry to entry (export format).
BOOT_ID = "5d1c0f3e9a7b4c2d8e6f1a3b5c7d9e0f"
MACHINE_ID = "0b7e3a9c5d1f4e2a8c6b0d4f2e8a6c1b"
SERVER_FIELDS = (
    f"_BOOT_ID={BOOT_ID}\n"
    f"_MACHINE_ID={MACHINE_ID}\n"
    f"_HOSTNAME={NODE}\n"
    "_TRANSPORT=stdout\n"
    "PRIORITY=6\n"
    "SYSLOG_FACILITY=3\n"
    "SYSLOG_IDENTIFIER=sm-llm\n"
    f"_PID={PID}\n"
    "_UID=998\n"
    "_GID=998\n"
    "_COMM=llama-server\n"
    "_EXE=/usr/local/bin/llama-server\n"
    "_CMDLINE=/usr/local/bin/llama-server --host 0.0.0.0 --port 8080 --parallel 3 "
    "--ctx-size 98304 --model /srv/models/qwen3-30b-a3b-q4_k_m.gguf\n"
    "_CAP_EFFECTIVE=0\n"
    f"_SYSTEMD_CGROUP=/system.slice/{UNIT}\n"
    f"_SYSTEMD_UNIT={UNIT}\n"
    "_SYSTEMD_SLICE=system.slice\n"
    "_SYSTEMD_INVOCATION_ID=8f3d2b6a1c9e4f7a0b5d3e8c2a6f9b1d\n"
    "_STREAM_ID=2e9b7c4a6d1f3e8b0a5c9d2f7e4b1a6c\n"
)
SYSTEMD_FIELDS = (
    f"_BOOT_ID={BOOT_ID}\n"
    f"_MACHINE_ID={MACHINE_ID}\n"
    f"_HOSTNAME={NODE}\n"
    "_TRANSPORT=journal\n"
    "PRIORITY=6\n"
    "SYSLOG_FACILITY=3\n"
    "SYSLOG_IDENTIFIER=systemd\n"
    "_PID=1\n"
    "_UID=0\n"
    "_GID=0\n"
    "_COMM=systemd\n"
    "_EXE=/usr/lib/systemd/systemd\n"
    "_CMDLINE=/sbin/init\n"
    "_CAP_EFFECTIVE=1ffffffffff\n"
    "_SYSTEMD_CGROUP=/init.scope\n"
    "_SYSTEMD_UNIT=init.scope\n"
    "_SYSTEMD_SLICE=-.slice\n"
    "CODE_FILE=src/core/job.c\n"
    "CODE_LINE=768\n"
    "CODE_FUNC=job_emit_done_message\n"
    "MESSAGE_ID=39f53479d3a045ac8e11786248231fbf\n"
    "JOB_TYPE=start\n"
    "JOB_RESULT=done\n"
    "JOB_ID=1917\n"
    f"UNIT={UNIT}\n"
    "INVOCATION_ID=8f3d2b6a1c9e4f7a0b5d3e8c2a6f9b1d\n"
)


@dataclass(frozen=True, slots=True)
class Totals:
    """What a tool counted: requests, their seconds and tokens (-1: not counted)."""

    requests: int
    seconds: float
    tokens: int


@dataclass(frozen=True, slots=True)
class Journal:
    """A workload written to a journal file, and what it holds."""

    workload: str
    directory: Path  # journal-remote's files (it starts a new one every ~80 MB)
    entries: int
    expected: Totals
    request_us: int  # exact sum of the durations
    timing_lines: int  # prompt eval, eval and total lines
    keyword_lines: int  # lines holding a parser keyword (timing lines included)
    first_us: int
    last_us: int


@dataclass(frozen=True, slots=True)
class Dump:
    journal: Journal
    form: str  # journalctl's -o
    path: Path
    size: int  # bytes

    @property
    def lines(self) -> int:
        return self.journal.entries

    @property
    def name(self) -> str:
        return f"{self.journal.workload}, {self.form}"


def _export(e: Entry) -> str:
    """journal export format, as journald would have stored the entry."""
    head = (
        f"__REALTIME_TIMESTAMP={e.time_us}\n"
        f"__MONOTONIC_TIMESTAMP={e.time_us - EPOCH_US + UPTIME_US}\n"
    )
    if e.pid == SYSTEMD_PID:
        return f"{head}{SYSTEMD_FIELDS}_SOURCE_REALTIME_TIMESTAMP={e.time_us - 37}\n" + (
            f"MESSAGE={e.message}\n\n"
        )
    return f"{head}{SERVER_FIELDS}MESSAGE={e.message}\n\n"


def write_journal(workload: str, directory: Path, lines: int, seed: int) -> Journal:
    """The first `lines` entries of `workload` into journal files in `directory` (made)."""
    directory.mkdir(parents=True)
    rng = random.Random(f"{seed}:{workload}")
    gen = real_workload(rng) if workload == "real" else mixed_workload(rng)
    requests = request_us = tokens = timing = keyword = 0
    first = last = EPOCH_US

    def export() -> Iterator[str]:
        nonlocal requests, request_us, tokens, timing, keyword, first, last
        for k in range(lines):
            e = next(gen)
            if k == 0:
                first = e.time_us
            last = e.time_us
            if e.request is not None:
                requests += 1
                request_us += e.request[0] * 10
                tokens += e.request[1]
            timing += "total time" in e.message or "eval time" in e.message
            raw = e.message.encode()
            keyword += any(kw in raw for kw in KEYWORDS)
            yield _export(e)

    journal_remote(directory / f"{workload}.journal", export())
    return Journal(
        workload,
        directory,
        lines,
        Totals(requests, request_us / SECOND, tokens),
        request_us,
        timing,
        keyword,
        first,
        last,
    )


def write_dump(j: Journal, form: str, path: Path) -> Dump:
    """`journalctl --directory J -u UNIT -o FORM` into `path`, in UTC, as an operator dumps it."""
    with path.open("wb") as out:
        done = subprocess.run(
            ["journalctl", "--directory", str(j.directory), "-u", UNIT, "-o", form, "--no-pager"],
            stdout=out,
            stderr=subprocess.PIPE,
            env=environment(TZ="UTC", LC_ALL="C.UTF-8", SYSTEMD_COLORS="0"),
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"journalctl -o {form} exited {done.returncode}: {done.stderr!r}")
    with path.open("rb") as f:
        n = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    if n != j.entries:
        raise RuntimeError(f"journalctl -o {form} printed {n} lines of {j.entries} entries")
    return Dump(j, form, path, path.stat().st_size)
