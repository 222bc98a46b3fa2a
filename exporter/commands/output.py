"""Writes a command's text to standard output or to the file `--output` names."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from exporter.base import outfile

log = logging.getLogger(__name__)


def put(text: str, output: Path | None) -> int:
    """The text to standard output, or to `output` (outfile.opened): 0, or 1 when it cannot be
    written."""
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        outfile.write_text(output, text)
    except OSError as e:
        log.error("cannot write %s", why(output, e))
        return 1
    log.info("wrote %s (%d bytes)", outfile.shown(output), len(text.encode()))
    return 0


def why(path: Path, e: OSError) -> str:
    """An OSError of writing `path`: `PATH: why`, one line (an OutputError is that already)."""
    if isinstance(e, outfile.OutputError):
        return str(e)
    return f"{outfile.shown(path)}: {e.strerror or e}"
