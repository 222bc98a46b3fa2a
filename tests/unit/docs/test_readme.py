"""The READMEs' links lead somewhere, and the screenshots they show are the tests' own."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.readme import README, relative_links
from support.tools import REPO

GUIDES = [README, REPO / "deploy" / "README.md"]


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_exists(guide: Path) -> None:
    links = relative_links(guide)
    assert [t for t in links if not (guide.parent / t.split("#")[0]).exists()] == []


def test_the_screenshots_shown_are_made_by_tests() -> None:
    shown = [t for t in relative_links() if t.startswith("docs/screenshots/")]
    assert len(shown) >= 4
    tests = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "tests").rglob("test_*.py"))
    for target in shown:
        stem = target.removeprefix("docs/screenshots/").removesuffix(".png")
        made = stem in tests or stem.rsplit("-", 1)[0] in tests
        assert made, f"{target}: no test makes it (tests/e2e/)"
