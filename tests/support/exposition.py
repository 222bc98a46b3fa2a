"""Accountings full of traffic, and prometheus_client's renderings of their snapshots: the
reference the exporter's own renderer is held to (text and OpenMetrics)."""

from __future__ import annotations

import random

from prometheus_client import (
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from exporter.accounting.accounting import Accounting
from exporter.accounting.figures import Snapshot
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import MILESTONES, Event, EventKind, Interval
from exporter.base.times import SECOND
from exporter.exposition.reference import SnapshotCollector
from exporter.startup.phases import Figures

from support.settings import default_settings

START = 1_790_000_000 * SECOND  # (long past)


def rich_accounting() -> tuple[Accounting, list[str]]:
    names = [f"node{i:02d}" for i in range(12)] + ['we"ird\\no\nde']
    acc = Accounting(names, default_settings(Kinds(DEFAULT_RULES)), origin_us=START)
    acc.init_timelines = {  # (two init-timeline nodes: one read, one not)
        "omni0": Figures(
            "omni0",
            True,
            t0=1_790_000_000.25,
            total_s=612.5,
            phases=(("-", "engine", "stage_init", 600.0), ("0", 'wor"ker', "load\nweights", 3.5)),
            suggested=(("stage_init_timeout", 300), ("init_timeout", 919)),
            skipped=2,
        ),
        "omni1": Figures("omni1", False, "init-timeline node omni1: /x: no such file"),
    }
    return acc, names


def traffic(acc: Accounting, names: list[str], rng: random.Random, n: int, t_us: int) -> int:
    for _ in range(n):
        t_us += rng.randrange(1, 3 * SECOND)
        node = names[rng.randrange(len(names))]
        if rng.random() < 0.2:
            acc.add(Event(node, t_us, EventKind.STARTED, slot=0, task=t_us))
        else:
            duration = rng.randrange(1, 700 * SECOND)  # some past the last bucket
            acc.add(
                Interval(
                    node,
                    t_us - duration,
                    t_us,
                    tokens=rng.choice([None, rng.randrange(1, 2000)]),
                    prompt_tokens=rng.randrange(100),
                    generated_tokens=rng.randrange(100),
                    prompt_us=rng.randrange(10**6),
                    generation_us=rng.randrange(10**8),
                )
            )
        acc.line_read(node, t_us, rng.randrange(1, 3_000_000))
    # a start-up done on one node, one in progress on another (their milestones, PID 1 systemd's)
    for node, milestones in ((names[1], MILESTONES), (names[2], MILESTONES[:4])):
        for i, milestone in enumerate(milestones):
            pid = 1 if i < 2 else 7000 + n
            acc.add(Event(node, t_us + i * SECOND, EventKind.PHASE, pid, None, i * 999, milestone))
    t_us += len(MILESTONES) * SECOND
    acc.source_state(names[0], up=True, caught_up=False, now_us=t_us, lag_us=1_234_567)
    acc.advance(t_us - 30 * SECOND)
    return t_us


def snapshot(seed: int = 7, requests: int = 500) -> Snapshot:
    """A rich accounting's snapshot after `requests` records of traffic."""
    acc, names = rich_accounting()
    traffic(acc, names, random.Random(seed), requests, START)
    return acc.snapshot()


def reference(snap: Snapshot, errors: int, *, openmetrics: bool = False) -> str:
    """What prometheus_client makes of a SnapshotCollector over `snap`."""
    collector = SnapshotCollector("1.2.3")
    collector.snapshot, collector.checkpoint_errors = snap, errors
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return (generate_openmetrics if openmetrics else generate_latest)(registry).decode()


def build_info_labels(text: str) -> dict[str, str]:
    (info,) = [f for f in parse_text(text) if f.name == "smllm_exporter_build_info"]
    (sample,) = info.samples
    assert sample.value == 1
    return dict(sample.labels)


def parse_text(text: str) -> list[Metric]:
    return list(text_string_to_metric_families(text))


PROMETHEUS_ACCEPT = (  # what Prometheus 2.42 (Debian bookworm) sends on every scrape
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
