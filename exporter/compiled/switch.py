"""The one switch to the compiled fast paths: each C module, once it accepts the Python layouts.

`speedups` is `exporter.compiled._speedups` (reading and parsing), `accounting` is
`exporter.compiled._accounting` (Accounting.add_all and the sweep), each or None. None when the
extension was not built (no C compiler at install time), when the environment sets
SMLLM_PURE_PYTHON=1, or when the module refuses the layouts handed to it here: then every caller
runs the fast path's pure-Python reference (the test command runs the parser, line-layer,
accounting and speedups tests once more that way). Read once, at import: nothing patches it later.

The contract between Python and C is checked, not assumed. The C code builds and reads records
as tuples by position, and reads some objects' attributes by name. At import each module gets
the layouts of what it touches (`layouts_of_speedups`, `layouts_of_accounting`: for each record
type its `_fields`, for each other object the attribute names it reads) and compares them with
those it was built for. A module built from other sources raises, and the switch falls back to
the Python references with a LayoutWarning.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

from exporter.accounting.contract import (
    ACCOUNTING_READS,
    KIND_READS,
    NODE_READS,
    RECORD_TYPES_FIELDS,
)
from exporter.base.records import RECORD_FIELDS
from exporter.parse.contract import BLOCK_FIELDS, FEED_TYPES_FIELDS, PARSER_READS
from exporter.parse.tokens import TOKEN_FIELDS, TOKEN_KINDS

ENV = "SMLLM_PURE_PYTHON"

Layouts = dict[str, tuple[str, ...]]


class LayoutWarning(RuntimeWarning):
    """A compiled module refused the Python layouts: the pure-Python references run instead."""


def layouts_of_speedups() -> Layouts:
    """What `_speedups` builds and reads: the records by position (LogLine, Interval, Event, a
    Token and its kind numbers, the FeedTypes `feed` takes), a Block and a Parser by attribute
    name."""
    return {
        **RECORD_FIELDS,  # LogLine, Interval, Event
        "Token": TOKEN_FIELDS,
        "TokenKind": TOKEN_KINDS,
        "FeedTypes": FEED_TYPES_FIELDS,
        "Block": BLOCK_FIELDS,
        "Parser": PARSER_READS,
    }


def layouts_of_accounting() -> Layouts:
    """What `_accounting` builds and reads: the records by position (Interval, Event, the
    RecordTypes `add_all` takes), an Accounting, a NodeState and a KindCounters by attribute
    name."""
    return {
        "Interval": RECORD_FIELDS["Interval"],
        "Event": RECORD_FIELDS["Event"],
        "RecordTypes": RECORD_TYPES_FIELDS,
        "Accounting": ACCOUNTING_READS,
        "NodeState": NODE_READS,
        "KindCounters": KIND_READS,
    }


def load(name: str, layouts: Layouts) -> ModuleType | None:
    """The compiled module `exporter.compiled.<name>` once it accepts `layouts` (its
    `check_layouts` raises ValueError on a mismatch); None when pure Python is asked for, when
    it was not built, or when it refuses them (with a LayoutWarning)."""
    if os.environ.get(ENV, "") not in ("", "0"):
        return None
    try:
        module = importlib.import_module(f"exporter.compiled.{name}")
    except ImportError:  # pragma: no cover - CI insists on the compiled modules
        return None
    check = getattr(module, "check_layouts", None)
    try:
        if check is not None:
            check(layouts)
        elif layouts:
            raise ValueError("it takes no layouts (built from other sources)")
    except ValueError as e:
        warnings.warn(
            f"exporter.compiled.{name} does not fit this Python code ({e}): running the "
            "pure-Python references instead (rebuild: pip install -e .)",
            LayoutWarning,
            stacklevel=2,
        )
        return None
    return module


speedups = load("_speedups", layouts_of_speedups())
accounting = load("_accounting", layouts_of_accounting())
# The sequences of lines taken as they are (no copy): a tuple, or the line layer's compiled
# Lines (whose LogLines are made only when asked for)
WHOLE_LINES: tuple[type, ...] = (tuple,) if speedups is None else (tuple, speedups.Lines)
