"""journalctl's text forms (`-o short-iso-precise`, `-o json`) -> LogLines, one line at a time.

The one decoder of journal entries: the file source, the SSH source and the report all reach
it through the line layer (`sources/lines.py`), which decodes the usual shapes in compiled code
first and leaves the rest here. JSON comes in the usual fast shape (one flat object, string
fields, a decimal time and PID), decoded by one scan, or in any other shape json allows, with a
MESSAGE that is not UTF-8 as an array of byte values. A time outside `times.fits` is an error.
"""

from __future__ import annotations

import json
import re

from exporter.base.records import LogLine
from exporter.base.times import MAX_TIME_US, fits, parse_time_us

# `2026-09-22T07:31:04.127792+0000 host sm-llm[1234]: message` (the offset may be `+00:00`)
_SHORT = re.compile(
    rb"(\d{4}-\d\d-\d\dT\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?([+-]\d\d:?\d\d|Z)?"  # time
    rb" \S+ [^\[\s]+?(?:\[(\d+)\])?: ?"  # host identifier[pid]:
)
_FRACTION = (0, 100_000, 10_000, 1_000, 100, 10, 1)  # microseconds per unit of n digits
_MAX_TIME_DIGITS = len(str(MAX_TIME_US))
_raw_decode = json.JSONDecoder().raw_decode


class EntryError(ValueError):
    """A line that is neither a journal JSON entry nor short-iso-precise text."""


class EntryDecoder:
    """Decodes one node's lines; remembers the last date-hour it converted."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._hour_key = b""  # the date-hour and offset converted last, and its epoch seconds
        self._hour_s = 0

    def decode(self, raw: bytes) -> LogLine | None:
        """One line (without its newline) -> LogLine; None for journalctl's `-- ... --` notes and
        blank or continuation lines; EntryError for anything else, never another exception."""
        try:
            if raw[:1] == b"{":
                return plain_json(self.node, raw) or self._json(raw)
            if not raw.strip() or raw[:3] == b"-- " or raw[:1] in (b" ", b"\t"):
                return None
            return self._short(raw)
        except EntryError:
            raise
        except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as e:
            # what no journalctl writes: a number of 5,000 digits, 1e999, JSON nested deep
            raise EntryError(f"does not parse ({type(e).__name__}: {str(e)[:80]})") from None

    def _json(self, raw: bytes) -> LogLine:
        try:
            rec = json.loads(raw)
        except ValueError as e:
            raise EntryError(f"not a journal JSON entry ({e})") from None
        if not isinstance(rec, dict):
            raise EntryError("not a journal JSON entry")
        t = rec.get("__REALTIME_TIMESTAMP")
        if not (isinstance(t, str) and t.isascii() and t.isdigit()):  # as journalctl writes it
            raise EntryError(f"not a journal JSON entry (__REALTIME_TIMESTAMP: {str(t)[:40]!r})")
        time_us = int(t)
        if not fits(time_us):
            raise EntryError(f"journal time out of range: {str(time_us)[:40]}")
        pid = rec.get("_PID") or rec.get("SYSLOG_PID") or 0
        cursor = str(rec.get("__CURSOR", ""))
        return LogLine(self.node, time_us, cursor, _int(pid), field_text(rec.get("MESSAGE")))

    def _short(self, raw: bytes) -> LogLine:
        m = _SHORT.match(raw)
        if m is None:
            raise EntryError("neither journal JSON nor short-iso-precise")
        hour, minute, second, frac, offset, pid = m.groups()
        key = hour + offset if offset else hour
        if key != self._hour_key:  # lines come in time order: one conversion an hour
            text = (hour + b":00:00" + (offset or b"")).decode()
            try:
                hour_us = parse_time_us(text)
            except ValueError as e:
                raise EntryError(f"bad time {text!r}: {e}") from None
            self._hour_key, self._hour_s = key, hour_us // 1_000_000
        mm, ss = int(minute), int(second)
        if mm > 59 or ss > 60:
            raise EntryError(f"bad time {m.group()[:19]!r}")
        us = (self._hour_s + mm * 60 + ss) * 1_000_000
        if frac:
            us += int(frac) * _FRACTION[len(frac)]
        if not fits(us):  # (a leap second at the very end of 9999)
            raise EntryError(f"journal time out of range: {m.group()[:32]!r}")
        message = raw[m.end() :].decode("utf-8", "replace")
        if message[-1:] == "\r":
            message = message[:-1]
        return LogLine(self.node, us, "", int(pid) if pid and len(pid) <= 10 else 0, message)


def plain_json(node: str, raw: bytes) -> LogLine | None:
    """A journal JSON entry of the usual shape (one flat object on the line, string fields, a
    decimal time in range and PID) -> its LogLine, as `EntryDecoder` makes it; None otherwise."""
    try:
        text = raw.decode()
        rec, end = _raw_decode(text)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested beyond reason
        return None
    if end != len(text) or type(rec) is not dict:
        return None
    t, pid, cursor, message = (
        rec.get("__REALTIME_TIMESTAMP"),
        rec.get("_PID"),
        rec.get("__CURSOR"),
        rec.get("MESSAGE"),
    )
    if (
        type(t) is not str
        or type(pid) is not str
        or type(cursor) is not str
        or type(message) is not str
        or not (t.isascii() and t.isdigit() and pid.isascii() and pid.isdigit())
        or len(t) > _MAX_TIME_DIGITS
        or len(pid) > 10
    ):
        return None
    time_us = int(t)
    if time_us > MAX_TIME_US:
        return None
    return LogLine(node, time_us, cursor, int(pid), message)


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
        text = str(value)
        return int(text) if len(text) <= 10 else 0
    except ValueError:
        return 0


def cursor_time_us(cursor: str) -> int | None:
    """The realtime an entry's cursor names (`t=` field, hex microseconds), if it fits."""
    for part in cursor.split(";"):
        key, _, value = part.partition("=")
        if key == "t":
            try:
                us = int(value[:16], 16)
            except ValueError:
                return None
            return us if fits(us) else None
    return None
