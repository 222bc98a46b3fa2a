"""Checks of decoded JSON values' shapes, each naming where a value does not fit.

A `Check` takes a value and where it is (a dotted path, for the message) and raises ValueError
when the value does not fit: of another type (a JSON number that is no integer, a bool where an
integer goes), out of range, a list of another length, an object with other keys. They combine:
`list_of(row(INT, TEXT))` is a list of [integer, string] pairs. The checkpoint's schema is made
of them (exporter/checkpoint/codec.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[Any, str], None]


def refusal(value: Any, where: str, why: str) -> ValueError:
    """The error for `value` at `where` (shown cut short)."""
    return ValueError(f"{where or 'the document'} is {json.dumps(value)[:40]}: {why}")


def int_in(lo: int, hi: int, why: str) -> Check:
    """An integer from `lo` to `hi`."""

    def checked(value: Any, where: str) -> None:
        if type(value) is not int or not lo <= value <= hi:
            raise refusal(value, where, why)

    return checked


def of_type(kind: type, why: str) -> Check:
    """A value of exactly this type (an int is no bool, a bool no int)."""

    def checked(value: Any, where: str) -> None:
        if type(value) is not kind:
            raise refusal(value, where, why)

    return checked


INT = of_type(int, "not an integer")
FLAG = of_type(bool, "not true or false")
TEXT = of_type(str, "not a string")


def optional(what: Check) -> Check:
    """null, or what `what` takes."""

    def checked(value: Any, where: str) -> None:
        if value is not None:
            what(value, where)

    return checked


def one_of(*allowed: int | str) -> Check:
    """One of these integers or strings."""

    def checked(value: Any, where: str) -> None:
        if type(value) not in (int, str) or value not in allowed:
            raise refusal(value, where, f"not one of {', '.join(map(str, allowed))}")

    return checked


def list_of(what: Check) -> Check:
    """A list, each item what `what` takes."""

    def checked(value: Any, where: str) -> None:
        if type(value) is not list:
            raise refusal(value, where, "not a list")
        for i, item in enumerate(value):
            what(item, f"{where}[{i}]")

    return checked


def row(*items: Check) -> Check:
    """A list of exactly these items, in order."""

    def checked(value: Any, where: str) -> None:
        if type(value) is not list or len(value) != len(items):
            raise refusal(value, where, f"not a list of {len(items)}")
        for i, (item, what) in enumerate(zip(value, items, strict=True)):
            what(item, f"{where}[{i}]")

    return checked


def by_length(rows: Mapping[int, Check]) -> Check:
    """A list taken by the check of its length (rows of several forms: `{3: row(...), 4: ...}`)."""

    def checked(value: Any, where: str) -> None:
        if type(value) is not list or len(value) not in rows:
            lengths = " or ".join(map(str, rows))
            raise refusal(value, where, f"not a list of {lengths}")
        rows[len(value)](value, where)

    return checked


def map_of(what: Check) -> Check:
    """An object of any keys, each value what `what` takes."""

    def checked(value: Any, where: str) -> None:
        if type(value) is not dict:
            raise refusal(value, where, "not an object")
        for key, item in value.items():
            what(item, f"{where}.{key}")

    return checked


def record(fields: Mapping[str, Check], optional: Mapping[str, Check] | None = None) -> Check:
    """An object of exactly these keys (and any of the `optional` ones), each value what its
    check takes."""
    extras = dict(optional or {})

    def checked(value: Any, where: str) -> None:
        if type(value) is not dict:
            raise refusal(value, where, "not an object")
        if value.keys() - extras.keys() != fields.keys():
            missing = sorted(fields.keys() - value)
            extra = sorted(map(str, value.keys() - fields.keys() - extras.keys()))
            what = [f"no {', '.join(missing)}"] if missing else []
            what += [f"unknown {', '.join(extra)}"] if extra else []
            raise ValueError(f"{where or 'the document'}: {'; '.join(what)}")
        for key, each in (*fields.items(), *extras.items()):
            if key in value:
                each(value[key], f"{where}.{key}" if where else key)

    return checked
