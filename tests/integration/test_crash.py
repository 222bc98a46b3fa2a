"""Crash safety: the daemon killed with SIGKILL at any moment and started again loses nothing,
counts nothing twice and never serves a counter lower than before (docs/design.md,
"Checkpoints").

The daemon runs as a real subprocess (`python -m exporter run --config FILE`) over real dump files
and is killed with a real SIGKILL. Lines appended while it runs carry the time they are written
at, as a live journal's do, so the live daemon sees them exactly as it would in production.

Kill points come from what the daemon was seen to do, never from how fast it did it: in the
backlog, each run is killed (at a random moment) after it served a checkpoint that holds more
than it started from, and the next slice of the backlog is written only while no daemon runs, so
every such kill leaves a checkpoint inside the backlog however fast the machine reads.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import os
import random
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import REASONS
from exporter.base.times import SECOND, iso
from exporter.commands.demo import DemoLine, short_iso

from support.daemon_process import DaemonProcess, file_nodes
from support.dumps import report_of_dumps
from support.scrape import Samples, Watch, sample, total, value
from support.tools import now_us, wait_for

MS = 1000  # microseconds

# -- realistic journal lines -----------------------------------------------------------------


@dataclass(frozen=True)
class Style:
    """How one node's llama-server prints: era C (header + unprefixed lines, the stop line before
    the block) or era D (every line prefixed, the stop line after the block), with or without the
    2026-05 elapsed-time log prefix."""

    era: str  # "C" or "D"
    slots: int
    log_prefix: bool = False


STYLES = {
    "node0": Style("D", slots=2),
    "node1": Style("C", slots=1),
    "node2": Style("D", slots=2, log_prefix=True),
}


@dataclass
class Request:
    slot: int
    start_us: int
    total_us: int  # a whole number of 10 us: the log gives milliseconds with two decimals
    prompt: int
    generated: int
    cancelled: bool = False

    @property
    def end_us(self) -> int:
        return self.start_us + self.total_us


@dataclass
class NodeLog:
    """One node's journal lines in order, and the running state of its llama-server."""

    node: str
    style: Style
    pid: int
    task: int
    boot_us: int  # for the elapsed-time prefix
    lines: list[DemoLine] = field(default_factory=list)

    def say(self, key: list[tuple[int, int, int, str]], t: int, seq: int, msg: str) -> None:
        if self.style.log_prefix:
            e = max(0, t - self.boot_us)
            msg = (
                f"{e // (60 * SECOND):02d}.{e // SECOND % 60:02d}.{e // MS % 1000:03d}."
                f"{e % 1000:03d} I {msg}"
            )
        key.append((t, seq, len(key), msg))


