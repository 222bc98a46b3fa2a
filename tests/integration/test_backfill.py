"""Backfill: a past window as the daemon would have served it, into real promtool blocks, read by
a real Prometheus; its increase() over the window is the report's figure."""

from __future__ import annotations

import bisect
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.base.records import Batch, LogLine
from exporter.base.times import SECOND, iso
from exporter.report import openmetrics as backfill
from exporter.report import text as report_text
from exporter.report import window as report

from support import prometheus as prom
from support.backfill_window import NODES, QUIET, SINCE, STEP, UNTIL, lines_of
from support.cli import Cli
from support.settings import default_settings
from support.tools import REPO, require_tool
from support.workload import KINDS, write_dump

pytestmark = pytest.mark.slow

RULES = REPO / "deploy" / "prometheus" / "rules.yml"


def backfilled(
    directory: Path,
) -> tuple[dict[str, list[LogLine]], dict[str, Any], list[Path]]:
    """The window's lines, the report of them (its JSON) and the backfill of them, written in
    `directory`, a file per block."""
    lines = lines_of()
    expected = report_text.to_json(
        report.build(
            {n: [Batch(n, tuple(ls))] for n, ls in lines.items()},
            default_settings(KINDS),
            SINCE,
            UNTIL,
        )
    )
    replay = backfill.Replay(NODES, default_settings(KINDS, slots=2), SINCE, UNTIL, STEP)
    for n, ls in lines.items():
        replay.add(Batch(n, tuple(ls)))
    parts = backfill.write(
        replay.snapshots(), lambda p: directory / f"part{p}.om", "test", backfill.BLOCK_S
    )
    return lines, expected, parts


def test_promtool_blocks_give_the_reports_figures(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    lines, expected, parts = backfilled(tmp_path)
    assert len(parts) >= 3
    data = tmp_path / "data"
    for part in parts:
        assert part.read_text().endswith("# EOF\n")
        subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(part), str(data)],
            check=True,
            capture_output=True,
        )
    config = tmp_path / "prometheus.yml"
    config.write_text("global: {}\n")
    started = None
    for attempt in range(prom.ATTEMPTS):
        started = prom.start(prom.binary(), config, data, tmp_path / f"prom{attempt}.log")
        if started is not None:
            break
    assert started is not None
    process, url = started
    try:
        api = prom.Api(url)
        window = f"[{(UNTIL - SINCE + STEP) // SECOND}s]"
        at = UNTIL / SECOND

        def by_node(expr: str) -> dict[str, float]:
            got = api.instant(f"sum by (node) (increase({expr}{window}))", at)
            return {s["metric"]["node"]: float(s["value"][1]) for s in got}

        requests = by_node("smllm_requests_total")
        assert requests == pytest.approx(
            {n: float(v["requests"]) for n, v in expected["nodes"].items()}
        )
        seconds = by_node("smllm_request_seconds_total")
        want = dict.fromkeys(NODES, 0.0)
        figures: dict[str, Any] = expected["kinds"]
        assert sum(seconds.values()) == pytest.approx(
            sum(k["request_seconds"] for k in figures.values())
        ), json.dumps(seconds)
        # the watermark-accounted figures are final up to the watermark the daemon had at a
        # step: at until, every node idle for QUIET, until less the 2 s a caught-up source
        # vouches for no more than: the report of the window up to there
        (sample,) = api.instant("smllm_accounted_until_timestamp_seconds", at)
        watermark_us = round(float(sample["value"][1]) * SECOND)
        assert UNTIL - 2 * SECOND <= watermark_us <= UNTIL
        accounted = report_text.to_json(
            report.build(
                {n: [Batch(n, tuple(ls))] for n, ls in lines.items()},
                default_settings(KINDS),
                SINCE,
                watermark_us,
            )
        )
        for n, v in expected["nodes"].items():  # (and idle since: the whole window's busy)
            assert accounted["nodes"][n]["busy_seconds"] == v["busy_seconds"]
        busy = by_node("smllm_node_busy_seconds_total")
        want = {n: v["busy_seconds"] for n, v in accounted["nodes"].items()}
        assert busy == pytest.approx(want, rel=1e-9, abs=1e-5)
        slot = by_node("smllm_slot_busy_seconds_total")
        want = {n: v["slot_busy_seconds"] for n, v in accounted["nodes"].items()}
        assert slot == pytest.approx(want, rel=1e-9, abs=1e-5)
        for name, key in (("concurrency", "nodes_busy"), ("mix", "mix")):
            got = api.instant(f"sum by ({key}) (increase(smllm_{name}_seconds_total{window}))", at)
            values = {s["metric"].get(key, ""): float(s["value"][1]) for s in got}
            figures = accounted[f"{name}_seconds"]
            assert values == pytest.approx(figures, rel=1e-9, abs=1e-5), (name, values, figures)
        shares_hold_the_rules(api, lines)
    finally:
        prom.terminate(process)


