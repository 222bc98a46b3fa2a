"""The checkpoint (docs/design.md): the state file itself, the accounting state round trip, config
changes across restarts, and the daemon resuming, refusing bad files and riding out a full or
read-only disk (a real tmpfs) while serving only checkpointed values."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from exporter.base.times import SECOND
from exporter.checkpoint.codec import encode
from exporter.checkpoint.layout import VERSION
from exporter.checkpoint.store import NAME, Checkpoint
from exporter.commands.demo import NODES, node_lines, short_iso
from exporter.config.schema import Config
from exporter.daemon import loop
from exporter.daemon.daemon import Daemon

from support.checkpoints import END_S, ManualClock, mode_of, names_in
from support.daemon_thread import DaemonThread
from support.dumps import END, SINCE, START, config_for, write_dumps
from support.scrape import Samples, parse_metrics, sample
from support.tools import IN_CI, wait_for

TARGET_S = END_S + 1000  # where the daemons compared with each other stop their clocks


LIVE = frozenset(
    {
        "smllm_source_up",
        "smllm_source_lag_seconds",
        "smllm_source_clock_skew_seconds",
        "smllm_exporter_build_info",
    }
)


def line_counts(paths: dict[str, Path]) -> dict[str, int]:
    return {n: p.read_bytes().count(b"\n") for n, p in paths.items()}


def checkpointed(samples: Samples) -> Samples:
    """Every smllm_ sample a checkpoint holds (all but what the sources are doing now)."""
    return {k: v for k, v in samples.items() if k[0].startswith("smllm_") and k[0] not in LIVE}


def smllm(samples: Samples) -> Samples:
    return {k: v for k, v in samples.items() if k[0].startswith("smllm_")}


def total(samples: Samples, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def served_caught_up(d: DaemonThread, lines: dict[str, int]) -> Samples | None:
    """The served samples, once they hold every line and every source says it is caught up."""
    s = parse_metrics(d.metrics())
    for node, count in lines.items():
        if sample(s, "smllm_source_entries_total", node=node) != count:
            return None
        if sample(s, "smllm_source_up", node=node) != 1:
            return None
        if sample(s, "smllm_source_lag_seconds", node=node) != 0:
            return None
    return s


def settle(
    d: DaemonThread, clock: ManualClock, lines: dict[str, int], at_s: int | None = None
) -> Samples:
    """Move the clock (so the daemon publishes) until every line is served; then, with `at_s`,
    stop the clock there and return what is served at that instant (same for any daemon that
    has read the same lines)."""

    def step() -> Samples | None:
        clock.advance(0.2)
        return served_caught_up(d, lines)

    served = wait_for(step, 20, f"{lines} served")
    if at_s is None:
        return served
    clock.set(at_s)
    want_us = (at_s - 2) * SECOND  # caught up, nothing in flight: the watermark is now - 2 s

    def at_target() -> Samples | None:
        s = parse_metrics(d.metrics())
        watermark = sample(s, "smllm_accounted_until_timestamp_seconds")
        return s if watermark is not None and round(watermark * SECOND) == want_us else None

    return wait_for(at_target, 10, f"the publish at {at_s}")


def start_daemon(cfg: Config, clock: Callable[[], float]) -> DaemonThread:
    return DaemonThread(Daemon(cfg, clock=clock, publish_seconds=0.1, tick_seconds=0.05))


def requests_in(state: dict[str, Any]) -> int:
    """smllm_requests_total summed over a checkpoint's nodes and kinds."""
    nodes = state["accounting"]["nodes"]
    return sum(int(values[0]) for n in nodes.values() for values in n["kinds"].values())


def tmp_files(directory: Path) -> list[str]:
    return [n for n in names_in(directory) if n.endswith(".tmp")]


