"""The daemon end to end: real dump files followed, /metrics over real HTTP, real promtool."""

from __future__ import annotations

import gzip
import random
import threading

from exporter.accounting.accounting import SECOND, Accounting, Snapshot
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import Interval
from exporter.exposition.render import Exposition, Published, Renderer

from support.dumps import START
from support.exposition import reference, rich_accounting, traffic


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
    other = Accounting(names[:3], Kinds(DEFAULT_RULES), origin_us=START)  # another shape
    assert renderer.text(other.snapshot()) == reference(other.snapshot(), 0)


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


def test_a_snapshot_is_rendered_when_scraped_and_ahead_only_for_a_frequent_scraper() -> None:
    acc, names = rich_accounting()
    renderer = Renderer("1.2.3")
    traffic(acc, names, random.Random(5), 50, START)
    first = Published(renderer, acc.snapshot(), 0)
    assert first.plain is None and first.ready(gzipped=False) is None  # nothing made yet
    assert first.body(gzipped=True) == first.ready(gzipped=True)
    assert gzip.decompress(first.body(gzipped=True)) == first.plain
    assert first.plain is not None and first.plain.startswith(reference(first.snapshot, 0).encode())
    second = Published(renderer, acc.snapshot(), 0)
    second.prepare_like(first)  # `first` was scraped (gzipped): `second` made ahead
    assert second.plain is not None and second.gzipped is not None and second.scraped is None
    third = Published(renderer, acc.snapshot(), 0)
    third.prepare_like(second)  # made ahead, never scraped: nothing made
    assert third.plain is None and third.gzipped is None


class HeldRenderer(Renderer):
    """A renderer whose renders wait until the test lets them finish."""

    def __init__(self) -> None:
        super().__init__("1.2.3")
        self.started, self.go = threading.Event(), threading.Event()

    def render(self, snapshot: Snapshot, checkpoint_errors: int = 0) -> Exposition:
        self.started.set()
        assert self.go.wait(10)
        return super().render(snapshot, checkpoint_errors)


def test_while_a_snapshot_is_made_ahead_scrapes_get_the_one_before() -> None:
    acc, names = rich_accounting()
    renderer = HeldRenderer()
    renderer.go.set()
    traffic(acc, names, random.Random(6), 50, START)
    first = Published(renderer, acc.snapshot(), 0)
    old = first.body(gzipped=False)  # scraped
    renderer.go.clear()
    renderer.started.clear()
    second = Published(renderer, acc.snapshot(), 1, first)
    ahead = threading.Thread(target=second.prepare_like, args=(first,))
    ahead.start()
    assert renderer.started.wait(10)
    assert second.ready(gzipped=False) == old  # being made: the one before, at once
    assert second.ready(gzipped=True) is None  # the one before has no gzipped body
    renderer.go.set()
    ahead.join(10)
    new = second.ready(gzipped=False)
    assert new is not None and new != old and b"smllm_checkpoint_errors_total 1.0" in new
    third = Published(renderer, acc.snapshot(), 2, second)
    assert third.ready(gzipped=False) is None  # not being made: nothing to show in its place
