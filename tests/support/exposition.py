"""Accountings full of traffic, and prometheus_client's renderings of their snapshots: the
reference the exporter's own renderer is held to (text and OpenMetrics)."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from exporter.accounting import SECOND, Accounting, Snapshot
from exporter.collector import SnapshotCollector
from exporter.kinds import DEFAULT_RULES, Kinds
from exporter.logline import Event, EventKind, Interval

START = 1_790_000_000 * SECOND  # (long past)


def rich_accounting() -> tuple[Accounting, list[str]]:
    names = [f"node{i:02d}" for i in range(12)] + ['we"ird\\no\nde']
    acc = Accounting(names, Kinds(DEFAULT_RULES), origin_us=START)
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
