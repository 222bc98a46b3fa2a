"""What a checkpoint's rows hold, in order: its version, a saved node's and a saved kind's counters.

The codec writes and reads rows of this layout, the migrations bring older ones to it, and the
schema checks them.
"""

from __future__ import annotations

VERSION = 10
UNVERSIONED = 1  # the `format` versions 1 to 8 were written under
FIRST_KEPT = 9  # the first version kept in `format`
MAX_COUNT = 2**63 - 1  # (what the compiled sweep and the renderer hold)

# A node's counters as saved, in this order (newest_us and last_end_us are times, the second
# None before the node's first request: see schema.NODE).
NODE_COUNTERS = (
    "newest_us",
    "busy_us",
    "slot_busy_us",
    "last_end_us",
    "entries",
    "aborted",
    "restarts",
    "parse_errors",
    "late",
    "reconnects",
    "gaps",
)
# A kind's counters as saved: these, then the buckets (a list), then the histogram's sum.
KIND_COUNTERS = (
    "requests",
    "request_us",
    "tokens",
    "prompt_tokens",
    "generated_tokens",
    "prompt_us",
    "generation_us",
)
BUCKETS_AT, HISTOGRAM_AT = len(KIND_COUNTERS), len(KIND_COUNTERS) + 1
# (from version 10 on, these follow: the prompt-eval and generation histograms, each its buckets
# and its sum, then the draft tokens, proposed and accepted)
PROMPT_AT, GENERATION_AT, DRAFT_AT = HISTOGRAM_AT + 1, HISTOGRAM_AT + 3, HISTOGRAM_AT + 5
