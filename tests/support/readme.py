"""The README as the tests read it: its metric table, its links."""

from __future__ import annotations

import re
from pathlib import Path

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


def relative_links(path: Path = README) -> list[str]:
    """The targets of a Markdown file's links and images that are paths in the repository."""
    text = path.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
