"""Log set-up: syslog priorities and no timestamps under journald, ISO 8601 UTC times elsewhere.

Under systemd the service's standard error is a journal stream (`JOURNAL_STREAM` names its
device and inode): journald stamps each line itself and reads a `<N>` prefix as the line's
priority, so `journalctl -p warning` filters. On a terminal or in a file each line carries its
own time, in ISO 8601 UTC. asyncssh (whose INFO lines outnumbered the exporter's 7 to 1) logs
at WARNING unless the level is debug.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import TextIO

# syslog(3) priorities by logging level (journald reads `<N>` at a line's start)
PRIORITIES = {
    logging.DEBUG: 7,
    logging.INFO: 6,
    logging.WARNING: 4,
    logging.ERROR: 3,
    logging.CRITICAL: 2,
}
QUIET_LIBRARIES = ("asyncssh",)  # WARNING and above unless the level is debug


def priority(levelno: int) -> int:
    """The syslog priority of a logging level (a custom level: the next standard one up)."""
    for level, prio in sorted(PRIORITIES.items()):
        if levelno <= level:
            return prio
    return PRIORITIES[logging.CRITICAL]


class JournalFormatter(logging.Formatter):
    """`<N>logger: message`, every line of a multi-line message with its own prefix (journald
    makes each line an entry)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        prefix = f"<{priority(record.levelno)}>"
        return "\n".join(prefix + line for line in text.split("\n"))


class TimeFormatter(logging.Formatter):
    """`2026-12-01T18:20:00.123Z LEVEL logger: message`: the time in ISO 8601, UTC."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"


def under_journald(stream: TextIO, env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether `stream` is the journal stream systemd gave the service (`JOURNAL_STREAM` is
    `DEVICE:INODE` of it; a child whose stderr was redirected elsewhere inherits the variable,
    so the file itself is compared)."""
    value = env.get("JOURNAL_STREAM", "")
    device, sep, inode = value.partition(":")
    if not sep or not (device.isdigit() and inode.isdigit()):
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):  # (no file behind it: pytest's capture)
        return False
    return (st.st_dev, st.st_ino) == (int(device), int(inode))


def setup(level: str, stream: TextIO | None = None) -> None:
    """The process's logging: one handler on `stream` (standard error), formatted for where it
    goes, at `level` (debug, info, warning, error)."""
    quiet = logging.DEBUG if level.lower() == "debug" else logging.WARNING
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(quiet)
    root = logging.getLogger()
    if root.handlers:  # (set up already, as logging.basicConfig leaves it: a test's capture)
        return
    out = sys.stderr if stream is None else stream
    handler = logging.StreamHandler(out)
    if under_journald(out):
        handler.setFormatter(JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(TimeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level.upper())