@dataclass
class Tmpfs:
    path: Path

    def fill(self) -> Path:
        """Write a file until the filesystem has not one byte left."""
        filler = self.path / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        chunk = b"\0" * 65536
        try:
            while True:
                os.write(fd, chunk)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)
        return filler

    def free(self) -> None:
        (self.path / "filler").unlink()

    def remount(self, mode: str) -> None:
        """`mode` is ro or rw; retried while a write in progress makes the mount busy."""

        def remounted() -> bool:
            r = subprocess.run(
                ["mount", "-o", f"remount,{mode}", str(self.path)],
                capture_output=True,
                text=True,
                check=False,
            )
            return r.returncode == 0

        wait_for(remounted, 10, f"mount -o remount,{mode} {self.path}")

    def read_only(self) -> None:
        self.remount("ro")

    def read_write(self) -> None:
        self.remount("rw")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Tmpfs]:
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    try:
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(mnt)],
            capture_output=True,
            text=True,
            check=False,
        )
        why = r.stderr.strip() if r.returncode else ""
    except OSError as e:
        why = str(e)
    if why:
        message = f"cannot mount a tmpfs ({why}); the full-disk and read-only tests need root"
        if IN_CI:
            pytest.fail(f"{message}: CI must run them")
        pytest.skip(f"{message}; not CI, so skipped (CI runs them as root)")
    try:
        yield Tmpfs(mnt)
    finally:
        if subprocess.run(["umount", str(mnt)], check=False).returncode:
            subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("how", ["disk full", "too big for what is left", "read-only"])
def test_a_failed_write_keeps_the_previous_checkpoint(tmpfs: Tmpfs, how: str) -> None:
    cp = Checkpoint(tmpfs.path / "state")
    old = encode({"x": 1, "nodes": {"a": [1, 2, 3]}})
    cp.write(old)
    new = encode({"x": 2})
    if how == "disk full":
        tmpfs.fill()
    elif how == "too big for what is left":  # some of it is written before the disk fills
        new = encode({"x": 2, "blob": "y" * 1_000_000})
    else:
        tmpfs.read_only()
    with pytest.raises(OSError) as e:
        cp.write(new)
    assert e.value.errno == (errno.EROFS if how == "read-only" else errno.ENOSPC)
    assert names_in(cp.path.parent) == [NAME]  # no temp file left behind
    assert cp.path.read_bytes() == old
    assert cp.load() == {"format": VERSION, "x": 1, "nodes": {"a": [1, 2, 3]}}
    # once there is room (or the directory is writable) again, the next write goes through
    if how == "disk full":
        tmpfs.free()
    elif how == "read-only":
        tmpfs.read_write()
    else:
        new = encode({"x": 2})
    cp.write(new)
    assert cp.load() == {"format": VERSION, "x": 2}
    assert names_in(cp.path.parent) == [NAME]


@pytest.fixture(scope="module")
def from_scratch(tmp_path_factory: pytest.TempPathFactory) -> Samples:
    """What a daemon with no checkpoint serves for the whole dumps, its clock stopped at
    TARGET_S."""
    paths = write_dumps(tmp_path_factory.mktemp("scratch"))
    clock = ManualClock(END_S + 10)
    with start_daemon(config_for(paths), clock) as d:
        return settle(d, clock, line_counts(paths), TARGET_S)


def demo_halves(node: str, mid_us: int) -> tuple[str, str]:
    """The node's dump (as write_dumps writes it) cut inside the first timing block logged after
    `mid_us`: its launch line and prompt line before the cut, the rest of the block after."""
    lines = list(node_lines(node, 7, START, END))
    cut = next(
        i + 1
        for i, line in enumerate(lines)
        if line.time_us >= mid_us and "prompt eval time" in line.message
    )
    text = [short_iso(node, line) + "\n" for line in lines]
    return "".join(text[:cut]), "".join(text[cut:])


