"""The one switch to the compiled fast paths: `speedups` (reading and parsing) and `accounting`.

`speedups` is `exporter.compiled._speedups`, `accounting` is `exporter.compiled._accounting`
(Accounting.add_all and the sweep), each or None.

None when the extension was not built (no C compiler at install time) or when the environment
sets SMLLM_PURE_PYTHON=1, which runs every fast path's pure-Python reference instead (the test
command runs the parser, line-layer, accounting and speedups tests once more that way). Read
once, at import: nothing patches it later.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

ENV = "SMLLM_PURE_PYTHON"


def _load(name: str) -> ModuleType | None:
    if os.environ.get(ENV, "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(f"exporter.compiled.{name}")
    except ImportError:  # pragma: no cover - CI insists on the compiled modules
        return None


speedups = _load("_speedups")
accounting = _load("_accounting")
PURE = speedups is None
