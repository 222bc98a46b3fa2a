"""The CLI as a process for the output, backfill and CLI tests: a demo node's dump over a fixed
past window, the command run with a deadline, its log lines by level.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from exporter.base.times import iso
from exporter.commands.demo import write_dumps

from support.tools import REPO

SECOND = 1_000_000
# a past half hour of the demo's node0 (well behind any clock these tests run under)
SINCE_US = 1_790_000_000 * SECOND
UNTIL_US = SINCE_US + 1800 * SECOND
WINDOW = ("--since", iso(SINCE_US), "--until", iso(UNTIL_US))
CLI_TIMEOUT_S = 60.0  # (a hang becomes a failure)


@dataclass(frozen=True)
class Ran:
    """A finished CLI process: its exit code, standard output and standard error."""

    code: int
    out: str
    err: str

    def lines(self, level: str) -> list[str]:
        """Its log lines at `level` (ERROR, WARNING, INFO)."""
        return [line for line in self.err.splitlines() if f" {level} " in line]


def cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = CLI_TIMEOUT_S) -> Ran:
    """`python -m exporter ARGS` as its own process, killed if it outlives `timeout`."""
    done = subprocess.run(
        [sys.executable, "-m", "exporter", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def node_dump(directory: Path) -> tuple[str, str]:
    """The demo's node0 over [SINCE_US, UNTIL_US) as a dump in `directory`: `--input`'s
    argument pair."""
    paths = write_dumps(directory, 1, SINCE_US, UNTIL_US)
    return "--input", f"node0={paths['node0']}"


def kind_of(path: Path) -> str:
    """What is at `path`, not following a link: link, fifo, char, block, file, dir, none."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "none"
    kinds = (
        (stat.S_ISLNK, "link"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISCHR, "char"),
        (stat.S_ISBLK, "block"),
        (stat.S_ISREG, "file"),
        (stat.S_ISDIR, "dir"),
    )
    return next(name for test, name in kinds if test(mode))


def temporaries(directory: Path) -> list[str]:
    """Files a write left behind in `directory` (its temporary names)."""
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))
