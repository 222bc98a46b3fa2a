"""The README's metric table, as the tests read it."""

from __future__ import annotations

import re

from support.tools import REPO

README = REPO / "README.md"


def metric_table() -> dict[str, tuple[str, str, str]]:
    """The "## Metrics" section's table: name -> (type, labels, meaning)."""
    text = README.read_text(encoding="utf-8")
    section = re.search(r"^## Metrics\n(.*?)^## ", text, re.MULTILINE | re.DOTALL)
    assert section, "README.md has no ## Metrics section"
    rows: dict[str, tuple[str, str, str]] = {}
    for line in section.group(1).splitlines():
        m = re.fullmatch(r"\| `(smllm_\w+)` \| (\w+) \| ([^|]+) \| (.+) \|", line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} twice in the table"
            rows[m.group(1)] = (m.group(2), m.group(3).strip(), m.group(4))
    assert len(rows) >= 30, sorted(rows)
    return rows