def test_restart_resumes_the_served_counters_and_counts_nothing_twice(
    tmp_path: Path, from_scratch: Samples
) -> None:
    mid = START + 3600 * SECOND
    halves = {n: demo_halves(n, mid) for n in NODES}
    paths = {n: tmp_path / f"{n}.log" for n in NODES}
    for n, (head, _) in halves.items():
        paths[n].write_text(head)
    cfg = config_for(paths)

    # the first daemon reads the first halves: every node stopped inside a timing block
    clock1 = ManualClock(mid // SECOND + 30)
    with start_daemon(cfg, clock1) as d1:
        last = settle(d1, clock1, line_counts(paths))
    assert all(sample(last, "smllm_node_requests_in_flight", node=n) == 1 for n in NODES)
    assert total(last, "smllm_requests_total") > 0
    assert names_in(cfg.state_dir) == [NAME]
    assert mode_of(cfg.state_dir / NAME) == 0o600
    assert mode_of(cfg.state_dir) == 0o700

    # lines logged while it was down
    for n, (_, second) in halves.items():
        with paths[n].open("a") as f:
            f.write(second)

    clock2 = ManualClock(END_S + 10)  # stopped: nothing is published before it moves
    with start_daemon(cfg, clock2) as d2:
        first = parse_metrics(d2.metrics())
        assert checkpointed(first) == checkpointed(last)
        assert any(n.endswith("_total") for n, _ in checkpointed(first))
        caught_up = settle(d2, clock2, line_counts(paths), TARGET_S)
    assert smllm(caught_up) == smllm(from_scratch)
    # the request cut in two was counted once, with its prompt tokens from before the restart
    assert total(caught_up, "smllm_prompt_tokens_total") == total(
        from_scratch, "smllm_prompt_tokens_total"
    )
    assert total(caught_up, "smllm_late_intervals_total") == 0


def test_shutdown_writes_a_last_checkpoint_of_everything_applied(tmp_path: Path) -> None:
    """With publishing held off nothing is checkpointed (nor published) while it runs; stopping
    it writes what it applied, and the next daemon serves that from its first scrape."""
    paths = write_dumps(tmp_path)
    lines = line_counts(paths)
    cfg = config_for(paths)
    clock = ManualClock(END_S + 10)

    def applied(d: DaemonThread) -> bool:  # what the ingest loop holds, not what it serves
        return all(d.daemon.acc.nodes[n].entries == k for n, k in lines.items())

    held = Daemon(cfg, clock=clock, publish_seconds=3600, caught_up_publish_seconds=3600)
    with DaemonThread(held) as d1:
        wait_for(lambda: applied(d1), 20, "every line applied")
        assert not (cfg.state_dir / NAME).exists()
        assert total(parse_metrics(d1.metrics()), "smllm_source_entries_total") == 0
        requests = sum(c.requests for ns in d1.daemon.acc.nodes.values() for c in ns.kinds.values())
    saved = Checkpoint(cfg.state_dir).load()
    assert saved is not None
    assert requests_in(saved) == requests > 0
    assert {n: s["entries"] for n, s in saved["accounting"]["nodes"].items()} == lines
    assert all(saved["positions"][n].endswith(f":{p.stat().st_size}") for n, p in paths.items())

    with start_daemon(cfg, clock) as d2:
        first = parse_metrics(d2.metrics())
        assert total(first, "smllm_requests_total") == requests
        for n, k in lines.items():
            assert sample(first, "smllm_source_entries_total", node=n) == k


def test_a_backlog_read_is_published_swept_up_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once every node has caught up, the publish ticks first: its checkpoint holds none of the
    backlog's intervals still waiting for the watermark, and it serves the figures up to now - 2 s.
    (No other tick comes: the loop's own, busy or idle, are an hour apart here.)"""
    monkeypatch.setattr(loop, "TICK_BUSY_S", 3600.0)
    paths = write_dumps(tmp_path)
    lines = line_counts(paths)
    cfg = config_for(paths)
    clock = ManualClock(END_S + 10)
    cp = Checkpoint(cfg.state_dir)

    def swept() -> dict[str, Any] | None:
        saved = cp.load()
        if saved is None or saved["accounting"]["pending"]:
            return None
        done = {n: s["entries"] for n, s in saved["accounting"]["nodes"].items()} == lines
        return saved if done else None

    daemon = Daemon(cfg, clock=clock, publish_seconds=3600, tick_seconds=3600)
    with DaemonThread(daemon) as d:
        saved = wait_for(swept, 20, "a checkpoint of every line, no interval pending")
        assert saved["accounting"]["watermark_us"] == (END_S + 8) * SECOND

        def published() -> Samples | None:  # (the publish comes once the checkpoint is written)
            s = parse_metrics(d.metrics())
            at = sample(s, "smllm_accounted_until_timestamp_seconds")
            return s if at == END_S + 8 else None

        served = wait_for(published, 10, "the swept figures served")
    assert total(served, "smllm_source_entries_total") == sum(lines.values())


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(b"\x00\xffGARBAGE\x00" * 50, id="garbage bytes"),
        pytest.param(b'{"format": 1}', id="right format, wrong structure"),
    ],
)
def test_a_bad_checkpoint_is_set_aside_and_the_daemon_counts_from_since(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, from_scratch: Samples, bad: bytes
) -> None:
    caplog.set_level(logging.INFO)
    paths = write_dumps(tmp_path)
    cfg = config_for(paths)
    cfg.state_dir.mkdir(mode=0o700)
    (cfg.state_dir / NAME).write_bytes(bad)
    clock = ManualClock(END_S + 10)
    with start_daemon(cfg, clock) as d:
        served = settle(d, clock, line_counts(paths), TARGET_S)
    assert smllm(served) == smllm(from_scratch)
    aside = cfg.state_dir / f"{NAME}.unusable-{(END_S + 10) * 1_000_000}"
    assert aside.read_bytes() == bad
    assert names_in(cfg.state_dir) == sorted([NAME, aside.name])
    assert Checkpoint(cfg.state_dir).load() is not None  # a good one written since
    refused = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR and str(cfg.state_dir / NAME) in r.getMessage()
    ]
    assert len(refused) == 1, refused
    assert f"starting every node from since={SINCE} instead" in refused[0]
    assert f"kept as {aside}" in refused[0]


