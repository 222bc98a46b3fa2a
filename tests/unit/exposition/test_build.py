"""smllm_exporter_build_info's labels: the version, the git revision, Python, compiled."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import parser

from exporter.compiled import switch
from exporter.exposition import build
from exporter.exposition.build import REVISION_CHARS, REVISION_ENV, revision
from exporter.exposition.render import Renderer

from support.exposition import build_info_labels, snapshot


def parse_om(text: str) -> list[Metric]:
    return list(parser.text_string_to_metric_families(text))  # type: ignore[no-untyped-call]


def test_build_info_names_version_revision_python_and_compiled() -> None:
    renderer = Renderer("1.2.3")
    labels = build_info_labels(renderer.render(snapshot(requests=5)).body.decode())
    compiled = switch.speedups is not None and switch.accounting is not None
    assert labels == {
        "version": "1.2.3",
        "revision": labels["revision"],
        "python": sys.version.split()[0],
        "compiled": "true" if compiled else "false",
    }
    assert labels["revision"]  # a commit, or "unknown"
    om = {
        f.name: f for f in parse_om(renderer.render_openmetrics(snapshot(requests=5)).body.decode())
    }
    (sample,) = om["smllm_exporter_build_info"].samples
    assert sample.labels == labels


def test_revision_is_the_variables_first_line_else_the_files_else_unknown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(REVISION_ENV, " 0123abcd\nsecond line")
    assert revision() == "0123abcd"
    monkeypatch.setenv(REVISION_ENV, "x" * (REVISION_CHARS + 10))
    assert revision() == "x" * REVISION_CHARS
    monkeypatch.delenv(REVISION_ENV)
    monkeypatch.setattr(build, "REVISION_FILE", tmp_path / "REVISION")
    assert revision() == "unknown"
    (tmp_path / "REVISION").write_text("\n  v1.2-3-gabc  \n", encoding="utf-8")
    assert revision() == "v1.2-3-gabc"
    (tmp_path / "REVISION").write_bytes(b"")
    assert revision() == "unknown"
    assert build.build_info("1")["revision"] == "unknown"
