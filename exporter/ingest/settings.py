"""The accounting's settings from a config: the one place the daemon, report and backfill get them.

The report's own options (`report --split-tokens`, `--max-request-seconds`) go over the
config's values; every default is the config schema's.
"""

from __future__ import annotations

from exporter.accounting.settings import Settings
from exporter.base.kinds import Kinds
from exporter.base.times import SECOND
from exporter.config.schema import Config


def settings(cfg: Config, kinds: Kinds | None = None, max_request_s: int | None = None) -> Settings:
    """`cfg`'s settings; `kinds` and `max_request_s` (a report's options, when given and not 0)
    over its own."""
    return Settings(
        kinds=kinds if kinds is not None else cfg.kinds,
        max_request_us=(max_request_s or cfg.max_request_seconds) * SECOND,
        stall_us=cfg.stall_seconds * SECOND,
        buckets_s=cfg.duration_buckets,
        prompt_buckets_s=cfg.prompt_duration_buckets,
        generation_buckets_s=cfg.generation_duration_buckets,
        histograms_per_node=cfg.histograms_per_node,
        slots=cfg.slots,
        clock_allowance_us=cfg.clock_allowance_seconds * SECOND,
        start_timeout_us=cfg.start_timeout_seconds * SECOND,
        slow_start_share=cfg.slow_start_share,
    )
