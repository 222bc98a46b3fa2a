"""The idle alert's rule (SmLlmNodeIdle) in Python: a node idle while the others work.

deploy/prometheus/rules.yml holds the same rule in PromQL; its thresholds are these constants
(a test holds the two to each other), so the status page and the alert never disagree.
"""

from __future__ import annotations

from exporter.base.times import SECOND

IDLE_BELOW = 0.05  # a node busy less than this share of the window is idle
OTHERS_AT_LEAST = 0.5  # while the other known nodes are busy at least this share on average
WINDOW_US = 300 * SECOND  # the window both shares are taken over (rate5m)
FOR_US = 600 * SECOND  # how long the condition must hold before the alert fires (for: 10m)
