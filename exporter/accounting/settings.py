"""What the config says of the accounting and of the parsers that feed it: one frozen value.

`exporter.ingest.settings.settings` builds it from a config (the daemon's, the report's and the
backfill's alike); the defaults are the config schema's (`Settings` has none). Two of them are
defined here, beside what they mean, for the schema to take: the histograms' buckets and the
clock allowance.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.base.kinds import Kinds
from exporter.base.times import SECOND

# seconds: from a fast node's 50 ms (a real 3-slot run's requests all took under a second),
# through the seed's 2-15 s reconcile and 20-60 s extraction calls, to half an hour
DEFAULT_BUCKETS_S: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0)
DEFAULT_BUCKETS_S += (60.0, 120.0, 300.0, 600.0, 1800.0)
# seconds: a request's prompt evaluation (prefill) and its generation (decode), from a short
# prompt's few milliseconds on a GPU to a long generation's ten minutes
DEFAULT_PHASE_BUCKETS_S: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
DEFAULT_PHASE_BUCKETS_S += (2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# A node's journal time further ahead of the exporter's now than this is clock skew (a node's
# clock, or a corrupted entry), shown as such.
CLOCK_ALLOWANCE_US = 5 * SECOND


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting the accounting follows (and the parsers' slot count)."""

    kinds: Kinds  # the rules that name a timed request's kind
    max_request_us: int  # the longest a request may run unseen (max_request_seconds)
    stall_us: int  # a node down or without progress this long stops holding the watermark
    buckets_s: tuple[float, ...]  # the duration histogram's upper bounds, in seconds
    slots: int  # a node's slot count until its llama-server logs its own (the parsers')
    clock_allowance_us: int  # a journal time further ahead of now is clock skew
    start_timeout_us: int  # the unit's TimeoutStartSec
    slow_start_share: float  # the share of it past which a start-up is slow
    prompt_buckets_s: tuple[float, ...]  # the prompt-eval time histogram's upper bounds
    generation_buckets_s: tuple[float, ...]  # the generation time histogram's
    histograms_per_node: bool = True  # the histograms of each node and kind, else of each kind