def plan(
    rng: random.Random,
    slots: int,
    start_us: int,
    end_us: int,
    durations_ms: tuple[int, int],
    gaps_ms: tuple[int, int],
    long_share: float,
) -> list[Request]:
    """Each slot's requests back to back with gaps, every one ended before `end_us`."""
    out: list[Request] = []
    for slot in range(slots):
        t = start_us + rng.randrange(gaps_ms[0], gaps_ms[1]) * MS
        while True:
            lo, hi = durations_ms
            if rng.random() < long_share:  # extraction: long, 600+ tokens
                total_us = rng.randrange((lo + hi) // 2 * 100, hi * 100) * 10
                prompt, generated = rng.randrange(560, 940), rng.randrange(40, 120)
            else:  # reconcile
                total_us = rng.randrange(lo * 100, (lo + hi) // 2 * 100) * 10
                prompt, generated = rng.randrange(120, 540), rng.randrange(3, 50)
            if t + total_us + 10 * MS >= end_us:
                break
            out.append(Request(slot, t, total_us, prompt, generated, cancelled=rng.random() < 0.03))
            t += total_us + rng.randrange(gaps_ms[0], gaps_ms[1]) * MS
    out.sort(key=lambda r: r.start_us)
    return out


def emit(out: NodeLog, rng: random.Random, requests: list[Request]) -> None:
    """The journal lines of `requests` (launch at the start, timing block and stop line at the
    end, a few lines of noise), appended to `out.lines` in journal order."""
    key: list[tuple[int, int, int, str]] = []
    for seq, r in enumerate(requests):
        out.task += 1 + rng.randrange(3)
        task, slot = out.task, r.slot
        ids = f"id  {slot} | task {task} |"
        launch = r.start_us + rng.randrange(50, 900)  # logged just after the start
        out.say(key, launch, seq, f"slot launch_slot_: {ids} processing task, is_child = 0")
        out.say(
            key,
            launch + 120,
            seq,
            f"slot update_slots: {ids} new prompt, n_ctx_slot = 8192, n_keep = 0, "
            f"n_prompt_tokens = {r.prompt}",
        )
        end = r.end_us
        stop = (
            f"slot      release: {ids} stop processing: n_past = {r.prompt + r.generated}, "
            "truncated = 0"
        )
        if r.cancelled:  # the client went away: the server's cancel line, then the stop
            out.say(key, end - 10, seq, f"srv          stop: cancel task, id_task = {task}")
            out.say(key, end, seq, stop)
            out.say(key, end + 200, seq, "srv  outserver_r: request: POST /completion 499")
            continue
        total_ms = r.total_us / 1000
        prompt_ms = round(total_ms * rng.uniform(0.15, 0.4), 2)
        gen_ms = round(total_ms - prompt_ms, 2)
        prompt_line = (
            f"prompt eval time = {prompt_ms:10.2f} ms / {r.prompt:5d} tokens "
            f"({prompt_ms / r.prompt:8.2f} ms per token, "
            f"{1e3 / prompt_ms * r.prompt:8.2f} tokens per second)"
        )
        eval_line = (
            f"       eval time = {gen_ms:10.2f} ms / {r.generated:5d} tokens "
            f"({gen_ms / r.generated:8.2f} ms per token, "
            f"{1e3 / gen_ms * r.generated:8.2f} tokens per second)"
        )
        total_line = f"      total time = {total_ms:10.2f} ms / {r.prompt + r.generated:5d} tokens"
        if out.style.era == "C":
            out.say(key, end, seq, stop)
            out.say(key, end, seq, f"slot print_timing: {ids} ")
            for text in (prompt_line, eval_line, total_line):
                out.say(key, end, seq, text)
        else:
            for text in (prompt_line, eval_line, total_line):
                out.say(key, end, seq, f"slot print_timing: {ids} {text}")
            out.say(key, end, seq, f"slot print_timing: {ids}    graphs reused = {seq % 50}")
            out.say(key, end + 30, seq, stop)
        out.say(key, end + 200, seq, "srv  outserver_r: request: POST /completion 127.0.0.1 200")
    key.sort()
    out.lines.extend(DemoLine(t, out.pid, msg) for t, _, _, msg in key)


GARBLED = "llama_perf_context_print:       total time =      nan ms /    12 tokens"


def garble(nl: NodeLog, rng: random.Random, count: int) -> None:
    """Slip in lines that look like timing lines but do not parse (parse errors, not requests),
    each just before a launch line: between requests, never inside a timing block."""
    launches = [i for i, x in enumerate(nl.lines) if "launch_slot_" in x.message]
    for at in sorted(rng.sample(launches, count), reverse=True):
        nl.lines.insert(at, DemoLine(nl.lines[at].time_us, nl.lines[at].pid, GARBLED))


def make_backlog(seed: int, start_us: int, end_us: int) -> dict[str, NodeLog]:
    """Every node's journal over [start_us, end_us): requests of 0.5-40 s (0.5-20 s on the
    one-slot node), a few cancelled, a few garbled lines and, on node2, a llama-server restart
    with a request in flight (aborted)."""
    logs: dict[str, NodeLog] = {}
    for node, style in STYLES.items():
        rng = random.Random(f"{seed}:{node}:backlog")
        nl = NodeLog(
            node,
            style,
            pid=4000 + rng.randrange(1000),
            task=rng.randrange(100, 900),
            boot_us=start_us - 3600 * SECOND,
        )
        segments = [(start_us, end_us)]
        if node == "node2":
            mid = (start_us + end_us) // 2
            segments = [(start_us, mid), (mid + 20 * SECOND, end_us)]
        longest = 40_000 if style.slots > 1 else 20_000
        for i, (lo, hi) in enumerate(segments):
            if i:  # llama-server restarted with a request in flight; a new PID logs on
                nl.task += 2
                nl.lines.append(
                    DemoLine(
                        lo - 15 * SECOND,
                        nl.pid,
                        f"slot launch_slot_: id  0 | task {nl.task} | processing task",
                    )
                )
                nl.pid += 1
                nl.boot_us = lo - 5 * SECOND
            emit(nl, rng, plan(rng, style.slots, lo, hi, (500, longest), (50, 2000), 0.4))
        garble(nl, rng, 3)
        logs[node] = nl
    return logs


def make_live(logs: Mapping[str, NodeLog], seed: int, start_us: int, end_us: int) -> None:
    """Each node's lines over [start_us, end_us) after its backlog (same llama-server): short
    requests (50-800 ms), in parallel on the two-slot nodes; replaces `lines`."""
    for node, nl in logs.items():
        rng = random.Random(f"{seed}:{node}:live")
        nl.lines = []
        emit(nl, rng, plan(rng, nl.style.slots, start_us, end_us, (50, 800), (20, 400), 0.4))
        garble(nl, rng, 1)


def dump_text(node: str, lines: list[DemoLine]) -> str:
    return "".join(short_iso(node, line) + "\n" for line in lines)


def slice_ends(node1: NodeLog, start_us: int, end_us: int, slices: int) -> list[int]:
    """Where the backlog is cut into `slices`: each cut a microsecond after one of node1's
    launch lines, so that the request is in flight at the cut and holds the watermark before it
    (the next slice, written later with older journal times, must never be late)."""
    launches = [x.time_us for x in node1.lines if "launch_slot_" in x.message]
    cuts = []
    for k in range(1, slices):
        target = start_us + (end_us - start_us) * k // slices
        cuts.append(next(t for t in launches if t >= target) + 1)
    return [*cuts, end_us + 1]


def append_lines(paths: Mapping[str, Path], logs: Mapping[str, NodeLog], lo: int, hi: int) -> None:
    """Every node's lines with a journal time in [lo, hi), appended."""
    for n, nl in logs.items():
        with paths[n].open("a", encoding="utf-8") as f:
            f.write(dump_text(n, [x for x in nl.lines if lo <= x.time_us < hi]))


# -- the daemon as a real process ---------------------------------------------------------------

# A request in flight at a slice's end must hold the watermark there while the daemon waits for
# the next slice, however long ago its start is by the clock (the daemon lets go of one after
# max_request_seconds): so the longest request expected is longer than the backlog.
MAX_REQUEST_S = 10 * 86400


def daemon(directory: Path, paths: Mapping[str, Path], since_us: int) -> DaemonProcess:
    return DaemonProcess(
        directory,
        {
            "since": iso(since_us),
            "max_request_seconds": MAX_REQUEST_S,
            "nodes": file_nodes(paths),
        },
    )


class Writer(threading.Thread):
    """Appends each line when its journal time has come, as a live llama-server's journal grows.

    Should the writer fall behind (the machine busy), the lines from there on are stamped later
    by as much, in order and with their spacing kept: a line always carries about the time it is
    written at, so nothing the live daemon reads can be late because the test was slow."""

    SLACK_US = 100 * MS  # how far behind its journal time a line may be written before shifting

    def __init__(self, paths: Mapping[str, Path], logs: Mapping[str, NodeLog]) -> None:
        super().__init__(name="writer", daemon=True)
        self.paths = paths
        self.queue = list(
            heapq.merge(
                *([(x.time_us, n, x) for x in nl.lines] for n, nl in logs.items()),
                key=lambda item: item[0],
            )
        )
        self.halt = threading.Event()
        self.written = 0
        self.shift_us = 0  # how much later than planned the lines are stamped now
        self.last_us = 0  # the journal time of the last line written
        self.errors: list[BaseException] = []

    def run(self) -> None:
        files: dict[str, IO[str]] = {}
        try:
            files = {n: p.open("a", encoding="utf-8") for n, p in self.paths.items()}
            i = 0
            while i < len(self.queue) and not self.halt.is_set():
                now = now_us()
                self.shift_us = max(self.shift_us, now - self.queue[i][0] - self.SLACK_US)
                due: dict[str, list[str]] = {}
                while i < len(self.queue) and self.queue[i][0] + self.shift_us <= now:
                    t, node, x = self.queue[i]
                    self.last_us = t + self.shift_us
                    stamped = DemoLine(self.last_us, x.pid, x.message)
                    due.setdefault(node, []).append(short_iso(node, stamped) + "\n")
                    i += 1
                for node, texts in due.items():
                    files[node].write("".join(texts))
                    files[node].flush()
                self.written = i
                if i < len(self.queue):
                    wait_us = self.queue[i][0] + self.shift_us - now_us()
                    self.halt.wait(min(0.05, max(0.0, wait_us / SECOND)))
        except BaseException as e:
            self.errors.append(e)
            raise
        finally:
            for f in files.values():
                f.close()


# -- reading /metrics --------------------------------------------------------------------------


def entries(samples: Samples, nodes: Iterable[str]) -> dict[str, int]:
    return {n: int(value(samples, "smllm_source_entries_total", node=n)) for n in nodes}


def watermark_us(samples: Samples) -> int:
    return round(value(samples, "smllm_accounted_until_timestamp_seconds") * SECOND)


def settled(d: DaemonProcess, lines: Mapping[str, int], last_us: int) -> Samples | None:
    """Every line read, nothing in flight and the watermark past the last line, as served."""
    samples = d.metrics()
    done = (
        entries(samples, lines) == dict(lines)
        and all(value(samples, "smllm_node_requests_in_flight", node=n) == 0 for n in lines)
        and watermark_us(samples) > last_us
    )
    return samples if done else None


def count_lines(paths: Mapping[str, Path]) -> dict[str, int]:
    return {n: p.read_bytes().count(b"\n") for n, p in paths.items()}


# -- 1. SIGKILL at many points while a large dump is read and lines keep coming ---------------

BACKLOG_HOURS = 72  # ~207k lines a node
SLICES = 4  # the backlog is written in this many slices, one before each of the first runs
LIVE_SECONDS = 25
MIN_KILLS = 12


@dataclass(frozen=True)
class Kill:
    run: int
    phase: str  # "backlog" (a slice written before the run) or "live" (lines kept coming)
    after: str  # what the kill waited for: "progress" (a checkpoint past the start) or "ready"
    delay_s: float  # random, after that
    started: int  # entries the run served first (what the kill before it left, at least)
    left: dict[str, int]  # entries in the checkpoint the kill left, which the next run resumes


def checkpointed(d: DaemonProcess) -> dict[str, int]:
    """The entries each node had read in the checkpoint on disk."""
    nodes = d.checkpoint()["accounting"]["nodes"]
    return {n: int(c["entries"]) for n, c in nodes.items()}


def progressed(d: DaemonProcess, nodes: Iterable[str], entries_before: int) -> bool:
    """Has the run served (so checkpointed) more entries than `entries_before`?"""
    return sum(entries(d.metrics(), nodes).values()) > entries_before


def restart(d: DaemonProcess, watch: Watch, nodes: Iterable[str]) -> int:
    """A run started; the entries it serves first (the checkpoint the last kill left, or more)."""
    d.start()
    return sum(entries(watch.checked(d.scrape, d.run), nodes).values())


@pytest.mark.slow
def test_sigkill_at_many_points(tmp_path: Path) -> None:
    seed = int(os.environ.get("SMLLM_CRASH_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"kill points: seed {seed} (SMLLM_CRASH_SEED={seed} repeats them)")
    rng = random.Random(seed)
    end = now_us() - SECOND
    start = (end - BACKLOG_HOURS * 3600 * SECOND) // SECOND * SECOND
    logs = make_backlog(seed, start, end)
    paths = {n: tmp_path / f"{n}.log" for n in logs}
    for p in paths.values():
        p.touch()
    backlog_lines = {n: len(nl.lines) for n, nl in logs.items()}
    cuts = slice_ends(logs["node1"], start, end, SLICES)
    print(f"backlog {backlog_lines} lines since {iso(start)}, in {SLICES} slices")

    kills: list[Kill] = []
    writer: Writer | None = None
    with (
        daemon(tmp_path / "crashing", paths, start) as d,
        Watch(lambda: d.url if d.serving is not None else None, 0.05, lambda: d.run) as watch,
    ):
        try:
            # the backlog, a slice at a time, each written while no daemon runs
            for lo, hi in itertools.pairwise([start, *cuts]):
                append_lines(paths, logs, lo, hi)
                first = restart(d, watch, paths)
                wait_for(
                    functools.partial(progressed, d, paths, first),
                    60,
                    f"run {d.run}: a checkpoint with more than its start",
                )
                delay = round(rng.uniform(0.0, 0.5), 3)
                time.sleep(delay)  # a random moment after that: whatever the daemon is doing
                d.kill()
                kills.append(Kill(d.run, "backlog", "progress", delay, first, checkpointed(d)))
            assert count_lines(paths) == backlog_lines

            # the live tail: lines written as their time comes, runs killed at random moments
            live_start = now_us() + SECOND // 2
            make_live(logs, seed, live_start, live_start + LIVE_SECONDS * SECOND)
            expected_lines = {n: backlog_lines[n] + len(nl.lines) for n, nl in logs.items()}
            writer = Writer(paths, logs)
            writer.start()
            while True:
                first = restart(d, watch, paths)
                if not writer.is_alive() and len(kills) >= MIN_KILLS:
                    break  # every line is written: this run is the last, left to catch up
                delay = round(rng.uniform(0.1, 2.0), 3)
                time.sleep(delay)  # the kill point: a random moment, not a wait for a condition
                d.kill()
                kills.append(Kill(d.run, "live", "ready", delay, first, checkpointed(d)))
            writer.join(10)
            assert not writer.is_alive() and not writer.errors, writer.errors
            assert count_lines(paths) == expected_lines
            final = wait_for(
                lambda: settled(d, expected_lines, writer.last_us), 60, "the last run caught up"
            )
            watch.checked(d.scrape, d.run)
            # no scrape in flight at SIGTERM: one then makes the daemon log a CancelledError
            # traceback from exporter/web/server.py on its way out, which is not what this test is about
            watch.stop()
            d.stop()
        finally:
            if writer is not None:
                writer.halt.set()
    for k in kills:
        print(
            f"  run {k.run:2d} ({k.phase}) killed {k.delay_s:5.3f} s after {k.after}; "
            f"started at {k.started}, left {k.left}"
        )
    print(
        f"{len(kills)} kills, {watch.scrapes} scrapes over {len(watch.runs_seen)} runs, "
        f"the live lines stamped up to {writer.shift_us / SECOND:.3f} s late"
    )

    # what was served never went back, across every kill and restart (the watch asserted it)
    assert len(watch.runs_seen) == d.run, "a run was never scraped"
    # kill points: during the backlog, each leaving a checkpoint with progress inside it (the
    # last slice's possibly at its end), and during the live tail
    backlog_kills = [k for k in kills if k.phase == "backlog"]
    assert len(backlog_kills) == SLICES
    assert all(sum(k.left.values()) > k.started for k in backlog_kills), backlog_kills
    assert all(any(k.left[n] < backlog_lines[n] for n in paths) for k in backlog_kills[:-1]), (
        backlog_kills
    )
    assert len(kills) >= MIN_KILLS
    for run in range(1, d.run + 1):
        text = d.log_text(run)
        assert "Traceback" not in text and "starting every node from since=" not in text, text
        assert "not the file of the saved position" not in text, text

    # the same files counted from scratch, over [since, the served watermark]
    mismatches = against_report(final, paths, start)
    health = {
        (name, n): value(final, name, node=n)
        for n in paths
        for name in (
            "smllm_late_intervals_total",  # late parts are missing from busy, concurrency, mix
            "smllm_source_gaps_total",
            "smllm_source_reconnects_total",
        )
    }
    assert not any(health.values()), (health, mismatches)
    assert value(final, "smllm_checkpoint_errors_total") == 0
    assert not mismatches, "\n".join(mismatches)

    # and a fresh daemon over the same files, with an empty state_dir
    with daemon(tmp_path / "fresh", paths, start) as fresh:
        fresh.start()
        again = wait_for(
            lambda: settled(fresh, expected_lines, writer.last_us), 60, "the fresh run caught up"
        )
        fresh.stop()
    mismatches = against_fresh(final, again)
    assert not mismatches, "\n".join(mismatches)
    assert total(again, "smllm_late_intervals_total") == 0
    assert total(again, "smllm_requests_untimed_total", reason="cancelled") > 0
    assert total(again, "smllm_untimed_request_seconds_total", reason="cancelled") > 0
    # (every occupancy without timing here is a client's cancel)
    assert total(again, "smllm_requests_untimed_total") == total(
        again, "smllm_requests_untimed_total", reason="cancelled"
    )
    assert total(again, "smllm_parse_errors_total") == 4 * len(paths)
    assert value(again, "smllm_requests_aborted_total", node="node2") == 1


def against_report(  # noqa: C901 (every served family against the report, one after another)
    samples: Samples, paths: Mapping[str, Path], since_us: int
) -> list[str]:
    """Where the served figures differ from the report of the same files."""
    kinds = Kinds(DEFAULT_RULES)
    until = watermark_us(samples)
    snap = report_of_dumps(paths, kinds, since_us, until, MAX_REQUEST_S * SECOND).snapshot
    bad: list[str] = []

    def same(what: str, served: float | None, want: float, exact: bool = False) -> None:
        ok = served is not None and (served == want if exact else abs(served - want) <= 1e-6)
        if not ok:
            bad.append(f"{what}: served {served}, from scratch {want}")

    for n in snap.nodes:
        node = n.name
        for kind, c in n.kinds.items():
            lbl = {"node": node, "kind": kind}
            for name, attr in (
                ("smllm_requests_total", "requests"),
                ("smllm_tokens_total", "tokens"),
                ("smllm_prompt_tokens_total", "prompt_tokens"),
                ("smllm_generated_tokens_total", "generated_tokens"),
            ):
                same(f"{name}{lbl}", sample(samples, name, **lbl), getattr(c, attr), True)
            for name, attr in (
                ("smllm_request_seconds_total", "request_us"),
                ("smllm_prompt_seconds_total", "prompt_us"),
                ("smllm_generation_seconds_total", "generation_us"),
            ):
                same(f"{name}{lbl}", sample(samples, name, **lbl), getattr(c, attr) / SECOND)
            hist = "smllm_request_duration_seconds"
            same(f"{hist}_count{lbl}", sample(samples, hist + "_count", **lbl), c.requests, True)
            same(f"{hist}_sum{lbl}", sample(samples, hist + "_sum", **lbl), c.request_us / SECOND)
            cumulative = 0
            for b_us, count in zip([*snap.buckets_us, None], c.buckets, strict=True):
                cumulative += count
                le = "+Inf" if b_us is None else repr(b_us / SECOND)
                got = sample(samples, hist + "_bucket", **lbl, le=le)
                same(f"{hist}_bucket{lbl} le={le}", got, cumulative, True)
        same(
            f"smllm_node_busy_seconds_total{{node={node}}}",
            sample(samples, "smllm_node_busy_seconds_total", node=node),
            n.busy_us / SECOND,
        )
        same(
            f"smllm_slot_busy_seconds_total{{node={node}}}",
            sample(samples, "smllm_slot_busy_seconds_total", node=node),
            n.slot_busy_us / SECOND,
        )
        for reason in REASONS:
            lbl = {"node": node, "reason": reason}
            count, us = n.untimed[reason]
            name = "smllm_requests_untimed_total"
            same(f"{name}{lbl}", sample(samples, name, **lbl), count, True)
            name = "smllm_untimed_request_seconds_total"
            same(f"{name}{lbl}", sample(samples, name, **lbl), us / SECOND)
        for name, attr in (
            ("smllm_parse_errors_total", "parse_errors"),
            ("smllm_requests_aborted_total", "aborted"),
            ("smllm_server_restarts_total", "restarts"),
        ):
            same(f"{name}{{node={node}}}", sample(samples, name, node=node), getattr(n, attr), True)
        assert n.last_end_us is not None
        same(
            f"last request end {node}",
            sample(samples, "smllm_node_last_request_end_timestamp_seconds", node=node),
            n.last_end_us / SECOND,
        )
    for k, v in enumerate(snap.concurrency_us):
        got = sample(samples, "smllm_concurrency_seconds_total", nodes_busy=str(k))
        same(f"smllm_concurrency_seconds_total{{nodes_busy={k}}}", got, v / SECOND)
    for mix, v in snap.mix_us.items():
        got = sample(samples, "smllm_mix_seconds_total", mix=mix)
        same(f"smllm_mix_seconds_total{{mix={mix}}}", got, v / SECOND)
    if not bad:  # the comparison compared something
        assert sum(c.requests for n in snap.nodes for c in n.kinds.values()) > 20_000
    return bad


# Counters a fresh run over the same files must serve exactly as the crashed-and-restarted one.
FRESH_EQUAL = (
    "smllm_requests_total",
    "smllm_tokens_total",
    "smllm_prompt_tokens_total",
    "smllm_generated_tokens_total",
    "smllm_request_seconds_total",
    "smllm_prompt_seconds_total",
    "smllm_generation_seconds_total",
    "smllm_request_duration_seconds_bucket",
    "smllm_request_duration_seconds_count",
    "smllm_request_duration_seconds_sum",
    "smllm_requests_untimed_total",
    "smllm_untimed_request_seconds_total",
    "smllm_parse_errors_total",
    "smllm_late_intervals_total",
    "smllm_requests_aborted_total",
    "smllm_server_restarts_total",
    "smllm_source_entries_total",
    "smllm_node_busy_seconds_total",
    "smllm_slot_busy_seconds_total",
    "smllm_node_last_request_end_timestamp_seconds",
)


def against_fresh(crashed: Samples, fresh: Samples) -> list[str]:
    """Where the two runs differ. Both watermarks are past every request, so busy seconds, and
    the seconds with 1..N nodes busy or some kind running, are final in both (only the idle
    seconds differ: the watermarks differ)."""
    bad: list[str] = []
    keys = {
        key
        for key in crashed.keys() | fresh.keys()
        if key[0] in FRESH_EQUAL
        or (key[0] == "smllm_concurrency_seconds_total" and key[1] != (("nodes_busy", "0"),))
        or (key[0] == "smllm_mix_seconds_total" and key[1] != (("mix", "idle"),))
    }
    for key in sorted(keys):
        a, b = crashed.get(key), fresh.get(key)
        if a is None or b is None or abs(a - b) > 1e-6:
            bad.append(f"{key}: after the kills {a}, fresh {b}")
    return bad


def nothing_went_wrong(samples: Samples, node: str) -> None:
    """No request of `node` cancelled (or released untimed for any reason, or lost), aborted or
    late, and no parse error."""
    for reason in REASONS:
        assert value(samples, "smllm_requests_untimed_total", node=node, reason=reason) == 0, reason
    for name in (
        "smllm_parse_errors_total",
        "smllm_late_intervals_total",
        "smllm_requests_aborted_total",
    ):
        assert value(samples, name, node=node) == 0, name


# -- 2. a kill inside a multi-line era C block ---------------------------------------------------


def wait_until(t_us: int) -> None:
    """Until the clock reaches a line's journal time (bounded: the times are seconds away)."""
    wait_for(lambda: now_us() >= t_us, (t_us - now_us()) / SECOND + 5, "the line's time")


def append(path: Path, node: str, pid: int, lines: list[tuple[int, str]]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(dump_text(node, [DemoLine(t, pid, msg) for t, msg in lines]))


# The era C block is stamped this far ahead of the clock (a node whose clock runs fast): its stop
# line waits 1 s of journal time for the block, and the daemon's journal time follows the clock
# (less 2 s) once it has read everything; ahead by more than the wait before the kill, the stop
# line is still waiting at the kill, however slow the machine.
AHEAD_S = 15
HALF_BLOCK_WAIT_S = 10


def test_kill_inside_an_era_c_block(tmp_path: Path) -> None:
    node, pid, path = "node1", 4242, tmp_path / "node1.log"
    prompt_ms, prompt_tokens, generated = 523.16, 1098, 31
    launch = now_us()
    start_us = launch - 400  # the launch line is logged just after the start
    ids = "id  0 | task 36 |"
    append(path, node, pid, [(launch, f"slot launch_slot_: {ids} processing task")])
    with daemon(tmp_path / "daemon", {node: path}, launch - 60 * SECOND) as d:
        d.start()
        wait_for(
            lambda: value(d.metrics(), "smllm_node_requests_in_flight", node=node) == 1,
            10,
            "the request in flight",
        )
        # the block of a request ending AHEAD_S from now; the kill catches half of it
        end_us = start_us + (now_us() + AHEAD_S * SECOND - start_us) // 10 * 10
        total_ms = (end_us - start_us) / 1000  # whole hundredths of a millisecond
        gen_ms = round(total_ms - prompt_ms - 0.22, 2)
        append(
            path,
            node,
            pid,
            [
                (end_us, f"slot      release: {ids} stop processing: n_past = 1129, truncated = 0"),
                (end_us, f"slot print_timing: {ids} "),
                (
                    end_us,
                    f"prompt eval time = {prompt_ms:10.2f} ms / {prompt_tokens:5d} tokens "
                    "(    0.48 ms per token,  2098.82 tokens per second)",
                ),
            ],
        )
        size = path.stat().st_size
        wait_for(
            lambda: entries(d.metrics(), [node]) == {node: 4},
            HALF_BLOCK_WAIT_S,
            "the half block checkpointed",
        )
        d.kill()
        assert now_us() < end_us - 3 * SECOND  # (the stop line cannot have been decided yet)
        # the checkpoint the next run starts from holds the half block, read up to its end
        saved = d.checkpoint()
        assert saved["positions"][node].endswith(f":{size}")
        assert saved["parsers"][node]["block"] == [0, 36, round(prompt_ms * 1000), 1098, None, None]
        assert saved["parsers"][node]["pending_stops"] == [[0, 36, end_us]]
        append(
            path,
            node,
            pid,
            [
                (
                    end_us,
                    f"       eval time = {gen_ms:10.2f} ms / {generated:5d} tokens "
                    "(   79.89 ms per token,    12.52 tokens per second)",
                ),
                (
                    end_us,
                    f"      total time = {total_ms:10.2f} ms / {prompt_tokens + generated:5d} tokens",
                ),
                (end_us + 200, "srv  log_server_r: request: POST /completion 127.0.0.1 200"),
            ],
        )
        d.start()
        samples = wait_for(
            lambda: settled(d, {node: 7}, end_us), AHEAD_S + 15, "the rest of the block counted"
        )
        log_text = d.stop()
    assert f"following {path} from byte {size}" in log_text
    lbl = {"node": node, "kind": "extraction"}
    assert total(samples, "smllm_requests_total") == 1
    assert value(samples, "smllm_requests_total", **lbl) == 1
    assert value(samples, "smllm_prompt_tokens_total", **lbl) == prompt_tokens
    assert value(samples, "smllm_prompt_seconds_total", **lbl) == pytest.approx(prompt_ms / 1000)
    assert value(samples, "smllm_generated_tokens_total", **lbl) == generated
    assert value(samples, "smllm_generation_seconds_total", **lbl) == pytest.approx(gen_ms / 1000)
    assert value(samples, "smllm_tokens_total", **lbl) == prompt_tokens + generated
    assert value(samples, "smllm_request_seconds_total", **lbl) == pytest.approx(total_ms / 1000)
    assert value(samples, "smllm_node_busy_seconds_total", node=node) == pytest.approx(
        total_ms / 1000, abs=1e-6
    )
    nothing_went_wrong(samples, node)


# -- 3. a kill while a request is in flight ---------------------------------------------------------


def test_kill_while_a_request_is_in_flight(tmp_path: Path) -> None:
    node, pid, path = "node0", 5151, tmp_path / "node0.log"
    launch = now_us()
    start_us = launch - 400
    ids = "id  1 | task 22576 |"
    append(path, node, pid, [(launch, f"slot launch_slot_: {ids} processing task, is_child = 0")])
    with daemon(tmp_path / "daemon", {node: path}, launch - 60 * SECOND) as d:
        d.start()

        def in_flight() -> Samples | None:
            s = d.metrics()
            return s if value(s, "smllm_node_requests_in_flight", node=node) == 1 else None

        before = wait_for(in_flight, 10, "the request in flight served")
        oldest = value(before, "smllm_node_oldest_in_flight_start_timestamp_seconds", node=node)
        assert oldest == pytest.approx(launch / SECOND, abs=1e-6)
        d.kill()
        d.start()
        after = d.metrics()  # the first thing served after the restart
        assert value(after, "smllm_node_requests_in_flight", node=node) == 1
        assert value(after, "smllm_node_busy", node=node) == 1
        assert value(after, "smllm_nodes_busy") == 1
        assert (
            value(after, "smllm_node_oldest_in_flight_start_timestamp_seconds", node=node) == oldest
        )
        assert total(after, "smllm_requests_total") == 0
        # the request ends now: its timing block (era D) and stop line
        end_us = now_us() + 300_000
        total_us = (end_us - start_us) // 10 * 10
        end_us = start_us + total_us
        wait_until(end_us)
        total_ms = total_us / 1000
        prompt_ms = round(total_ms / 4, 2)
        gen_ms = round(total_ms - prompt_ms, 2)
        append(
            path,
            node,
            pid,
            [
                (
                    end_us,
                    f"slot print_timing: {ids} prompt eval time = {prompt_ms:10.2f} ms /  2400 tokens (    0.10 ms per token, 10000.00 tokens per second)",
                ),
                (
                    end_us,
                    f"slot print_timing: {ids}        eval time = {gen_ms:10.2f} ms /    30 tokens (   30.00 ms per token,    33.33 tokens per second)",
                ),
                (
                    end_us,
                    f"slot print_timing: {ids}       total time = {total_ms:10.2f} ms /  2430 tokens",
                ),
                (
                    end_us + 30,
                    f"slot      release: {ids} stop processing: n_tokens = 2430, truncated = 0",
                ),
            ],
        )
        samples = wait_for(
            lambda: settled(d, {node: 5}, end_us + 30), 15, "the request counted and accounted"
        )
        d.stop()
    lbl = {"node": node, "kind": "extraction"}
    assert value(samples, "smllm_requests_total", **lbl) == 1
    assert total(samples, "smllm_requests_total") == 1
    assert value(samples, "smllm_tokens_total", **lbl) == 2430
    assert value(samples, "smllm_request_seconds_total", **lbl) == pytest.approx(total_ms / 1000)
    assert value(samples, "smllm_node_busy_seconds_total", node=node) == pytest.approx(
        total_us / SECOND, abs=1e-6
    )
    assert value(samples, "smllm_node_busy", node=node) == 0
    assert sample(samples, "smllm_node_oldest_in_flight_start_timestamp_seconds", node=node) is None
    assert value(
        samples, "smllm_node_last_request_end_timestamp_seconds", node=node
    ) == pytest.approx(end_us / SECOND, abs=1e-6)
    nothing_went_wrong(samples, node)
