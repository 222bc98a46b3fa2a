"""The renderer writes, byte for byte, what prometheus_client writes of the family table over a
snapshot (`reference.SnapshotCollector`): the text format 0.0.4 and OpenMetrics 1.0.0, render
after render as values change (or do not) and for other shapes of snapshot, the process's own
metrics after it.

Debian's promtool (2.42) `check metrics` reads the text format only (on an OpenMetrics body it
takes every counter's `_total` samples for a family without HELP), so the OpenMetrics body is
read with prometheus_client's OpenMetrics parser, which is strict (`# EOF`, counters' `_total`,
a family's samples together); tests/integration/test_exposition.py puts the text through
promtool.
"""

from __future__ import annotations

import dataclasses
import random
from typing import cast

import pytest
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition, parser

from exporter.accounting.accounting import Accounting
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import Interval
from exporter.base.times import SECOND
from exporter.exposition.numbers import go_float
from exporter.exposition.render import Renderer

from support.exposition import (
    START,
    parse_text,
    reference,
    rich_accounting,
    snapshot,
    traffic,
)
from support.scrape import parse_metrics
from support.settings import default_settings


def generate_openmetrics(registry: CollectorRegistry) -> bytes:
    return cast(bytes, exposition.generate_latest(registry))  # type: ignore[no-untyped-call]


def parse_om(text: str) -> list[Metric]:
    return list(parser.text_string_to_metric_families(text))  # type: ignore[no-untyped-call]


def test_rendered_text_equals_prometheus_client_render() -> None:
    """The text written directly is, byte for byte, what prometheus_client's generate_latest
    makes of the SnapshotCollector, render after render as values change (or do not)."""
    acc, names = rich_accounting()
    rng = random.Random(7)
    renderer = Renderer("1.2.3")
    t = START
    for n in (0, 1, 500, 0, 3, 2000):
        t = traffic(acc, names, rng, n, t)
        snap = acc.snapshot()
        assert renderer.text(snap, n) == reference(snap, n)
    body = renderer.render(snap, 5).body.decode()
    assert body.startswith(reference(snap, 5)) and "process_cpu_seconds_total" in body
    other = Accounting(names[:3], default_settings(Kinds(DEFAULT_RULES)), origin_us=START)
    assert renderer.text(other.snapshot()) == reference(other.snapshot(), 0)  # another shape


