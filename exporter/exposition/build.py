"""The exporter's build as smllm_exporter_build_info labels it: version, revision, Python, compiled.

The git commit the exporter was built from is this environment variable, else the `REVISION`
file in the package (written at install), else "unknown".
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from exporter.compiled import switch

REVISION_ENV = "SMLLM_EXPORTER_REVISION"
REVISION_FILE = Path(__file__).parent.parent / "REVISION"
REVISION_CHARS = 64  # of the first line: a commit id, or a `git describe`
# smllm_exporter_build_info's label names, as `build_info` gives them
BUILD_LABELS = ("compiled", "python", "revision", "version")


def revision() -> str:
    """The git commit the exporter was built from, or "unknown"."""
    value = os.environ.get(REVISION_ENV, "").strip()
    if not value:
        try:
            value = REVISION_FILE.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            value = ""
    value = value.splitlines()[0].strip()[:REVISION_CHARS] if value else ""
    return value or "unknown"


def build_info(version: str) -> dict[str, str]:
    """smllm_exporter_build_info's labels, by name: the exporter's version, its git revision
    (or "unknown"), the Python version, and "true" when the compiled fast paths are on."""
    compiled = switch.speedups is not None and switch.accounting is not None
    return {
        "compiled": "true" if compiled else "false",
        "python": platform.python_version(),
        "revision": revision(),
        "version": version,
    }
