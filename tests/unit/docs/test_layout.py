"""docs/design.md's Layout section lists every module of the tree with its one job.

`SMLLM_UPDATE_GOLDEN=1` rewrites the section's lists from the tree (the prose stays).
"""

from __future__ import annotations

import os

from support.layout import DESIGN, in_design, in_tree, rewritten


def test_the_design_lists_every_module_with_the_job_its_docstring_says() -> None:
    if os.environ.get("SMLLM_UPDATE_GOLDEN"):
        DESIGN.write_text(rewritten(DESIGN.read_text(encoding="utf-8")), encoding="utf-8")
    tree, listed = in_tree(), in_design()
    assert sorted(set(tree) - set(listed)) == [], "modules the design does not list"
    assert sorted(set(listed) - set(tree)) == [], "modules the design lists that are gone"
    assert {p: j for p, j in listed.items() if tree[p] != j} == {}, "jobs that differ"


def test_every_module_states_its_job() -> None:
    assert [p for p, j in in_tree().items() if not j.endswith(".")] == []
