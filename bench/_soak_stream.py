"""bench/soak.py's lines: the real workload as `journalctl -o short-iso-precise` prints it.

`_workload.real_workload` in UTC, written to a file with the places a chunk may end, and
checked against journalctl's own output of the same entries.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from _common import JOURNAL_REMOTE
from _dumps import write_dump, write_journal
from _workload import NODE, PID, SYSTEMD_PID, Entry, real_workload

from exporter.base.times import SECOND

CUT_EVERY = 1_000  # a chunk may end at the first launch line after every CUT_EVERY lines
FORMAT_CHECK_LINES = 2_000
IDLE = "all slots are idle"
LAUNCH = "launch_slot_"
SOURCE_LAG_US = 37  # PID 1's entries carry _SOURCE_REALTIME_TIMESTAMP, which journalctl prints
REPORT_TENTHS = 10  # generating: a progress line after each tenth of the lines
BUFFERED = 16_384  # lines gathered before a write


class ShortIso:
    """Entries as `journalctl -o short-iso-precise` prints them in UTC, times moved by
    `shift_us` (a whole number of seconds)."""

    def __init__(self, shift_us: int = 0) -> None:
        self.shift_us = shift_us
        self._second = -1
        self._stamp = ""
        self._who = {
            PID: f"+0000 {NODE} sm-llm[{PID}]: ",
            SYSTEMD_PID: f"+0000 {NODE} systemd[{SYSTEMD_PID}]: ",
        }

    def time_us(self, e: Entry) -> int:
        """The time journalctl prints for `e`."""
        return e.time_us + self.shift_us - (SOURCE_LAG_US if e.pid == SYSTEMD_PID else 0)

    def line(self, e: Entry) -> str:
        t = self.time_us(e)
        second = t // SECOND
        if second != self._second:
            self._second = second
            self._stamp = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        return f"{self._stamp}{t % SECOND:06d}{self._who[e.pid]}{e.message}\n"


@dataclass
class Stream:
    """The generated lines, in a file, with where a chunk may end and what they hold."""

    path: Path
    lines: int = 0
    size: int = 0
    first_us: int = 0  # journal time of the first line and the last
    last_us: int = 0
    requests: int = 0
    tokens: int = 0
    request_us: int = 0
    cut_lines: array[int] = field(default_factory=lambda: array("q"))  # lines up to a cut
    cut_bytes: array[int] = field(default_factory=lambda: array("q"))  # bytes up to a cut


def write_stream(
    path: Path, lines: int, seed: int, shift_us: int, log: Callable[[str], None]
) -> Stream:
    """`lines` lines of the real workload into `path`, and on to the next `all slots are idle`
    line: the file the appender copies from."""
    s = Stream(path)
    fmt = ShortIso(shift_us)
    gen = real_workload(random.Random(f"{seed}:real"))
    buf: list[str] = []
    next_cut = CUT_EVERY
    report_every = max(lines // REPORT_TENTHS, 1)
    with path.open("w", encoding="ascii") as out:
        for e in gen:
            text = fmt.line(e)
            buf.append(text)
            s.lines += 1
            s.size += len(text)  # (ASCII: one byte a character; the encoding insists)
            if e.request is not None:
                s.requests += 1
                s.request_us += e.request[0] * 10
                s.tokens += e.request[1]
            message = e.message
            if s.lines >= lines and IDLE in message:
                break
            if s.lines >= next_cut and LAUNCH in message:
                s.cut_lines.append(s.lines)
                s.cut_bytes.append(s.size)
                next_cut = s.lines + CUT_EVERY
            if len(buf) >= BUFFERED:
                out.write("".join(buf))
                buf.clear()
            if s.lines % report_every == 0:
                log(f"  generated {s.lines:,} lines")
            if s.lines == 1:
                s.first_us = fmt.time_us(e)
        out.write("".join(buf))
        s.last_us = fmt.time_us(e)
    s.cut_lines.append(s.lines)
    s.cut_bytes.append(s.size)
    if path.stat().st_size != s.size:
        raise RuntimeError(f"{path}: {path.stat().st_size:,} bytes written, {s.size:,} counted")
    return s


def check_format(directory: Path, seed: int) -> str:
    """Our lines against journalctl's for the first FORMAT_CHECK_LINES entries (through
    systemd-journal-remote, as `_dumps` writes them): what was found."""
    if not JOURNAL_REMOTE.exists():
        return f"not checked against journalctl ({JOURNAL_REMOTE} missing)"
    j = write_journal("real", directory / "journal", FORMAT_CHECK_LINES, seed)
    dump = write_dump(j, "short-iso-precise", directory / "journalctl.log")
    theirs = dump.path.read_text().splitlines(keepends=True)
    fmt = ShortIso()
    gen = real_workload(random.Random(f"{seed}:real"))
    ours = [fmt.line(next(gen)) for _ in range(FORMAT_CHECK_LINES)]
    for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a != b:
            raise RuntimeError(
                f"line {k + 1} differs from journalctl's:\n  ours   {a!r}\n  theirs {b!r}"
            )
    return f"the first {FORMAT_CHECK_LINES:,} lines equal journalctl's own"
