"""What /metrics serves, and where: the text format 0.0.4, or OpenMetrics 1.0.0 when the scraper
prefers it (its Accept header, with q-values), each byte for byte what prometheus_client writes
for the SnapshotCollector and the process collectors; smllm_exporter_build_info's labels; and
the log line naming every address the server bound.

Debian's promtool (2.42) `check metrics` reads the text format only (on an OpenMetrics body it
takes every counter's `_total` samples for a family without HELP), so the OpenMetrics body is
read with prometheus_client's OpenMetrics parser, which is strict (`# EOF`, counters' `_total`,
a family's samples together), and the text body goes through promtool.
"""

from __future__ import annotations

import gzip
import random
import sys
from typing import cast

import pytest
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition, parser

from exporter.compiled import switch as _compiled
from exporter.exposition.render import (
    Published,
    Renderer,
)
from exporter.web.routes import wants_openmetrics

from support.exposition import (
    PROMETHEUS_ACCEPT,
    START,
    build_info_labels,
    parse_text,
    reference,
    rich_accounting,
    snapshot,
    traffic,
)


def generate_openmetrics(registry: CollectorRegistry) -> bytes:
    return cast(bytes, exposition.generate_latest(registry))  # type: ignore[no-untyped-call]


def parse_om(text: str) -> list[Metric]:
    return list(parser.text_string_to_metric_families(text))  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        (PROMETHEUS_ACCEPT, True),
        ("application/openmetrics-text; version=1.0.0", True),
        ("application/openmetrics-text", True),
        ("Application/OpenMetrics-Text; Version=1.0.0", True),  # (as _header lowers it)
        ('application/openmetrics-text;version="1.0.0"', True),
        ("application/openmetrics-text;version=0.0.1", True),  # the draft: the same text
        # Prometheus >= 2.49, scrape_protocols: [OpenMetricsText1.0.0, PrometheusText0.0.4]
        (
            "application/openmetrics-text;version=1.0.0;q=0.5,"
            "text/plain;version=0.0.4;q=0.4,*/*;q=0.3",
            True,
        ),
        # Prometheus 3's default: protobuf first (not served), OpenMetrics next
        (
            "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
            "encoding=delimited;q=0.5,application/openmetrics-text;version=1.0.0;"
            "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
            True,
        ),
        ("application/openmetrics-text, */*", True),  # named beats a wildcard at equal q
        ("application/openmetrics-text, text/plain", True),
        ("application/*", True),  # the only format it takes
        ("text/plain;version=0.0.4;q=0.5, application/openmetrics-text;q=0.6", True),
        ("", False),  # no Accept: curl, a browser's first look, old scrapers
        ("*/*", False),
        ("text/plain", False),
        ("text/plain;version=0.0.4", False),
        ("text/*, application/openmetrics-text;q=0.9", False),
        ("application/openmetrics-text;q=0.5, text/plain", False),
        ("application/openmetrics-text;q=0.5, */*", False),
        ("application/openmetrics-text;q=0", False),
        ("application/openmetrics-text;q=0.000, text/plain;q=0.001", False),
        ("application/openmetrics-text;q=2", False),  # malformed q-values accept nothing
        ("application/openmetrics-text;q=x", False),
        ("application/openmetrics-text;version=2.0.0", False),  # a version not served
        ("application/openmetrics-text;version=2.0.0, */*;q=0.1", False),
        ("application/json", False),  # accepts neither: the text format all the same
        (",;=,", False),
    ],
)
def test_openmetrics_is_served_when_preferred(accept: str, openmetrics: bool) -> None:
    assert wants_openmetrics(accept.lower().encode()) is openmetrics


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


def test_each_format_and_encoding_is_made_once_and_kept() -> None:
    renderer = Renderer("1.2.3")
    published = Published(renderer, snapshot(requests=20), 0)
    assert published.ready(gzipped=False, openmetrics=True) is None
    om = published.body(gzipped=False, openmetrics=True)
    assert om.endswith(b"# EOF\n") and published.plain is None  # the text format: not made
    assert published.ready(gzipped=False, openmetrics=True) is om
    zipped = published.body(gzipped=True, openmetrics=True)
    assert gzip.decompress(zipped) == om
    assert published.body(gzipped=True, openmetrics=True) is zipped
    plain = published.body(gzipped=False)
    assert b"# EOF" not in plain and plain == published.plain and published.gzipped is None
    # a scraper that asked for OpenMetrics gzipped finds the next snapshot made that way
    published.ready(gzipped=True, openmetrics=True)
    following = Published(renderer, snapshot(requests=21), 0, published)
    following.prepare_like(published)
    assert set(following.bodies) == {(True, False), (True, True)}


def test_build_info_names_version_revision_python_and_compiled() -> None:
    renderer = Renderer("1.2.3")
    labels = build_info_labels(renderer.render(snapshot(requests=5)).body.decode())
    compiled = _compiled.speedups is not None and _compiled.accounting is not None
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
