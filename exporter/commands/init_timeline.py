"""`report --init-timeline`: a vllm-omni init timeline's phase table, stage spans and timeouts.

It reads only its files (a dump, a run directory, or both), no journal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from exporter.commands.output import put
from exporter.startup import tables
from exporter.startup import vllm as inittimeline

log = logging.getLogger(__name__)


def main(paths: Sequence[Path], factor: float, fmt: str, output: Path | None) -> int:
    """The merged timeline of `paths` as text or JSON (`fmt`), to `output` or standard output:
    0, or 1 when the files cannot be read or the output written."""
    try:
        loaded = inittimeline.load(paths)
    except inittimeline.InitTimelineError as e:
        log.error("%s", e)
        return 1
    for why in loaded.skipped:
        log.warning("skipped a malformed record: %s", why)
    now = time.time()
    t = loaded.timeline
    if fmt == "json":
        text = tables.timeline_json(t, factor, now, loaded.skipped)
    else:
        text = tables.timeline_text(t, factor, now, loaded.skipped)
    return put(text, output)
