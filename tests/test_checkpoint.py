"""The checkpoint (docs/design.md): the state file itself, the accounting state round trip, config
changes across restarts, and the daemon resuming, refusing bad files and riding out a full or
read-only disk (a real tmpfs) while serving only checkpointed values."""

from __future__ import annotations

import copy
import errno
import json
import logging
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_daemon import END, SINCE, START, config_for, write_dumps

from exporter.accounting import (
    DEFAULT_BUCKETS_S,
    SECOND,
    Accounting,
    KindCounters,
    restore,
    state_of,
)
from exporter.checkpoint import FORMAT, LOCK_NAME, NAME, Checkpoint, CheckpointError
from exporter.collector import Renderer
from exporter.config import Config, FileNode
from exporter.daemon import Daemon
from exporter.demo import NODES, node_lines, short_iso
from exporter.kinds import DEFAULT_RULES, KindRule, Kinds, split_rules
from exporter.logline import Event, EventKind, Interval

from support.daemon_thread import DaemonThread
from support.scrape import Samples, parse_metrics, sample
from support.tools import IN_CI, wait_for

# -- helpers --------------------------------------------------------------------------------------

END_S = END // SECOND
TARGET_S = END_S + 1000  # where the daemons compared with each other stop their clocks
LIVE = frozenset(
    {
        "smllm_source_up",
        "smllm_source_lag_seconds",
        "smllm_source_clock_skew_seconds",
        "smllm_exporter_build_info",
    }
)


class ManualClock:
    """A clock that moves only when told to (the daemons' `clock`)."""

    def __init__(self, start_s: float) -> None:
        self._now = start_s
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def set(self, now_s: float) -> None:
        with self._lock:
            assert now_s >= self._now, "the clock never goes back"
            self._now = now_s


def mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o777


def names_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != LOCK_NAME)  # (the daemon's)


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


# -- a real tmpfs, for a full disk and a read-only directory --------------------------------------


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


# == 1. Checkpoint.write ==========================================================================


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_write_makes_a_0600_file_in_a_0700_directory(tmp_path: Path, umask: int) -> None:
    state_dir = tmp_path / "var" / "lib" / "sm-llm-exporter"
    cp = Checkpoint(state_dir)
    old = os.umask(umask)
    try:
        cp.write(Checkpoint.encode({"x": 1}))
    finally:
        os.umask(old)
    assert mode_of(state_dir) == 0o700
    assert mode_of(cp.path) == 0o600
    assert names_in(state_dir) == [NAME]


