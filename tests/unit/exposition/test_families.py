"""The family table: names, types and labels as Prometheus takes them, and the metrics page's
table (docs/metrics.md, ## Metrics) holds exactly its families, with their types and labels."""

from __future__ import annotations

import re

from exporter.exposition.families import COUNTER, FAMILIES, GAUGE, HISTOGRAM

from support.readme import metric_table

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def page_labels(text: str) -> set[str]:
    """A metrics page row's labels: `node, kind (and `le`)` -> {node, kind}; `none` -> {}."""
    text = re.sub(r"\(.*?\)", "", text).strip()
    return set() if text == "none" else {label.strip() for label in text.split(",")}


def test_each_family_is_named_once_with_labels_prometheus_takes() -> None:
    names = [f.name for f in FAMILIES]
    assert len(set(names)) == len(names)
    for f in FAMILIES:
        assert NAME.fullmatch(f.name) and f.name.startswith("smllm_"), f.name
        assert not f.name.endswith("_total"), f"{f.name}: a counter's samples add _total"
        assert f.type in (COUNTER, GAUGE, HISTOGRAM), f.name
        assert all(LABEL.fullmatch(label) for label in f.labels), f.name
        assert len(set(f.labels)) == len(f.labels), f.name
        assert f.help and "\n" not in f.help, f.name
        # every series is one node's, but those of the whole exporter
        assert "node" not in f.labels or f.labels[0] == "node", f.name


def test_the_metrics_page_has_every_family_and_no_other() -> None:
    table = metric_table()
    assert sorted(table) == sorted(f.sample_name for f in FAMILIES)


def test_the_metrics_page_gives_each_familys_type_and_labels() -> None:
    table = metric_table()
    wrong = []
    for f in FAMILIES:
        kind, labels, _ = table[f.sample_name]
        if kind != f.type or page_labels(labels) != set(f.labels):
            wrong.append(
                f"{f.sample_name}: metrics page {kind} [{labels}], served {f.type} {f.labels}"
            )
    assert wrong == []