def test_router_models_are_rendered_as_prometheus_client_renders_them() -> None:
    acc, names = rich_accounting()
    renderer = Renderer("1.2.3")
    t = traffic(acc, names, random.Random(9), 40, START)
    for i, model in enumerate(("tiny-a", 'we"ird\\mo\ndel', "tiny-a")):
        t += SECOND
        acc.add(Interval(names[i], t - SECOND // 3, t, tokens=100 + i, model=model))
    snap = acc.snapshot()
    assert 'smllm_model_requests_total{model="tiny-a",node="node00"} 1.0' in renderer.text(snap)
    assert renderer.text(snap, 1) == reference(snap, 1)
    assert renderer.openmetrics_text(snap, 1) + "# EOF\n" == reference(snap, 1, openmetrics=True)


def test_snapshots_share_the_counters_that_did_not_change() -> None:
    acc, names = rich_accounting()
    traffic(acc, names, random.Random(3), 300, START)
    before = acc.snapshot()
    kinds = {
        (n.name, k): (c.requests, c.tokens, list(c.buckets))
        for n in before.nodes
        for k, c in n.kinds.items()
    }
    end = START + 10**6 * SECOND
    acc.add(Interval(names[1], end - SECOND, end, tokens=700))  # extraction on node01
    after = acc.snapshot()
    for n_before, n_after in zip(before.nodes, after.nodes, strict=True):
        for k, c in n_before.kinds.items():
            assert (c.requests, c.tokens, list(c.buckets)) == kinds[n_before.name, k]
            changed = (n_before.name, k) == (names[1], "extraction")
            assert (n_after.kinds[k] is c) != changed
    assert (
        after.nodes[1].kinds["extraction"].requests
        == before.nodes[1].kinds["extraction"].requests + 1
    )


def _process() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProcessCollector(registry=None))
    registry.register(PlatformCollector(registry=None))
    return registry


def _without_process_values(text: str) -> list[str]:
    """The lines, the process metrics' values (CPU seconds, memory) cut off."""
    return [
        line.rsplit(" ", 1)[0] if line.startswith("process_") else line
        for line in text.splitlines()
    ]


def test_openmetrics_equals_prometheus_client_render() -> None:
    """Written directly, as the text format is, render after render as values change and for
    another shape of snapshot; the process's metrics after it, then `# EOF`."""
    acc, names = rich_accounting()
    rng = random.Random(11)
    renderer = Renderer("1.2.3")
    t = START
    for n in (0, 1, 500, 0, 3):
        t = traffic(acc, names, rng, n, t)
        snap = acc.snapshot()
        want = reference(snap, n, openmetrics=True)
        assert renderer.openmetrics_text(snap, n) + "# EOF\n" == want
        # the text format's layout is a layout of its own: rendering one leaves the other right
        assert renderer.text(snap, n).startswith("# HELP smllm_requests_total ")
    body = renderer.render_openmetrics(snap, 4).body.decode()
    snapshot_part = reference(snap, 4, openmetrics=True).removesuffix("# EOF\n")
    assert body.startswith(snapshot_part)
    process = generate_openmetrics(_process()).decode()
    assert _without_process_values(body[len(snapshot_part) :]) == _without_process_values(process)
    assert body.endswith("\n# EOF\n") and body.count("# EOF") == 1


def test_openmetrics_reads_as_openmetrics_and_holds_the_text_formats_samples() -> None:
    snap = snapshot()
    renderer = Renderer("1.2.3")
    om = renderer.render_openmetrics(snap, 2).body.decode()
    text = renderer.render(snap, 2).body.decode()
    families = {f.name: f for f in parse_om(om)}  # raises on anything OpenMetrics refuses
    # counters are named without _total, their samples with it; HELP and TYPE name the family
    requests = families["smllm_requests"]
    assert requests.type == "counter"
    assert {s.name for s in requests.samples} == {"smllm_requests_total"}
    assert "# TYPE smllm_requests counter\n" in om and "# TYPE smllm_requests_total" not in om
    assert "# TYPE smllm_requests_total counter\n" in text
    assert families["smllm_request_duration_seconds"].type == "histogram"
    assert families["smllm_exporter_build_info"].type == "gauge"
    assert "process_cpu_seconds" in families

    def samples(fams: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in fams
            for s in f.samples
            if not s.name.startswith(("process_", "python_"))
        }

    assert samples(parse_om(om)) == samples(parse_text(text))


def test_go_float_is_prometheus_clients() -> None:
    from prometheus_client.utils import floatToGoString

    for value in (0, 1, 0.5, 1e-7, 123456.0, 1234567.0, 1.796146368093021e9, 1e22, -3.0):
        assert go_float(value) == floatToGoString(value), value  # type: ignore[no-untyped-call]
    assert [go_float(v) for v in (float("inf"), float("-inf"), float("nan"))] == [
        "+Inf",
        "-Inf",
        "NaN",
    ]


def test_histograms_of_each_kind_only_add_the_nodes_up() -> None:
    """With `histograms_per_node` off, each histogram has a series of each kind only: the
    nodes' buckets and sums added up, as prometheus_client writes them; the counters stay per
    node."""
    acc, names = rich_accounting()
    t = traffic(acc, names, random.Random(13), 400, START)
    t = traffic(acc, names, random.Random(14), 0, t)
    per_node = acc.snapshot()
    snap = dataclasses.replace(per_node, histograms_per_node=False)
    renderer = Renderer("1.2.3")
    text = renderer.text(snap, 0)
    assert text == reference(snap, 0)
    assert renderer.openmetrics_text(snap, 0) + "# EOF\n" == reference(snap, 0, openmetrics=True)
    by_node, by_kind = parse_metrics(renderer.text(per_node, 0)), parse_metrics(text)
    for family in ("smllm_request_duration_seconds", "smllm_prompt_duration_seconds"):
        for kind in per_node.kind_names:
            for part in ("_count", "_sum"):
                whole = [
                    v
                    for (name, labels), v in by_node.items()
                    if name == family + part and ("kind", kind) in labels
                ]
                assert len(whole) == len(names)
                assert by_kind[family + part, (("kind", kind),)] == pytest.approx(sum(whole))
    assert not any(k[0].endswith("_bucket") and ("node", names[0]) in k[1] for k in by_kind)
    assert sum(1 for k in by_node if k[0].startswith("smllm_requests_total")) == sum(
        1 for k in by_kind if k[0].startswith("smllm_requests_total")
    )