def recorded(name: str) -> str:
    """A recording rule's expression in deploy/prometheus/rules.yml, the recorded series it
    uses written out as their own expressions (a backfill has none of them)."""
    rules: dict[str, str] = {
        str(r["record"]): str(r["expr"])
        for g in yaml.safe_load(RULES.read_text())["groups"]
        for r in g["rules"]
        if "record" in r
    }
    expr = rules[name]
    for other, inner in rules.items():
        if other != name:
            expr = re.sub(rf"(?<![\w:]){re.escape(other)}(?![\w:])", f"({inner})", expr)
    return expr


def shares_hold_the_rules(api: prom.Api, lines: dict[str, list[LogLine]]) -> None:
    """smllm:node_busy_share:rate5m, evaluated over the backfilled data at a few times t, is
    the report's busy share of what the watermark accounted over its 5 minutes: between the
    watermark of the window's first sample and that of t."""
    share = recorded("smllm:node_busy_share:rate5m")
    # the first sample a [5m] range at t holds: t - 5m itself before Prometheus 3 (ranges were
    # closed on the left), the next one since
    left = 0 if prom.version(prom.binary()) < (3,) else STEP
    for t_us in (SINCE + 3600 * SECOND, SINCE + 9000 * SECOND, UNTIL - QUIET - 60 * SECOND):
        first_us = t_us - 300 * SECOND + left
        watermarks = []
        for at in (first_us, t_us):
            (sample,) = api.instant("smllm_accounted_until_timestamp_seconds", at / SECOND)
            watermarks.append(round(float(sample["value"][1]) * SECOND))
        got = {s["metric"]["node"]: float(s["value"][1]) for s in api.instant(share, t_us / SECOND)}
        r = report_text.to_json(
            report.build(
                {n: [Batch(n, tuple(ls))] for n, ls in lines.items()},
                default_settings(KINDS),
                *watermarks,
            )
        )
        span_s = (watermarks[1] - watermarks[0]) / SECOND
        want = {n: v["busy_seconds"] / span_s for n, v in r["nodes"].items()}
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), (t_us, got, want)


def stamps_of(name: str, text: str, seen: set[str]) -> dict[str, list[float]]:
    """Each series' timestamps in one file, each series' samples asserted together; the
    requests_total series met go into `seen`."""
    series_order: list[str] = []
    stamps: dict[str, list[float]] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        series, _, stamp = line.rsplit(" ", 2)
        if not series_order or series_order[-1] != series:
            assert series not in stamps, f"{name}: {series} not together"
            series_order.append(series)
        stamps.setdefault(series, []).append(float(stamp))
        m = re.fullmatch(r'smllm_requests_total\{kind="\w+",node="(\w)"\}', series)
        if m:
            seen.add(series)
    return stamps


def requests_by_step(text: str, node: str) -> dict[float, float]:
    """A node's requests_total at each step of one file, all kinds summed."""
    per_step: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("smllm_requests_total{") and f'node="{node}"' in line:
            _, count, at = line.rsplit(" ", 2)
            per_step[float(at)] = per_step.get(float(at), 0.0) + float(count)
    return per_step


