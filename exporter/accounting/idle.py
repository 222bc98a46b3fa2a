"""The idle alert's rule (SmLlmNodeIdle) in Python: a node idle while the others work.

deploy/prometheus/rules.yml holds the same rule in PromQL; its thresholds are these constants
(a test holds the two to each other), so the status page and the alert never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.base.times import SECOND

IDLE_BELOW = 0.05  # a node busy less than this share of the window is idle
OTHERS_AT_LEAST = 0.5  # while the other known nodes are busy at least this share on average
WINDOW_US = 300 * SECOND  # the window both shares are taken over (rate5m)
FOR_US = 600 * SECOND  # how long the condition must hold before the alert fires (for: 10m)


def condition(
    at_us: int,
    busy_now: Sequence[int],
    busy_then: Sequence[int] | None,
    known: Sequence[bool],
    up_since_us: Sequence[int | None],
) -> list[bool]:
    """Per node, whether the idle rule's condition holds at `at_us`: its figures known and its
    journal followed for the whole window, its busy share over the window (busy counters now
    and WINDOW_US before: `busy_then`, None when not known) below IDLE_BELOW, and the mean
    share of the other known nodes at least OTHERS_AT_LEAST. The alert fires once this has
    held for FOR_US."""
    n = len(busy_now)
    count = sum(1 for k in known if k)
    if busy_then is None or count < 2:
        return [False] * n
    shares = [(busy_now[i] - busy_then[i]) / WINDOW_US for i in range(n)]
    total = sum(s for s, k in zip(shares, known, strict=True) if k)
    since = at_us - WINDOW_US
    out = []
    for i in range(n):
        up = up_since_us[i]
        if not known[i] or up is None or up > since:
            out.append(False)
            continue
        others = (total - shares[i]) / (count - 1)
        out.append(shares[i] < IDLE_BELOW and others >= OTHERS_AT_LEAST)
    return out


def firing(idle_since_us: int | None, at_us: int) -> bool:
    """The alert fires: the condition has held for FOR_US (since `idle_since_us`)."""
    return idle_since_us is not None and at_us - idle_since_us >= FOR_US
