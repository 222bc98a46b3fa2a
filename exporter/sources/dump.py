"""Journal dump lines (`journalctl -o json` or `-o short-iso-precise`, per line) to LogLines."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from exporter.logline import LogLine

# `2026-09-22T07:31:04.127792+0000 host sm-llm[1234]: message` (the offset may be `+00:00`)
_SHORT = re.compile(
    rb"(\d{4}-\d\d-\d\dT\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?([+-]\d\d:?\d\d|Z)?"  # time
    rb" \S+ [^\[\s]+?(?:\[(\d+)\])?: ?"  # host identifier[pid]:
)


_FRACTION = (0, 100_000, 10_000, 1_000, 100, 10, 1)  # microseconds per unit of n digits


class DumpLineError(ValueError):
    """A line of a dump that is neither journal JSON nor short-iso-precise text."""


class LineDecoder:
    """Decodes one node's dump lines; remembers the last date-hour it converted."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._hour_key = b""  # the date-hour and offset converted last, and its epoch seconds
        self._hour_s = 0

    def decode(self, raw: bytes) -> LogLine | None:
        """One line (without its newline) -> LogLine; None for journalctl's `-- ... --` notes and
        blank or continuation lines; DumpLineError for anything else that does not parse."""
        try:
            if raw[:1] == b"{":
                return self._json(raw)
            if not raw.strip() or raw[:3] == b"-- " or raw[:1] in (b" ", b"\t"):
                return None
            return self._short(raw)
        except (ValueError, TypeError, OverflowError, RecursionError) as e:
            if isinstance(e, DumpLineError):
                raise
            # what no journalctl writes: a number of 5,000 digits, 1e999, JSON nested deep
            raise DumpLineError(f"does not parse ({type(e).__name__}: {str(e)[:80]})") from None

    def _json(self, raw: bytes) -> LogLine:
        try:
            rec = json.loads(raw)
            time_us = int(rec["__REALTIME_TIMESTAMP"])
        except (ValueError, KeyError, TypeError) as e:
            raise DumpLineError(f"not a journal JSON entry ({e})") from None
        if not isinstance(rec, dict):
            raise DumpLineError("not a journal JSON entry")
        pid = rec.get("_PID") or rec.get("SYSLOG_PID") or 0
        return LogLine(
            self.node,
            time_us,
            str(rec.get("__CURSOR", "")),
            _int(pid),
            field_text(rec.get("MESSAGE")),
        )

    def _short(self, raw: bytes) -> LogLine:
        m = _SHORT.match(raw)
        if m is None:
            raise DumpLineError("neither journal JSON nor short-iso-precise")
        hour, minute, second, frac, offset, pid = m.groups()
        key = hour + offset if offset else hour
        if key != self._hour_key:  # lines come in time order: one conversion an hour
            text = (hour + b":00:00" + (offset or b"")).decode()
            try:
                hour_us = parse_time_us(text)
            except ValueError as e:
                raise DumpLineError(f"bad time {text!r}: {e}") from None
            self._hour_key, self._hour_s = key, hour_us // 1_000_000
        mm, ss = int(minute), int(second)
        if mm > 59 or ss > 60:
            raise DumpLineError(f"bad time {m.group()[:19]!r}")
        us = (self._hour_s + mm * 60 + ss) * 1_000_000
        if frac:
            us += int(frac) * _FRACTION[len(frac)]
        message = raw[m.end() :].decode("utf-8", "replace")
        if message[-1:] == "\r":
            message = message[:-1]
        return LogLine(self.node, us, "", int(pid) if pid else 0, message)


def field_text(value: object) -> str:
    """A journal field as JSON gives it: a string, an array of byte values (not UTF-8), or null."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        try:
            return bytes(value).decode("utf-8", "replace")
        except (ValueError, TypeError):
            return ""
    return ""


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def parse_time_us(text: str) -> int:
    """ISO 8601 -> microseconds since the epoch; UTC when the text has no offset."""
    t = datetime.fromisoformat(text.strip())
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    delta = t - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def read_dump(path: Path, node: str) -> Iterator[LogLine | DumpLineError]:
    """Every entry of a dump file in order; a line that does not parse comes as its error,
    naming the file and line number, so the caller can count it and go on."""
    decoder = LineDecoder(node)
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = decoder.decode(raw.rstrip(b"\n"))
            except DumpLineError as e:
                yield DumpLineError(f"{path}:{number}: {e}")
                continue
            if line is not None:
                yield line
