"""The backfill (`report --format openmetrics`): refused before it starts, or written to files.

A backfill writes `--output FILE`, or one file a promtool block (`report.openmetrics.BLOCK_S`)
into `--output-dir DIR`. It is refused when both or neither are given, when the directory holds
another backfill's files (promtool would take them all), when `--until` is ahead of now, and
when it would write too much (`openmetrics.too_big`); an `--until` within the hours Prometheus's
head block holds is warned of.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from exporter import __version__
from exporter.accounting.settings import Settings
from exporter.base import outfile
from exporter.base.times import SECOND, iso
from exporter.commands.output import why
from exporter.report import openmetrics

log = logging.getLogger(__name__)

HEAD_HOURS = 3  # what Prometheus's head block holds: promtool's blocks must not overlap it
PART_FILES = "smllm-*.om"  # a backfill's files in --output-dir, one a part


def part_file(part: int) -> str:
    """The name of part `part`'s file in --output-dir (matched by PART_FILES)."""
    return f"smllm-{part:05d}.om"


def refusal(
    nodes: Sequence[str],
    s: Settings,
    since_us: int,
    until_us: int,
    step_us: int,
    output: Path | None,
    directory: Path | None,
) -> str:
    """Why the backfill asked for is refused (before anything is read or written), or "";
    warns of an --until within the head block's hours."""
    if output is not None and directory is not None:
        return "give --output FILE or --output-dir DIR, not both"
    if output is None and directory is None:
        return "--format openmetrics writes files: give --output FILE or --output-dir DIR"
    if directory is not None and any(directory.glob(PART_FILES)):
        return (
            f"{outfile.shown(directory)} holds the files of another backfill "
            f"({PART_FILES}): remove them or give another directory (promtool would take them all)"
        )
    now_us = int(time.time() * SECOND)
    if until_us > now_us + s.clock_allowance_us:
        return (
            f"--until {iso(until_us)} is ahead of now ({iso(now_us)}): a backfill holds what "
            "the journals hold, up to now at the latest (samples ahead of now would stand for "
            "what has not happened)"
        )
    size = openmetrics.estimate(nodes, s, since_us, until_us, step_us)
    too_big = openmetrics.too_big(size, outfile.room(output or directory))
    if too_big:
        return too_big
    if until_us > now_us - HEAD_HOURS * 3600 * SECOND:
        log.warning(
            "--until is within %d hours of now: blocks there overlap Prometheus's head block, "
            "and promtool's blocks must not (leave the last %d hours to scraping)",
            HEAD_HOURS,
            HEAD_HOURS,
        )
    return ""


def write(replay: openmetrics.Replay, output: Path | None, directory: Path | None) -> int:
    """The replay's samples into `output`, or one file a part into `directory`: 0, or 1 when
    they cannot be written."""
    target = output if directory is None else directory
    assert target is not None
    try:
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            files = openmetrics.write(
                replay.snapshots(),
                lambda part: directory / part_file(part),
                __version__,
                openmetrics.BLOCK_S,
            )
        else:
            files = openmetrics.write(replay.snapshots(), lambda _: target, __version__)
    except OSError as e:
        log.error("cannot write the backfill to %s", why(target, e))
        return 1
    shown = ", ".join(outfile.shown(f) for f in files[:3])
    log.info("wrote %d file(s): %s", len(files), shown)
    return 0
