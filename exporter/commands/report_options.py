"""The `report` command's options and formats, which the command line reads.

Apart from `report.py`, so that the command line builds its options without loading the report
(a `run` starts sooner)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FORMATS = ("text", "json", "html", "openmetrics")
START_UP_FORMATS = ("text", "json")  # what --startups and --init-timeline print


@dataclass(frozen=True)
class ReportOptions:
    """What `report` was asked for: its command line, parsed (times in microseconds)."""

    since_us: int | None
    until_us: int | None
    startups: bool  # the llama-server start-ups that began in the window instead
    init_timeline: tuple[Path, ...]  # a vllm-omni init timeline's files instead of a window
    factor: float  # a suggested timeout's headroom over the longest span
    inputs: tuple[tuple[str, Path], ...]  # (node, dump) instead of the config's nodes
    config: Path | None
    split_tokens: int | None  # two kinds split at this many tokens, over the config's kinds
    max_request_seconds: int | None  # over the config's
    format: str  # one of FORMATS
    step_us: int  # openmetrics: a sample every step
    output_dir: Path | None  # openmetrics: one file a promtool block
    output: Path | None  # instead of standard output
