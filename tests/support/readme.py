"""The metrics page as the tests read it: docs/metrics.md's metric table (its `## Metrics`
section), which the exposition, daemon and rules tests hold against what is served."""

from __future__ import annotations

import re

from support.tools import REPO

METRICS_PAGE = REPO / "docs" / "metrics.md"


def metric_table() -> dict[str, tuple[str, str, str]]:
    """docs/metrics.md's "## Metrics" section's table: name -> (type, labels, meaning), from rows
    `| `smllm_NAME` | TYPE | LABELS | MEANING |` (the section runs to the next `## ` heading or
    the page's end)."""
    text = METRICS_PAGE.read_text(encoding="utf-8")
    section = re.search(r"^## Metrics\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert section, f"{METRICS_PAGE.relative_to(REPO)} has no ## Metrics section"
    rows: dict[str, tuple[str, str, str]] = {}
    for line in section.group(1).splitlines():
        m = re.fullmatch(r"\| `(smllm_\w+)` \| (\w+) \| ([^|]+) \| (.+) \|", line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} twice in the table"
            rows[m.group(1)] = (m.group(2), m.group(3).strip(), m.group(4))
    assert len(rows) >= 30, sorted(rows)
    return rows
