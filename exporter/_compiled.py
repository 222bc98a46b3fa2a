"""The one switch to the compiled fast paths: `speedups` is `exporter._speedups`, or None.

None when the extension was not built (no C compiler at install time) or when the environment
sets SMLLM_PURE_PYTHON=1, which runs every fast path's pure-Python reference instead (the test
command runs the parser, line-layer and speedups tests once more that way). Read once, at
import: nothing patches it later.
"""

from __future__ import annotations

import os
from types import ModuleType

ENV = "SMLLM_PURE_PYTHON"


def _load() -> ModuleType | None:
    if os.environ.get(ENV, "") not in ("", "0"):
        return None
    try:
        from exporter import _speedups
    except ImportError:  # pragma: no cover - CI insists on the compiled module
        return None
    return _speedups


speedups = _load()
PURE = speedups is None
