"""The checkpoint (docs/design.md): the state file itself, the accounting state round trip, config
changes across restarts, and the daemon resuming, refusing bad files and riding out a full or
read-only disk (a real tmpfs) while serving only checkpointed values."""

from __future__ import annotations

import copy
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.accounting.accounting import (
    DEFAULT_BUCKETS_S,
    SECOND,
    Accounting,
    KindCounters,
    restore,
    state_of,
)
from exporter.base.kinds import DEFAULT_RULES, KindRule, Kinds, split_rules
from exporter.base.records import Event, EventKind, Interval
from exporter.checkpoint.store import FORMAT, NAME, Checkpoint, CheckpointError
from exporter.commands.demo import NODES
from exporter.config.config import Config, FileNode
from exporter.daemon.daemon import Daemon
from exporter.exposition.render import Renderer

from support.checkpoints import END_S, ManualClock, mode_of, names_in
from support.dumps import END, SINCE, config_for
from support.scrape import parse_metrics, sample


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