@dataclass(frozen=True)
class Failure:
    name: str
    start: Callable[[Tmpfs], object]
    stop: Callable[[Tmpfs], object]
    strerror: str


FAILURES = [
    pytest.param(Failure("full", Tmpfs.fill, Tmpfs.free, "No space left"), id="disk full"),
    pytest.param(
        Failure("ro", Tmpfs.read_only, Tmpfs.read_write, "Read-only file system"), id="read-only"
    ),
]


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failing_checkpoint_keeps_serving_the_last_one_and_recovers(
    tmpfs: Tmpfs, tmp_path: Path, caplog: pytest.LogCaptureFixture, failure: Failure
) -> None:
    caplog.set_level(logging.INFO)
    paths = write_dumps(tmp_path)
    cfg = replace(config_for(paths), state_dir=tmpfs.path / "state")
    cp = Checkpoint(cfg.state_dir)
    extra = [short_iso("node0", x) + "\n" for x in node_lines("node0", 8, END, END + 600 * SECOND)]
    extra_requests = sum("total time" in x for x in extra)
    assert extra_requests > 0

    def failed_lines() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.ERROR and r.getMessage().startswith(f"checkpoint {cp.path}")
        ]

    def written_again() -> list[str]:
        return [r.getMessage() for r in caplog.records if "written again" in r.getMessage()]

    with DaemonThread(Daemon(cfg, publish_seconds=0.1, tick_seconds=0.05)) as d:

        def scrape() -> Samples:
            return parse_metrics(d.metrics())

        def errors() -> float:
            return sample(scrape(), "smllm_checkpoint_errors_total") or 0

        def served_requests(want: float) -> Samples | None:
            s = scrape()
            return s if total(s, "smllm_requests_total") == want else None

        def counted() -> int:  # what the ingest loop has counted, checkpointed or not
            return sum(c.requests for ns in d.daemon.acc.nodes.values() for c in ns.kinds.values())

        before = wait_for(lambda: served_caught_up(d, line_counts(paths)), 20, "the dumps read")
        r0 = total(before, "smllm_requests_total")
        entries0 = total(before, "smllm_source_entries_total")
        assert requests_in(wait_for(cp.load, 5, "a checkpoint")) == r0

        def one_streak(streak: int, r0: float, entries0: float) -> None:
            e0 = errors()
            failure.start(tmpfs)
            wait_for(lambda: errors() > e0, 10, "a failed checkpoint counted")
            with paths["node0"].open("a") as f:
                f.write("".join(extra))
            wait_for(lambda: counted() == r0 + extra_requests, 10, "the new lines counted")
            e1 = errors()
            wait_for(lambda: errors() >= e1 + 3, 10, "more failed checkpoints")
            # served: still the last checkpoint; the disk: still the last checkpoint
            s = scrape()
            assert total(s, "smllm_requests_total") == r0
            assert total(s, "smllm_source_entries_total") == entries0
            assert requests_in(Checkpoint(cfg.state_dir).load() or {}) == r0
            # a retry in flight holds its temporary file for a moment; none may stay
            wait_for(lambda: not tmp_files(cfg.state_dir) or None, 5, "no temporary file left")
            assert len(failed_lines()) == streak, failed_lines()  # once per streak
            assert failure.strerror in failed_lines()[-1]

            failure.stop(tmpfs)
            s = wait_for(lambda: served_requests(r0 + extra_requests), 10, "new lines served")
            assert total(s, "smllm_source_entries_total") == entries0 + len(extra)
            assert (sample(s, "smllm_checkpoint_errors_total") or 0) >= e1 + 3  # never reset
            assert len(written_again()) == streak
            saved = cp.load()
            assert saved is not None and requests_in(saved) == r0 + extra_requests
            assert saved["checkpoint_errors"] >= e1 + 3

        one_streak(1, r0, entries0)
        one_streak(2, r0 + extra_requests, entries0 + len(extra))
    assert tmp_files(cfg.state_dir) == []
    assert mode_of(cp.path) == 0o600
