"""A fleet of N nodes busy all hour, in the daemon's own parts, for bench/pages.py.

- `SimClock`: the daemon's wall and monotonic clock, moved by hand while the hour is built,
  then running at the real pace (`live`) from where it stopped.
- `Workload`: each node's requests, generated as time passes (`until`): 1-3 slots, each slot
  a request after another (0.3-1.1 s a slot, a gap of 0.05-0.25 s a slot), so a node ends
  about 1.2 requests a second (4,200 an hour: its ring, at most 4,096, is full) and is busy about
  85% of the time. Each request is a launch (a STARTED event) and its end (an Interval);
  most are timed (tokens 50-3,000, both of the default kinds), a few cancelled, errors or
  untimed. Deterministic (`random.Random(seed)`).
- `Fleet`: a `Core` on a config of N `file` nodes (whose sources never start), and a
  `Publisher` on a `Site` and a checkpoint in a temporary directory. `step(now_us)` does what
  the daemon's ingest loop does with what the sources read up to `now_us`: the records
  through `Accounting.add_all` and `Recent.add_all`, each node's read and source state, then
  the tick's `Accounting.advance` (the history sampled every 10 s on the way).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

from exporter.base.records import CANCELLED, ERROR_REASON, UNTIMED, Event, EventKind, Interval
from exporter.base.times import SECOND
from exporter.checkpoint.store import Checkpoint
from exporter.config.load import parse
from exporter.daemon.core import Core
from exporter.daemon.publish import Publisher
from exporter.web.routes import Site

Record = Interval | Event
VERSION = "bench"
WARMUP_US = 120 * SECOND  # built before the hour the pages show (their 5-minute share, history)
HOUR_US = 3600 * SECOND
SLOT_MIN_US, SLOT_MAX_US = 300_000, 1_100_000  # a request's duration, per slot of its node
GAP_MIN_US, GAP_MAX_US = 50_000, 250_000  # between two requests on a slot, per slot
REASONS = ((0.02, CANCELLED), (0.03, ERROR_REASON), (0.04, UNTIMED))  # (cumulative share, reason)


class SimClock:
    """Seconds since the epoch: set by hand (`set`), or running from where it was (`live`)."""

    def __init__(self, start_s: float) -> None:
        self.now_s = start_s
        self._anchor: tuple[float, float] | None = None  # live: (now_s, monotonic) then

    def set(self, now_s: float) -> None:
        self._anchor = None
        self.now_s = now_s

    def live(self) -> None:
        self._anchor = (self.now_s, time.monotonic())

    def __call__(self) -> float:
        if self._anchor is not None:
            at, mono = self._anchor
            self.now_s = at + (time.monotonic() - mono)
        return self.now_s


@dataclass(slots=True)
class _Slot:
    start_us: int  # the next request's launch
    end_us: int  # and its end
    task: int | None  # its task, once its launch is handed over


class Workload:
    """Every node's requests (module docstring), handed over in time order as time passes."""

    def __init__(self, nodes: list[str], start_us: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.nodes = nodes
        self.slots: dict[str, list[_Slot]] = {}
        self.tasks = dict.fromkeys(nodes, 0)
        self.requests = 0
        for i, node in enumerate(nodes):
            count = 1 + i % 3
            slots = []
            for _ in range(count):
                s = start_us + int(self.rng.random() * GAP_MAX_US * count)
                slots.append(_Slot(s, s + self._duration(count), None))
            self.slots[node] = slots

    def slot_counts(self) -> dict[str, int]:
        return {n: len(s) for n, s in self.slots.items()}

    def _duration(self, slots: int) -> int:
        return int(slots * (SLOT_MIN_US + self.rng.random() * (SLOT_MAX_US - SLOT_MIN_US)))

    def until(self, now_us: int) -> dict[str, list[Record]]:
        """Each node's launches and request ends up to `now_us` not handed over yet, in time
        order."""
        rng, out = self.rng, {}
        for node, slots in self.slots.items():
            count = len(slots)
            recs: list[tuple[int, Record]] = []
            for j, slot in enumerate(slots):
                while True:
                    if slot.task is None:
                        if slot.start_us > now_us:
                            break
                        slot.task = task = self.tasks[node]
                        self.tasks[node] = task + 1
                        launch = Event(node, slot.start_us, EventKind.STARTED, slot=j, task=task)
                        recs.append((slot.start_us, launch))
                    if slot.end_us > now_us:
                        break
                    recs.append((slot.end_us, self._interval(node, slot, j, slot.task)))
                    self.requests += 1
                    gap = count * (GAP_MIN_US + rng.random() * (GAP_MAX_US - GAP_MIN_US))
                    start = slot.end_us + int(gap)
                    slot.start_us, slot.end_us = start, start + self._duration(count)
                    slot.task = None
            if recs:
                recs.sort(key=lambda r: r[0])
                out[node] = [r for _, r in recs]
        return out

    def _interval(self, node: str, slot: _Slot, j: int, task: int) -> Interval:
        x = self.rng.random()
        if x >= REASONS[-1][0]:  # (nearly always)
            tokens: int | None = 50 + int(x * 2950)
            reason = ""
        else:
            tokens, reason = None, next(r for share, r in REASONS if x < share)
        return Interval(node, slot.start_us, slot.end_us, tokens, slot=j, task=task, reason=reason)


class Fleet:
    """N file nodes in the daemon's parts, fed by a Workload (module docstring)."""

    def __init__(self, nodes: int, directory: Path, end_s: float, seed: int) -> None:
        self.names = [f"node-{i:04}" for i in range(nodes)]
        self.end_us = int(end_s * SECOND)  # the end of the hour built
        start_us = self.end_us - HOUR_US - WARMUP_US
        state = directory / "state"
        state.mkdir(parents=True, exist_ok=True)
        rows = [
            {"name": n, "source": "file", "path": f"/var/log/llama/{n}.log"} for n in self.names
        ]
        text = json.dumps({"listen": "127.0.0.1:0", "state_dir": str(state), "nodes": rows})
        config = parse(text, "bench-pages.yaml", {})
        self.clock = SimClock(start_us / SECOND)
        self.core = Core(config, self.clock, self.clock)
        self.site = Site(ready=lambda: True)
        self.publisher = self.make_publisher()
        self.workload = Workload(self.names, start_us, seed)
        self.read_us = start_us  # what the sources have read up to
        acc = self.core.acc
        starts = [Event(n, start_us, EventKind.SERVER_UP) for n in self.names]
        starts += [
            Event(n, start_us, EventKind.SLOTS, slot=k)
            for n, k in self.workload.slot_counts().items()
        ]
        acc.add_all(starts)

    def make_publisher(self) -> Publisher:
        return Publisher(
            self.core,
            Checkpoint(self.core.config.state_dir, clock=self.clock),
            self.site,
            VERSION,
            publish_seconds=1.0,
            on_publish=lambda: None,
        )

    def step(self, now_us: int) -> int:
        """What the sources read up to `now_us`, applied as the ingest loop does, then the tick;
        returns the records applied."""
        acc, recent = self.core.acc, self.core.recent
        batches = self.workload.until(now_us)
        applied = 0
        for node in self.names:
            recs = batches.get(node)
            if recs:
                acc.add_all(recs)
                recent.add_all(recs)
                applied += len(recs)
            acc.line_read(node, now_us, len(recs) if recs else 0, now_us=now_us)
            acc.source_state(node, up=True, caught_up=True, now_us=now_us)
        self.read_us = now_us
        acc.advance(now_us)
        return applied

    def build(self, step_us: int = SECOND) -> int:
        """The warm-up and the hour, `step_us` of journal time a step (the clock set to each
        step's end); returns the requests ended."""
        t = self.read_us
        while t < self.end_us:
            t = min(t + step_us, self.end_us)
            self.clock.set(t / SECOND)
            self.step(t)
        return self.workload.requests
