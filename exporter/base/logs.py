"""Log set-up: syslog priorities and no timestamps under journald, ISO 8601 UTC times elsewhere.

Under systemd the service's standard error is a journal stream (`JOURNAL_STREAM` names its
device and inode): journald stamps each line itself and reads a `<N>` prefix as the line's
priority, so `journalctl -p warning` filters. On a terminal or in a file each line carries its
own time, in ISO 8601 UTC. asyncssh (whose INFO lines outnumbered the exporter's 7 to 1) logs
at WARNING unless the level is debug.

Every record is one line: a character that could break it or drive a terminal (C0 controls,
newlines and tabs included, DEL, C1, any other unprintable one) is escaped as Python writes it
(`\\n`, `\\x1b`, `\\u2028`), wherever the text came from (a model name in a journal, a remote
command's stderr), so no line read can forge a log line or a journald entry. Only a record
logged with `extra=LINES` keeps its line breaks (the program's own, each line still escaped),
and a traceback keeps its lines, its exceptions' messages each on one.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import traceback
from collections.abc import Iterator
from types import TracebackType
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
# a record's `extra`: its line breaks are the program's own (a list of problems), kept
LINES = {"lines": True}
MARGIN = r"(?: *\| )?"  # what a traceback puts before a line of an exception's message
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]


def escape(text: str) -> str:
    """`text` with every character that can break a line or drive a terminal (whatever
    `str.isprintable` refuses: C0, DEL, C1, line separators, bidi controls) escaped as in a
    Python string literal: `\\n`, `\\x1b`, `\\x9b`, `\\u2028`."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def escape_lines(text: str) -> str:
    """`text` escaped line by line: its line breaks kept, nothing else that is unprintable."""
    return "\n".join(escape(line) for line in text.split("\n"))


def priority(levelno: int) -> int:
    """The syslog priority of a logging level (a custom level: the next standard one up)."""
    for level, prio in sorted(PRIORITIES.items()):
        if levelno <= level:
            return prio
    return PRIORITIES[logging.CRITICAL]


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """`exc`, its causes and contexts, and the members of exception groups, each once."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__]
        if isinstance(e, BaseExceptionGroup):
            todo += e.exceptions


def traceback_text(text: str, exc: BaseException | None) -> str:
    """A formatted traceback of `exc` made safe: each exception's message (with its notes) on
    one line, however many lines it had, and every line escaped."""
    for e in _chain(exc):
        said = "".join(traceback.format_exception_only(type(e), e)).rstrip("\n")
        lines = said.splitlines(keepends=True)  # (where traceback breaks them, \r and \x85 too)
        if len(lines) > 1:  # (in an exception group, each line behind the group's margin)
            found = re.escape(lines[0]) + "".join(MARGIN + re.escape(line) for line in lines[1:])
            text = re.sub(found, escape(said).replace("\\", "\\\\"), text)
    return escape_lines(text)


class EscapingFormatter(logging.Formatter):
    """A formatter whose every record is one escaped line (one logged with `extra=LINES`:
    its own lines, each escaped); tracebacks and stacks keep their lines, escaped."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(record)
        return escape_lines(text) if getattr(record, "lines", False) else escape(text)

    def formatException(self, ei: ExcInfo) -> str:
        return traceback_text(super().formatException(ei), ei[1])

    def formatStack(self, stack_info: str) -> str:
        return escape_lines(super().formatStack(stack_info))


class JournalFormatter(EscapingFormatter):
    """`<N>logger: message`, every line of a multi-line message with its own prefix (journald
    makes each line an entry)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        prefix = f"<{priority(record.levelno)}>"
        return "\n".join(prefix + line for line in text.split("\n"))


class TimeFormatter(EscapingFormatter):
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
