"""The YAML document: a syntax error names its line; a document that is no config mapping (or
that PyYAML would build into something impossible) is a problem, never a hang or a raise."""

from __future__ import annotations

import re

import pytest

from support.configs import (
    FILE_NODE,
    problems,
)
from support.tools import yaml_text as y


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param(
            y("listen: ':1'", "nodes:", "  - name: a", "   source: file"), 4, id="indentation"
        ),
        pytest.param(y("listen: ':1'", "nodes: [", "  {name: a"), (3, 4), id="unclosed-flow"),
        pytest.param(y("listen: ':1'", "\tnodes: []"), 2, id="tab"),
        pytest.param(y(*FILE_NODE, "unit: 'sm-llm"), (3, 4), id="unclosed-quote"),
        pytest.param(y(*FILE_NODE, "---", *FILE_NODE), 3, id="two-documents"),
        pytest.param(y(*FILE_NODE, "unit: !!python/name:os.system x"), 3, id="unsafe-tag"),
    ],
)
def test_yaml_syntax_error_names_its_line(text: str, line: int | tuple[int, ...]) -> None:
    # An unclosed quote or bracket is found at the end of the stream (one past the last line);
    # the line where it opened would serve better, so either is accepted there.
    lines = line if isinstance(line, tuple) else (line,)
    found = problems(text)
    assert len(found) == 1
    assert found[0].startswith(tuple(f"cfg.yaml:{n}: not valid YAML: " for n in lines))


# Documents that are not a mapping with `nodes`, and values PyYAML itself would construct into
# something impossible: each must still come back as problems, never hang or raise.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            y("listen: ':1'"),
            [r"cfg\.yaml(:1)?: nodes: must be a non-empty list of nodes, got None"],
            id="nodes-missing",
        ),
        pytest.param(
            "",
            [r"cfg\.yaml(:1)?: nodes: must be a non-empty list of nodes, got None"],
            id="empty-file",
        ),
        pytest.param(
            y("# only a comment"),
            [r"cfg\.yaml(:1)?: nodes: must be a non-empty list of nodes, got None"],
            id="only-comments",
        ),
        pytest.param(
            y("- listen: ':1'", "- nodes: []"),
            [
                re.escape(
                    "cfg.yaml:1: (top): must be a mapping, got [{'listen': ':1'}, {'nodes': []}]"
                )
            ],
            id="top-level-list",
        ),
        pytest.param(
            y("just text"),
            [re.escape("cfg.yaml:1: (top): must be a mapping, got 'just text'")],
            id="top-level-scalar",
        ),
        pytest.param(
            y("nodes:", "  - {name: a, source: [file]}"),
            [
                re.escape(
                    "cfg.yaml:2: nodes[0].source: must be one of file, journal, journal-remote, ssh, init-timeline"
                )
                + ".*"
            ],
            id="source-a-list",
        ),
        pytest.param(
            y(*FILE_NODE, "since: 2026-13-01"),
            [r"cfg\.yaml:3: .*"],
            id="impossible-yaml-date",
        ),
        pytest.param(
            y(*FILE_NODE, "since: 2026-09-22T25:00:00"),
            [r"cfg\.yaml:3: .*"],
            id="impossible-yaml-time",
        ),
    ],
)
def test_malformed_document_is_a_problem(text: str, expected: list[str]) -> None:
    found = problems(text)
    for pattern in expected:
        assert any(re.fullmatch(pattern, p, re.DOTALL) for p in found), (pattern, found)