def test_write_over_a_readable_file_leaves_it_0600(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.write_text("{}")
    cp.path.chmod(0o644)
    cp.write(Checkpoint.encode({"x": 1}))
    assert mode_of(cp.path) == 0o600
    assert cp.load() == {"format": FORMAT, "x": 1}


def test_write_fsyncs_the_file_renames_it_then_fsyncs_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real calls, watched: a crash at any point leaves the old file or the new one."""
    calls: list[tuple[str, ...]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace_(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls.append(("replace", str(src), str(dst)))
        real_replace(src, dst)

    cp = Checkpoint(tmp_path)
    cp.write(Checkpoint.encode({"x": 1}))
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace_)
    cp.write(Checkpoint.encode({"x": 2}))
    monkeypatch.undo()
    assert [c[0] for c in calls] == ["fsync", "replace", "fsync"], calls
    tmp = calls[0][1]
    assert Path(tmp).parent == tmp_path and Path(tmp).name != NAME
    assert calls[1] == ("replace", tmp, str(cp.path))
    assert calls[2] == ("fsync", str(tmp_path))
    assert cp.load() == {"format": FORMAT, "x": 2}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=25,
)
states = st.dictionaries(st.text().filter(lambda k: k != "format"), json_values, max_size=6)


@settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None, max_examples=40
)
@given(first=states, second=states)
def test_write_then_load_round_trips(
    tmp_path: Path, first: dict[str, Any], second: dict[str, Any]
) -> None:
    cp = Checkpoint(tmp_path / "state")
    cp.write(Checkpoint.encode(first))
    assert cp.load() == {"format": FORMAT, **first}
    cp.write(Checkpoint.encode(second))  # replaces the first, whole
    assert cp.load() == {"format": FORMAT, **second}
    assert names_in(cp.path.parent) == [NAME]


@pytest.mark.parametrize("found", [0, 2, 99, "1", None, [1], {"v": 1}])
def test_another_format_is_refused_naming_the_file_and_both_versions(
    tmp_path: Path, found: object
) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.write_text(json.dumps({"format": found, "accounting": {}}))
    with pytest.raises(CheckpointError) as e:
        cp.load()
    message = str(e.value)
    assert str(cp.path) in message
    assert f"format {found!r}" in message
    assert f"reads format {FORMAT}" in message


def test_a_missing_format_is_refused(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.write_text('{"accounting": {}}')
    with pytest.raises(CheckpointError, match="format None"):
        cp.load()


def test_a_failed_replace_leaves_no_temp_file_and_the_old_checkpoint(tmp_path: Path) -> None:
    """The rename fails (the checkpoint's name is taken by a non-empty directory)."""
    cp = Checkpoint(tmp_path)
    cp.path.mkdir()
    (cp.path / "keep").write_text("x")
    with pytest.raises(OSError):
        cp.write(Checkpoint.encode({"x": 2}))
    assert names_in(tmp_path) == [NAME]
    assert names_in(cp.path) == ["keep"]


@pytest.mark.parametrize("how", ["disk full", "too big for what is left", "read-only"])
def test_a_failed_write_keeps_the_previous_checkpoint(tmpfs: Tmpfs, how: str) -> None:
    cp = Checkpoint(tmpfs.path / "state")
    old = Checkpoint.encode({"x": 1, "nodes": {"a": [1, 2, 3]}})
    cp.write(old)
    new = Checkpoint.encode({"x": 2})
    if how == "disk full":
        tmpfs.fill()
    elif how == "too big for what is left":  # some of it is written before the disk fills
        new = Checkpoint.encode({"x": 2, "blob": "y" * 1_000_000})
    else:
        tmpfs.read_only()
    with pytest.raises(OSError) as e:
        cp.write(new)
    assert e.value.errno == (errno.EROFS if how == "read-only" else errno.ENOSPC)
    assert names_in(cp.path.parent) == [NAME]  # no temp file left behind
    assert cp.path.read_bytes() == old
    assert cp.load() == {"format": FORMAT, "x": 1, "nodes": {"a": [1, 2, 3]}}
    # once there is room (or the directory is writable) again, the next write goes through
    if how == "disk full":
        tmpfs.free()
    elif how == "read-only":
        tmpfs.read_write()
    else:
        new = Checkpoint.encode({"x": 2})
    cp.write(new)
    assert cp.load() == {"format": FORMAT, "x": 2}
    assert names_in(cp.path.parent) == [NAME]


# == 2. load() and set_aside() ====================================================================


def test_load_without_a_checkpoint_is_none(tmp_path: Path) -> None:
    assert Checkpoint(tmp_path / "nowhere").load() is None
    assert Checkpoint(tmp_path).load() is None


UNUSABLE = [
    pytest.param(b"\x00\xff\xfe garbage \x89PNG\r\n", id="garbage bytes"),
    pytest.param(b"not json at all", id="not JSON"),
    pytest.param(b'{"format": 1, "accounting": {"origin_us": 17', id="truncated JSON"),
    pytest.param(b"", id="empty file"),
    pytest.param(b"[1, 2, 3]", id="a JSON list"),
    pytest.param(b"null", id="JSON null"),
    pytest.param(b'"format"', id="a JSON string"),
    pytest.param(b'{"format": 1} trailing', id="trailing junk"),
]


@pytest.mark.parametrize("content", UNUSABLE)
def test_an_unusable_file_is_refused_with_its_path(tmp_path: Path, content: bytes) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.write_bytes(content)
    with pytest.raises(CheckpointError) as e:
        cp.load()
    assert str(cp.path) in str(e.value)


def test_an_unreadable_checkpoint_is_refused(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.mkdir()
    with pytest.raises(CheckpointError, match="cannot read") as e:
        cp.load()
    assert str(cp.path) in str(e.value)


def test_a_deeply_nested_file_is_refused(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.write_bytes(b"[" * 100_000)
    with pytest.raises(CheckpointError):
        cp.load()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    content=st.binary(max_size=200)
    | json_values.map(lambda v: json.dumps(v).encode())
    | states.map(lambda s: json.dumps({"format": FORMAT, **s}).encode())
)
def test_load_returns_a_checkpoint_or_refuses_never_anything_else(
    tmp_path: Path, content: bytes
) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.write_bytes(content)
    try:
        loaded = cp.load()
    except CheckpointError as e:
        assert str(cp.path) in str(e)
    else:
        assert isinstance(loaded, dict)
        assert loaded["format"] == FORMAT


def test_set_aside_moves_the_file_away(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path, clock=lambda: 1_790_000_123.9)
    assert cp.set_aside() is None  # nothing to move
    cp.path.write_bytes(b"garbage")
    aside = cp.set_aside()
    assert aside == tmp_path / f"{NAME}.unusable-1790000123900000"
    assert aside.read_bytes() == b"garbage"
    assert not cp.path.exists()
    assert cp.load() is None


# == 3. the accounting state round trip ===========================================================

ORIGIN = 1_790_000_000 * SECOND
ACC_NODES = ("n0", "n1", "n2")
KINDS_TABLE = [
    Kinds(DEFAULT_RULES),
    # no catch-all: requests without tokens are `unknown`
    Kinds((KindRule("big", min_tokens=1000), KindRule("small", max_tokens=999))),
]


def new_acc(
    nodes: tuple[str, ...],
    kinds: Kinds,
    origin_us: int = ORIGIN,
    buckets_s: tuple[float, ...] = DEFAULT_BUCKETS_S,
) -> Accounting:
    return Accounting(
        nodes,
        kinds,
        origin_us=origin_us,
        max_request_us=120 * SECOND,
        stall_us=60 * SECOND,
        buckets_s=buckets_s,
    )


@dataclass(frozen=True)
class Add:
    rec: Interval | Event
    count: bool = True

    def __call__(self, acc: Accounting) -> None:
        acc.add(self.rec, count=self.count)


@dataclass(frozen=True)
class AdvanceTo:
    until_us: int

    def __call__(self, acc: Accounting) -> None:
        acc.advance_to(self.until_us)


@dataclass(frozen=True)
class Advance:
    now_us: int

    def __call__(self, acc: Accounting) -> None:
        acc.advance(self.now_us)


@dataclass(frozen=True)
class LineRead:
    node: str
    time_us: int | None
    entries: int

    def __call__(self, acc: Accounting) -> None:
        acc.line_read(self.node, self.time_us, self.entries)


@dataclass(frozen=True)
class Gap:
    node: str

    def __call__(self, acc: Accounting) -> None:
        acc.source_gap(self.node)


@dataclass(frozen=True)
class Reconnected:
    node: str

    def __call__(self, acc: Accounting) -> None:
        acc.source_reconnected(self.node)


Op = Add | AdvanceTo | Advance | LineRead | Gap | Reconnected

times = st.integers(-60 * SECOND, 1200 * SECOND).map(lambda t: ORIGIN + t)
acc_nodes = st.sampled_from(ACC_NODES)
ids = st.none() | st.integers(0, 3)
counts = st.none() | st.integers(0, 2000)
durations = st.none() | st.integers(0, 100 * SECOND)
reasons = st.sampled_from(("", "", "", "cancelled", "error", "untimed"))  # "": a timed request
models = st.sampled_from(("", "", "", "qwen", ":8081"))  # (router mode's model instances)


@st.composite
def intervals(draw: st.DrawFn) -> Interval:
    end = draw(times)
    return Interval(
        node=draw(acc_nodes),
        start_us=end - draw(st.integers(0, 200 * SECOND)),
        end_us=end,
        tokens=draw(counts),
        prompt_tokens=draw(counts),
        generated_tokens=draw(counts),
        prompt_us=draw(durations),
        generation_us=draw(durations),
        slot=draw(ids),
        task=draw(ids),
        reason=draw(reasons),
        model=draw(models),
    )


events = st.builds(
    Event,
    node=acc_nodes,
    time_us=times,
    kind=st.sampled_from(EventKind),
    slot=ids,
    task=ids,
    model=st.sampled_from(("", "", "qwen")),
)
ops: st.SearchStrategy[list[Op]] = st.lists(
    st.one_of(
        st.builds(Add, intervals(), st.booleans()),
        st.builds(Add, events),
        st.builds(AdvanceTo, times),
        st.builds(Advance, times),
        st.builds(LineRead, acc_nodes, st.none() | times, st.integers(0, 50)),
        st.builds(Gap, acc_nodes),
        st.builds(Reconnected, acc_nodes),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(
    kinds=st.sampled_from(KINDS_TABLE),
    before=ops,
    after=ops,
    shift=st.integers(-3600 * SECOND, 3600 * SECOND),
)
def test_accounting_state_round_trips_and_goes_on_alike(
    kinds: Kinds, before: list[Op], after: list[Op], shift: int
) -> None:
    acc1 = new_acc(ACC_NODES, kinds)
    for op in before:
        op(acc1)
    text = json.dumps(state_of(acc1), allow_nan=False)  # strict JSON, as written
    acc2 = new_acc(ACC_NODES, kinds, ORIGIN + shift)  # restarted later, `since` elsewhere
    assert restore(acc2, json.loads(text)) == []
    assert acc2.snapshot() == acc1.snapshot()
    assert state_of(acc2) == state_of(acc1)
    # pending intervals, requests in flight, the watermark: the same future for both
    for op in after:
        op(acc1)
        op(acc2)
    assert acc2.snapshot() == acc1.snapshot()
    assert state_of(acc2) == state_of(acc1)


# == 4. config changes through restore() ==========================================================

BASE_NODES = ("a", "b")
BASE_KINDS = Kinds(DEFAULT_RULES)


def base_acc() -> Accounting:
    """Two nodes with requests of both kinds, one in flight, one reaching past the watermark."""
    acc = new_acc(BASE_NODES, BASE_KINDS)
    s = SECOND
    acc.add(Interval("a", ORIGIN + 10 * s, ORIGIN + 40 * s, 700, 650, 50, 9 * s, 21 * s, 0, 1))
    acc.add(Interval("a", ORIGIN + 50 * s, ORIGIN + 55 * s, 100, slot=0, task=2))
    acc.add(Interval("b", ORIGIN + 20 * s, ORIGIN + 30 * s, 900))
    acc.add(Event("b", ORIGIN + 60 * s, EventKind.STARTED, 7, 0, 9))
    acc.add(Interval("b", ORIGIN + 70 * s, ORIGIN + 200 * s, 50))
    acc.add(Event("a", ORIGIN + 61 * s, EventKind.PARSE_ERROR, detail="x"))
    acc.add(Event("a", ORIGIN + 58 * s, EventKind.STARTED, 7, 1, 3))
    acc.add(Interval("a", ORIGIN + 58 * s, ORIGIN + 62 * s, slot=1, task=3, reason="cancelled"))
    acc.add(Interval("b", ORIGIN + 25 * s, ORIGIN + 27 * s, slot=1, task=4, reason="error"))
    acc.add(Event("a", ORIGIN + 62 * s, EventKind.LOST, 7, 2, 5))
    acc.add(Event("a", ORIGIN + 1 * s, EventKind.SLOTS, 7, 3))
    acc.add(Event("a", ORIGIN + 1 * s, EventKind.SERVER_UP, 7))
    acc.add(Interval("b", ORIGIN + 31 * s, ORIGIN + 33 * s, 40, model="qwen"))
    acc.line_read("a", ORIGIN + 62 * s, 100)
    acc.line_read("b", ORIGIN + 200 * s, 50)
    acc.source_gap("a")
    acc.source_reconnected("b")
    acc.advance_to(ORIGIN + 100 * s)
    return acc


NODE_FIELDS = (
    "newest_us",
    "busy_us",
    "slot_busy_us",
    "last_end_us",
    "entries",
    "untimed",
    "slots",
    "server_up",
    "models",
    "aborted",
    "restarts",
    "parse_errors",
    "late",
    "reconnects",
    "gaps",
    "start_lines",
    "in_flight",
)
PER_KIND = (
    "requests",
    "request_us",
    "tokens",
    "prompt_tokens",
    "generated_tokens",
    "prompt_us",
    "generation_us",
)
NEW_KINDS = Kinds(split_rules(800))
RENAMED_KINDS = Kinds((KindRule("long", min_tokens=600), KindRule("short")))
NEW_BUCKETS = (1.0, 10.0, 100.0)


@pytest.mark.parametrize(
    ("nodes", "kinds", "buckets", "notes"),
    [
        pytest.param(BASE_NODES, BASE_KINDS, DEFAULT_BUCKETS_S, [], id="same config"),
        pytest.param(("b", "a"), BASE_KINDS, DEFAULT_BUCKETS_S, [], id="nodes reordered"),
        pytest.param(
            ("a", "b", "c"),
            BASE_KINDS,
            DEFAULT_BUCKETS_S,
            ["node c is new", "number of nodes changed from 2 to 3"],
            id="node added",
        ),
        pytest.param(
            ("a",),
            BASE_KINDS,
            DEFAULT_BUCKETS_S,
            ["node b is no longer configured", "number of nodes changed from 2 to 1"],
            id="node removed",
        ),
        pytest.param(
            ("a", "c"),
            BASE_KINDS,
            DEFAULT_BUCKETS_S,
            ["node b is no longer configured", "node c is new"],
            id="node renamed",
        ),
        pytest.param(
            BASE_NODES, NEW_KINDS, DEFAULT_BUCKETS_S, ["the kinds changed"], id="kind bounds"
        ),
        pytest.param(
            BASE_NODES, RENAMED_KINDS, DEFAULT_BUCKETS_S, ["the kinds changed"], id="kinds renamed"
        ),
        pytest.param(
            BASE_NODES, BASE_KINDS, NEW_BUCKETS, ["duration_buckets changed"], id="buckets"
        ),
        pytest.param(
            ("a", "b", "c"),
            NEW_KINDS,
            NEW_BUCKETS,
            ["the kinds changed", "node c is new", "number of nodes changed from 2 to 3"],
            id="everything changed",
        ),
    ],
)
def test_restore_across_a_config_change(
    nodes: tuple[str, ...],
    kinds: Kinds,
    buckets: tuple[float, ...],
    notes: list[str],
) -> None:
    acc1 = base_acc()
    state = json.loads(json.dumps(state_of(acc1)))
    later = ORIGIN + 3600 * SECOND
    acc2 = new_acc(nodes, kinds, later, buckets)
    fresh = new_acc(nodes, kinds, later, buckets)
    got = restore(acc2, state)
    assert len(got) == len(notes), got
    for want in notes:
        assert sum(want in note for note in got) == 1, (want, got)

    same_kinds = kinds == BASE_KINDS
    same_buckets = buckets == DEFAULT_BUCKETS_S
    assert set(acc2.nodes) == set(nodes)
    assert acc2.origin_us == ORIGIN
    assert acc2.watermark_us == acc1.watermark_us
    for name, ns in acc2.nodes.items():
        if name not in acc1.nodes:  # new: at zero, like a node of a fresh start
            assert ns == fresh.nodes[name]
            continue
        old = acc1.nodes[name]
        for f in NODE_FIELDS:
            assert getattr(ns, f) == getattr(old, f), (name, f)
        assert set(ns.kinds) == set(kinds.names)
        for k, c in ns.kinds.items():
            zero = KindCounters(buckets=[0] * (len(buckets) + 1))
            if not same_kinds:
                assert c == zero, (name, k)
                continue
            for f in PER_KIND:
                assert getattr(c, f) == getattr(old.kinds[k], f), (name, k, f)
            assert c.buckets == (old.kinds[k].buckets if same_buckets else zero.buckets)
            # the histogram's sum goes with its buckets (its count is theirs)
            assert c.histogram_us == (old.kinds[k].histogram_us if same_buckets else 0)
    n = min(len(acc1.concurrency_us), len(acc2.concurrency_us))
    assert acc2.concurrency_us[:n] == acc1.concurrency_us[:n]
    assert acc2.concurrency_us[n:] == [0] * (len(acc2.concurrency_us) - n)
    assert acc2.mix_us == (acc1.mix_us if same_kinds else fresh.mix_us)
    kept = [p for p in state_of(acc1)["pending"] if p[2] in acc2.nodes]
    pending = state_of(acc2)["pending"]
    assert [p[:3] for p in pending] == [p[:3] for p in kept]
    if same_kinds:
        assert pending == kept
    # and it goes on: the pending part of b's long request lands on the timeline
    busy_b = acc2.nodes["b"].busy_us if "b" in acc2.nodes else 0
    acc2.advance_to(ORIGIN + 300 * SECOND)
    if "b" in acc2.nodes:
        assert acc2.nodes["b"].busy_us == busy_b + 100 * SECOND
    assert sum(acc2.mix_us.values()) == (300 if same_kinds else 200) * SECOND


@pytest.mark.parametrize(
    ("change", "warnings"),
    [
        pytest.param(
            lambda c: replace(c, nodes=(*c.nodes, FileNode("node2", c.nodes[0].path))),
            ["node node2 is new", "the number of nodes changed from 2 to 3"],
            id="node added",
        ),
        pytest.param(
            lambda c: replace(c, nodes=c.nodes[:1]),
            ["node node1 is no longer configured", "the number of nodes changed from 2 to 1"],
            id="node removed",
        ),
        pytest.param(
            lambda c: replace(c, kinds=NEW_KINDS),
            ["the kinds changed: per-kind and mix counters start again from 0"],
            id="kinds changed",
        ),
        pytest.param(lambda c: c, [], id="same config"),
    ],
)
def test_the_daemon_resumes_across_a_config_change(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    change: Callable[[Config], Config],
    warnings: list[str],
) -> None:
    """Kept nodes resume at their positions; added ones start at `since`; changes are logged."""
    caplog.set_level(logging.INFO)
    clock = ManualClock(END_S)
    cfg1 = Config(
        state_dir=tmp_path / "state",
        since="-1h",
        nodes=(FileNode("node0", tmp_path / "0.log"), FileNode("node1", tmp_path / "1.log")),
    )
    d1 = Daemon(cfg1, clock=clock)
    d1.acc.add(Interval("node0", END - 50 * SECOND, END - 20 * SECOND, 700, slot=0, task=5))
    d1.acc.line_read("node0", END - 20 * SECOND, 12)
    d1.acc.advance_to(END - 30 * SECOND)
    d1.positions.update(node0="1:2:300", node1="1:3:400")
    d1.parsers["node1"].pid = 4242
    d1.checkpoint_errors = 3
    d1.checkpoint.write(d1.state())

    clock.advance(600)  # restarted ten minutes later, with another config
    cfg2 = change(cfg1)
    caplog.clear()
    d2 = Daemon(cfg2, clock=clock)
    d2.resume()

    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(logged) == len(warnings), logged
    for want in warnings:
        assert any(want in m and str(d2.checkpoint.path) in m for m in logged), (want, logged)
    assert any("resuming from checkpoint" in r.getMessage() for r in caplog.records)
    for node in cfg2.nodes:
        n = node.name
        if n in d1.positions:
            assert d2.positions[n] == d1.positions[n]
            assert d2.node_since[n] == d1.acc.origin_us
            assert d2.parsers[n].state() == d1.parsers[n].state()
            assert d2.acc.nodes[n].entries == d1.acc.nodes[n].entries
        else:
            assert d2.positions[n] == ""
            assert d2.node_since[n] == d2.since_us == (END_S + 600 - 3600) * SECOND
            assert d2.acc.nodes[n].entries == 0
    assert set(d2.acc.nodes) == {n.name for n in cfg2.nodes}
    assert d2.checkpoint_errors == 3  # a counter too: it survives the restart


# == resume(): an unusable checkpoint is refused, never fatal =====================================


def refused_case(mutate: Callable[[dict[str, Any]], object]) -> Callable[[bytes], bytes]:
    """A valid checkpoint with one thing wrong in it."""

    def make(valid: bytes) -> bytes:
        state = copy.deepcopy(json.loads(valid))
        mutate(state)
        return json.dumps(state).encode()

    return make


def _nodes_a_list(s: dict[str, Any]) -> None:
    s["accounting"]["nodes"] = list(s["accounting"]["nodes"])


def _kind_counters_cut_short(s: dict[str, Any]) -> None:
    s["accounting"]["nodes"]["node0"]["kinds"]["extraction"] = [0, 0]


def _node_counter_null(field: str) -> Callable[[dict[str, Any]], None]:
    def mutate(s: dict[str, Any]) -> None:
        s["accounting"]["nodes"]["node0"][field] = None

    return mutate


BAD_CHECKPOINTS = [
    pytest.param(lambda v: b"\x00\xff\xfe garbage \x89PNG\r\n", id="garbage bytes"),
    pytest.param(lambda v: b"", id="empty"),
    pytest.param(lambda v: v[: len(v) // 2], id="truncated"),
    pytest.param(lambda v: b"[1, 2]", id="a JSON list"),
    pytest.param(lambda v: b'{"format": 1}', id="format only"),
    pytest.param(refused_case(lambda s: s.update(format=FORMAT + 1)), id="another format"),
    pytest.param(refused_case(lambda s: s.pop("accounting")), id="no accounting"),
    pytest.param(refused_case(_nodes_a_list), id="nodes a list"),
    pytest.param(
        refused_case(lambda s: s["accounting"]["nodes"]["node1"].update(in_flight=[[0, 1]])),
        id="in-flight entry short",
    ),
    pytest.param(
        refused_case(lambda s: s["parsers"]["node0"].update(block=[None] * 9)),
        id="parser block too long",
    ),
    pytest.param(refused_case(lambda s: s.update(positions=None)), id="positions null"),
    pytest.param(refused_case(lambda s: s.update(checkpoint_errors="many")), id="errors NaN"),
    pytest.param(
        refused_case(_kind_counters_cut_short),
        id="kind counters cut short",
    ),
    pytest.param(
        refused_case(lambda s: s["accounting"].update(watermark_us=float("inf"))),
        id="a counter is Infinity",
    ),
    pytest.param(
        lambda v: b"[" * 100_000,
        id="nested 100000 deep",
    ),
    *(  # (they once went in as None, and the daemon then failed at every start)
        pytest.param(refused_case(_node_counter_null(f)), id=f"{f} null")
        for f in ("newest_us", "busy_us", "entries")
    ),
]


@pytest.mark.parametrize("make", BAD_CHECKPOINTS)
def test_resume_refuses_an_unusable_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, make: Callable[[bytes], bytes]
) -> None:
    caplog.set_level(logging.INFO)
    clock = ManualClock(END_S)
    cfg = config_for({n: tmp_path / f"{n}.log" for n in NODES})
    valid = Daemon(cfg, clock=clock).state()
    bad = make(valid)
    cp = Checkpoint(cfg.state_dir)
    cp.write(bad)

    d = Daemon(cfg, clock=clock)
    d.resume()  # never raises
    fresh = Daemon(cfg, clock=clock)
    assert d.acc.snapshot() == fresh.acc.snapshot()
    assert state_of(d.acc) == state_of(fresh.acc)
    assert d.positions == fresh.positions
    assert {n: p.state() for n, p in d.parsers.items()} == {
        n: p.state() for n, p in fresh.parsers.items()
    }
    assert d.node_since == fresh.node_since
    assert d.checkpoint_errors == 0
    aside = cfg.state_dir / f"{NAME}.unusable-{END_S * 1_000_000}"
    assert names_in(cfg.state_dir) == [aside.name]
    assert aside.read_bytes() == bad
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert str(cp.path) in errors[0]
    assert f"starting every node from since={SINCE} instead" in errors[0]
    assert str(aside) in errors[0]


# == 5. the daemon: resume, refuse, ride out a full or read-only disk =============================


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
            assert tmp_files(cfg.state_dir) == []
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


def test_a_checkpoint_from_before_the_histogram_sum_restores_it_from_request_seconds() -> None:
    acc1 = base_acc()
    state = json.loads(json.dumps(state_of(acc1)))
    for node in state["nodes"].values():
        for values in node["kinds"].values():
            del values[-1]  # what an older exporter wrote: no histogram sum of its own
    acc2 = new_acc(BASE_NODES, BASE_KINDS)
    assert restore(acc2, state) == []
    for name, ns in acc2.nodes.items():
        for k, c in ns.kinds.items():
            assert c.histogram_us == c.request_us == acc1.nodes[name].kinds[k].histogram_us


def test_a_checkpoint_from_before_the_reasons_restores_its_cancels_as_cancelled() -> None:
    """An older exporter counted `cancelled` per node (no seconds), and knew nothing of the
    reasons, slots, server state, model instances or slot busy seconds."""
    acc1 = base_acc()
    state = json.loads(json.dumps(state_of(acc1)))
    for i, node in enumerate(state["nodes"].values()):
        for new in ("untimed", "slots", "server_up", "models", "slot_busy_us"):
            del node[new]
        node["cancelled"] = 5 + i
    acc2 = new_acc(BASE_NODES, BASE_KINDS)
    assert restore(acc2, state) == []
    for i, name in enumerate(BASE_NODES):
        n = acc2.snapshot().nodes[i]
        assert n.untimed == {
            "cancelled": (5 + i, 0),
            "error": (0, 0),
            "untimed": (0, 0),
            "lost": (0, 0),
        }
        assert (n.slots, n.server_up, n.models, n.slot_busy_us) == (None, None, {}, 0)
        assert n.busy_us == acc1.nodes[name].busy_us
        assert n.kinds == acc1.snapshot().nodes[i].kinds
    got = parse_metrics(Renderer("1.2.3").text(acc2.snapshot()))
    assert sample(got, "smllm_requests_untimed_total", node="b", reason="cancelled") == 6
    assert sample(got, "smllm_untimed_request_seconds_total", node="b", reason="cancelled") == 0


def test_after_a_bucket_change_the_histogram_starts_again_whole() -> None:
    """Its buckets, count and sum start from 0 together (a histogram whose sum kept the old
    requests would show an average no request had); the request counters go on."""
    acc1 = base_acc()
    state = json.loads(json.dumps(state_of(acc1)))
    acc2 = new_acc(BASE_NODES, BASE_KINDS, buckets_s=NEW_BUCKETS)
    restore(acc2, state)
    acc2.add(Interval("a", ORIGIN + 90 * SECOND, ORIGIN + 95 * SECOND, 100, slot=0, task=9))
    got = parse_metrics(Renderer("1.2.3").text(acc2.snapshot()))
    before = acc1.nodes["a"].kinds["reconcile"]
    assert before.requests and before.request_us
    labels = {"node": "a", "kind": "reconcile"}
    assert sample(got, "smllm_requests_total", **labels) == before.requests + 1
    assert sample(got, "smllm_request_seconds_total", **labels) == before.request_us / SECOND + 5
    assert sample(got, "smllm_request_duration_seconds_count", **labels) == 1
    assert sample(got, "smllm_request_duration_seconds_sum", **labels) == 5
    assert sample(got, "smllm_request_duration_seconds_bucket", le="10.0", **labels) == 1