def test_report_writes_openmetrics_as_promtool_takes_it(tmp_path: Path, cli: Cli) -> None:
    """`report --format openmetrics --step 15s --output-dir`: a file a block, each series'
    samples together and in time order, `# EOF`; every step's requests_total is the timing lines
    up to it, counted here from the lines themselves."""
    lines = lines_of()
    argv = ["report", "--since", iso(SINCE), "--until", iso(UNTIL)]
    for n, ls in lines.items():
        write_dump(tmp_path / f"{n}.json", ls, "bf")
        argv += ["--input", f"{n}={tmp_path / f'{n}.json'}"]
    out = tmp_path / "om"
    code, _, err = cli(*argv, "--format", "openmetrics", "--step", "15s", "--output-dir", str(out))
    assert code == 0, err
    files = sorted(out.iterdir())
    assert [f.name for f in files] == [
        f"smllm-{p:05d}.om"
        for p in range(SINCE // SECOND // backfill.BLOCK_S, UNTIL // SECOND // backfill.BLOCK_S + 1)
    ]
    ends = {
        n: sorted(ln.time_us for ln in ls if "total time" in ln.message) for n, ls in lines.items()
    }
    seen: set[str] = set()
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert text.endswith("# EOF\n") and text.count("# EOF") == 1
        assert "smllm_exporter_build_info" not in text and "process_" not in text
        stamps = stamps_of(f.name, text, seen)
        for series, times in stamps.items():
            assert times == sorted(times) and len(set(times)) == len(times), series
        for node in NODES:  # requests by step, all kinds: the timing lines up to the step
            for at_s, total in requests_by_step(text, node).items():
                counted = bisect.bisect_right(ends[node], round(at_s * SECOND))
                assert total == counted, (node, at_s)
    assert len(seen) == len(NODES) * len(KINDS.names)
    last = files[-1].read_text(encoding="utf-8").splitlines()
    for node in NODES:  # every entry up to until counted, by the step it came in
        (entries,) = [
            line for line in last if line.startswith(f'smllm_source_entries_total{{node="{node}"}}')
        ][-1:]
        up_to = sum(1 for ln in lines[node] if ln.time_us <= UNTIL)
        assert float(entries.split(" ")[1]) == up_to, node
    code, _, err = cli(*argv, "--format", "openmetrics", "--output-dir", str(out))
    assert code == 2 and "holds the files of another backfill" in err  # never mixed
    code, _, err = cli(*argv, "--format", "openmetrics", "--output", "x", "--output-dir", "y")
    assert code == 2 and "not both" in err


def test_victoria_metrics_takes_the_backfill_and_gives_the_reports_figures(tmp_path: Path) -> None:
    """The same files, imported into VictoriaMetrics as docs/scale.md says (its
    /api/v1/import/prometheus reads OpenMetrics, timestamps in seconds): increase() over the
    window is the report's figure."""
    from support import victoria

    _, expected, parts = backfilled(tmp_path)
    started = None
    for attempt in range(victoria.ATTEMPTS):
        log = tmp_path / f"vm{attempt}.log"
        started = victoria.start(victoria.binary(), ["-retentionPeriod=100y"], tmp_path / "vm", log)
        if started is not None:
            break
    assert started is not None
    process, url = started
    try:
        vm = victoria.Victoria(url, log)
        for part in parts:
            vm.import_text(part.read_bytes(), job="sm-llm-exporter")
        vm.flush()
        window = f"[{(UNTIL - SINCE + STEP) // SECOND}s]"
        got = vm.instant(f"sum by (node) (increase(smllm_requests_total{window}))", UNTIL / SECOND)
        requests = {s["metric"]["node"]: float(s["value"][1]) for s in got}
        assert requests == {n: float(v["requests"]) for n, v in expected["nodes"].items()}
        (job,) = {
            s["metric"].get("job") for s in vm.instant("smllm_requests_total", UNTIL / SECOND)
        }
        assert job == "sm-llm-exporter"
    finally:
        victoria.terminate(process)
