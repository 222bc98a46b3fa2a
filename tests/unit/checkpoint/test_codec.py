"""exporter.checkpoint.codec: every version ever written restores as before, every field is checked,
and an accounting's state round-trips, across config changes too.

tests/testdata/checkpoints/ holds a checkpoint of each version (`vN.json`, made by the code of
the commit that wrote it: see its README) and what the daemon of 3ad37a2, the last before the
versioned codec, restored from each (`vN.restored.json`). The codec restores the same state
from each (and version 4's, which that daemon refused, as it would have restored it).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.accounting.accounting import Accounting
from exporter.accounting.figures import KindCounters
from exporter.accounting.settings import DEFAULT_BUCKETS_S
from exporter.base.kinds import DEFAULT_RULES, KindRule, Kinds, split_rules
from exporter.base.records import Event, EventKind, Interval
from exporter.base.times import SECOND
from exporter.checkpoint import codec
from exporter.checkpoint.codec import (
    Encoder,
    encode,
    load,
    parser_of,
    parser_state,
    restore,
    state_of,
)
from exporter.checkpoint.layout import FIRST_KEPT, HISTOGRAM_AT, VERSION
from exporter.checkpoint.migrations import MIGRATIONS, upgrade, written_as
from exporter.checkpoint.store import Checkpoint, CheckpointError
from exporter.exposition.render import Renderer

from support.checkpoints import json_values, states
from support.scrape import parse_metrics, sample
from support.settings import default_settings
from support.tools import REPO

DATA = REPO / "tests" / "testdata" / "checkpoints"
VERSIONS = range(1, VERSION + 1)


def saved(version: int) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / f"v{version}.json").read_bytes())
    return loaded


def restored(current: dict[str, Any]) -> dict[str, Any]:
    """What a daemon takes up from a checkpoint (at this version), in the checkpoint's form:
    its accounting restored into one of the default config, its parsers, positions, their
    kinds of source (a position of no known kind is of its node's: a file here), its count of
    failed writes, and what restoring said."""
    nodes = list(current["accounting"]["nodes"])
    acc = Accounting(nodes, default_settings(), origin_us=0)
    notes = restore(acc, current["accounting"])
    parsers = {n: parser_of(n, st) for n, st in current["parsers"].items()}
    positions = current["positions"]
    return {
        "accounting": state_of(acc),
        "parsers": {n: parser_state(p) for n, p in parsers.items()},
        "positions": positions,
        "sources": {n: current["sources"].get(n, "file") for n in nodes if positions.get(n)},
        "checkpoint_errors": current["checkpoint_errors"],
        "notes": notes,
    }


def test_one_migration_a_version_to_the_next() -> None:
    assert len(MIGRATIONS) == VERSION - 1


@pytest.mark.parametrize("version", VERSIONS)
def test_each_version_written_is_told_by_its_keys_or_its_format(version: int) -> None:
    assert written_as(saved(version)) == version
    assert saved(version)["format"] == (1 if version < FIRST_KEPT else version)


@pytest.mark.parametrize("version", VERSIONS)
def test_each_version_written_restores_the_state_the_daemon_restored(
    version: int, tmp_path: Path
) -> None:
    (tmp_path / "checkpoint.json").write_bytes((DATA / f"v{version}.json").read_bytes())
    current = load(Checkpoint(tmp_path))
    assert current is not None and current["format"] == VERSION
    # (the last version before the codec wrote the same content as format 1)
    expected = min(version, FIRST_KEPT - 1)
    assert as_of_9(restored(current)) == json.loads(
        (DATA / f"v{expected}.restored.json").read_text()
    )


def test_the_first_kept_version_wrote_what_the_last_unversioned_one_wrote_but_its_format() -> None:
    """The same scenario through 9's code (make.py) and through e9421ea's: one byte apart."""
    v8 = (DATA / f"v{FIRST_KEPT - 1}.json").read_bytes()
    assert (DATA / f"v{FIRST_KEPT}.json").read_bytes() == v8.replace(
        b'{"format":1,', b'{"format":%d,' % FIRST_KEPT, 1
    )


def test_this_version_adds_to_the_last_only_what_it_says_it_adds() -> None:
    """Today's code (make.py) on the same scenario writes version 9's file and 10's fields."""
    now = saved(VERSION)
    assert as_of_9({"accounting": now["accounting"]})["accounting"] == saved(9)["accounting"]
    assert as_of_9(now)["parsers"] == saved(9)["parsers"]


def as_of_9(state: dict[str, Any]) -> dict[str, Any]:
    """`state` without what version 10 added (each kind's prompt-eval and generation histograms
    and draft tokens, each node's sleep and queues, each parser's last timed requests); the notes of a histogram that was not
    kept before stay."""
    out = copy.deepcopy(state)
    todo = list(out.get("parsers", {}).values())
    while todo:
        p = todo.pop()
        del p["recent_totals"]
        todo += [sub for _, _, sub in p["instances"]]
    acc = out["accounting"]
    del acc["prompt_buckets_us"], acc["generation_buckets_us"]
    for node in acc["nodes"].values():
        del node["asleep_since_us"], node["asleep_us"], node["queues"]
        for values in node["kinds"].values():
            del values[HISTOGRAM_AT + 1 :]
    return out


def test_a_restored_checkpoint_encodes_back_to_itself() -> None:
    current = upgrade(saved(VERSION))
    again = restored(copy.deepcopy(current))
    written = {k: current[k] for k in ("accounting", "parsers", "positions", "checkpoint_errors")}
    assert {k: again[k] for k in written} == written
    assert json.loads(encode(current)) == current


@given(st.one_of(json_values, states))
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_encode_writes_what_one_json_dumps_of_it_all_writes(values: Any) -> None:
    """The state is encoded an entry at a time (the interpreter lock let go between them): the
    bytes are those of one json.dumps, keys of every kind and escapes included."""
    doc: dict[Any, Any] = (
        values if isinstance(values, dict) else {"value": values, "v": {"a": values, 1: values}}
    )
    expected = json.dumps({"format": VERSION, **doc}, separators=(",", ":")).encode()
    assert encode(doc) == expected


@given(st.lists(states, min_size=1, max_size=4), st.lists(json_values, max_size=4))
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_an_encoder_writes_each_state_as_encode_writes_it_alone(
    saved: list[Any], values: list[Any]
) -> None:
    """One encoder over states one after another (parts kept, changed, added, gone): each
    state's bytes are those `encode` writes alone. Over any JSON values, each is read back as
    written; a number equal to the one kept may be written as kept (1 for 1.0: the schema has
    one type for each field)."""
    encoder = Encoder()
    for state in [*saved, *saved[::-1]]:  # (each again: every part kept)
        assert encoder.encode(state) == encode(state)
    for value in values:
        doc = {"a": {"b": {"c": value, "d": [value]}}}
        assert json.loads(encoder.encode(doc)) == json.loads(encode(doc))
    ints, floats = {"n": {"x": {"y": [1, 2]}}}, {"n": {"x": {"y": [1.0, 2]}}}
    assert encoder.encode(ints) == encode(ints)
    assert encoder.encode(floats) == encode(ints)  # (kept: equal)
    assert encoder.encode({"n": {"x": {"y": (1, 2)}}}) == encode(ints)  # (a tuple: not kept)


def test_an_encoder_encodes_a_node_again_only_when_it_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node idle since the last checkpoint costs no encoding: its part is written as kept."""
    t0 = 1_790_000_000_000_000
    acc = Accounting(["n0", "n1"], default_settings(), origin_us=t0)
    encoder, encoded = Encoder(), list[Any]()
    dumps: Callable[[Any], str] = vars(codec)["_dumps"]

    def counted(value: Any) -> str:
        encoded.append(value)
        return dumps(value)

    monkeypatch.setattr(codec, "_dumps", counted)
    first = encoder.encode({"accounting": state_of(acc)})
    nodes = [v for v in encoded if isinstance(v, dict) and "kinds" in v]
    assert len(nodes) == 2
    acc.add_all([Interval("n1", t0, t0 + SECOND, 10)])
    acc.advance(t0 + 60 * SECOND)
    encoded.clear()
    second = encoder.encode({"accounting": state_of(acc)})
    assert [v for v in encoded if isinstance(v, dict) and "kinds" in v] == [
        state_of(acc)["nodes"]["n1"]
    ]
    assert second != first and second == encode({"accounting": state_of(acc)})


def test_version_4s_older_pids_restore_with_no_slots_of_their_own() -> None:
    """Version 4 saved an older PID as [pid, since, context]; 5 on add its slot count and
    whether it is a second server (the daemon of 3ad37a2 refused version 4's)."""
    old = saved(4)["parsers"]["restart"]["others"]
    assert [len(o) for o in old] == [3]
    now = upgrade(saved(4))["parsers"]["restart"]["others"]
    assert now == [[*old[0][:2], {**old[0][2], "marks": [], "children": []}, 0, False]]


def at(path: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The object holding the last key of `path` (dotted; a number is a list index)."""

    def find(doc: dict[str, Any]) -> Any:
        for key in path.split(".")[:-1]:
            doc = doc[int(key)] if key.isdigit() else doc[key]  # type: ignore[index]
        return doc

    return find


def key_of(path: str) -> str | int:
    last = path.rsplit(".", maxsplit=1)[-1]
    return int(last) if last.isdigit() else last


FIELD = "accounting.nodes.restart"
KIND = f"{FIELD}.kinds.reconcile"
PARSER = "parsers.router"
REFUSED = [
    # (where, what goes there, what the refusal says)
    (f"{KIND}.0", -1, "not a counter"),  # a per-kind counter below 0 (once taken by int())
    (f"{KIND}.1", 1.5, "not a counter"),
    (f"{KIND}.6", "7", "not a counter"),
    (f"{KIND}.7", [0, -1], "not a counter"),  # a bucket
    (f"{KIND}.8", -5, "not a counter"),  # the histogram's sum
    (f"{KIND}", [0, 0], "not a list of 15"),
    (f"{FIELD}.busy_us", -1, "not a counter"),
    (f"{FIELD}.entries", None, "not a counter"),
    (f"{FIELD}.late", True, "not a counter"),
    (f"{FIELD}.newest_us", 2**64, "not a time the exporter can represent"),
    (f"{FIELD}.last_end_us", -1, "not a time the exporter can represent"),
    (f"{FIELD}.start_lines", 1, "not true or false"),
    (f"{FIELD}.in_flight", [[0, 1]], "not a list of 3 or 4"),
    (f"{FIELD}.in_flight", [[0, 1, "x"]], "not a time"),
    (f"{FIELD}.untimed.lost", [-1, 0], "not a counter"),
    (f"{FIELD}.slots", -3, "not a counter"),
    (f"{FIELD}.server_up", "up", "not a counter"),
    (f"{FIELD}.models", {"m": [1, 2]}, "not a list of 3"),
    (f"{FIELD}.startups", {}, "no current, last, last_pid, started_due"),
    (f"{FIELD}.kinds", [], "not an object"),
    ("accounting.concurrency_us", [0, -1, 0, 0, 0], "not a counter"),
    ("accounting.mix_us.idle", -1, "not a counter"),
    ("accounting.watermark_us", "1790062375000000", "not a time"),
    ("accounting.origin_us", float("inf"), "not a time"),
    ("accounting.pending", [[1, 2, "restart"]], "not a list of 4"),
    ("accounting.pending", [[-(10**17), 2, "restart", ""]], "not a time"),
    ("accounting.kinds", [["extraction", "600", None]], "not an integer"),
    ("accounting.nodes", ["restart"], "not an object"),
    (f"{PARSER}.pid", "12031", "not an integer"),
    (f"{PARSER}.block", [None] * 9, "not a list of 6"),
    (f"{PARSER}.marks", [[1, "exploded"]], "not one of cancelled, error"),
    (f"{PARSER}.up", 2, "not one of -1, 0, 1"),
    (f"{PARSER}.second", 0, "not true or false"),
    (f"{PARSER}.others", [[1, 2, {}, 0, False]], "no block"),
    (f"{PARSER}.instances.0.1", 7, "not a string"),
    (f"{PARSER}.instances.0.2.started", None, "not a list"),
    (f"{PARSER}.spawned", [["tiny-a"]], "not a list of 2"),
    ("positions.error", None, "not a string"),
    ("sources.cancel", 3, "not a string"),
    ("checkpoint_errors", "many", "not a counter"),
    ("checkpoint_errors", -2, "not a counter"),
    ("written_at_us", 1.0, "not an integer"),
]


@pytest.mark.parametrize(("where", "value", "why"), REFUSED, ids=[r[0] for r in REFUSED])
def test_each_field_that_does_not_fit_is_refused_naming_it(
    tmp_path: Path, where: str, value: object, why: str
) -> None:
    doc = saved(VERSION)
    at(where)(doc)[key_of(where)] = value  # type: ignore[index]
    cp = Checkpoint(tmp_path)
    cp.path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError) as e:
        load(cp)
    message = str(e.value)
    assert str(cp.path) in message and why in message
    assert shown(where) in message


def shown(where: str) -> str:
    """A dotted path as a refusal names it: `a.b.0.1` is `a.b[0][1]`."""
    out = ""
    for part in where.split("."):
        out += f"[{part}]" if part.isdigit() else f".{part}" if out else part
    return out


@pytest.mark.parametrize(
    ("change", "why"),
    [
        pytest.param(lambda d: d.update(extra=1), "unknown extra", id="a key of no version"),
        pytest.param(lambda d: d.pop("sources"), "no sources", id="a key missing"),
        pytest.param(lambda d: d.update(format=VERSION + 1), "format 10", id="a later version"),
        pytest.param(lambda d: d.update(format=True), "format True", id="format true"),
    ],
)
def test_a_checkpoint_of_other_keys_or_another_version_is_refused(
    tmp_path: Path, change: Callable[[dict[str, Any]], object], why: str
) -> None:
    doc = saved(VERSION)
    change(doc)
    cp = Checkpoint(tmp_path)
    cp.path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match=why):
        load(cp)


@pytest.mark.parametrize("version", range(1, VERSION))
def test_an_older_version_missing_what_it_wrote_is_refused_not_crashed_on(
    tmp_path: Path, version: int
) -> None:
    broken: dict[str, Any]
    for broken in ({"accounting": None}, {"parsers": []}, {"accounting": {"nodes": 5}}):
        doc = {**saved(version), **broken}
        cp = Checkpoint(tmp_path)
        cp.path.write_text(json.dumps(doc))
        with pytest.raises(CheckpointError, match="does not fit"):
            load(cp)


def test_restore_checks_the_accounting_it_is_given() -> None:
    state = upgrade(saved(VERSION))["accounting"]
    state["nodes"]["cancel"]["kinds"]["extraction"][2] = -10  # tokens
    with pytest.raises(ValueError, match=r"accounting\.nodes\.cancel\.kinds\.extraction\[2\]"):
        restore(Accounting(["cancel"], default_settings(), origin_us=0), state)


# -- the accounting's state: round trips, config changes, older forms --------------------------


@pytest.mark.parametrize("found", [0, 2, 99, "1", None, [1], {"v": 1}])
def test_another_format_is_refused_naming_the_file_and_both_versions(
    tmp_path: Path, found: object
) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.write_text(json.dumps({"format": found, "accounting": {}}))
    with pytest.raises(CheckpointError) as e:
        load(cp)
    message = str(e.value)
    assert str(cp.path) in message
    assert f"format {found!r}" in message
    assert f"reads format {VERSION}" in message


def test_a_missing_format_is_refused(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.write_text('{"accounting": {}}')
    with pytest.raises(CheckpointError, match="format None"):
        load(cp)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    content=st.binary(max_size=200)
    | json_values.map(lambda v: json.dumps(v).encode())
    | states.map(lambda s: json.dumps({"format": VERSION, **s}).encode())
)
def test_load_returns_a_checkpoint_or_refuses_never_anything_else(
    tmp_path: Path, content: bytes
) -> None:
    cp = Checkpoint(tmp_path)
    cp.path.write_bytes(content)
    try:
        loaded = load(cp)
    except CheckpointError as e:
        assert str(cp.path) in str(e)
    else:
        assert isinstance(loaded, dict)
        assert loaded["format"] == VERSION


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
        default_settings(
            kinds, max_request_us=120 * SECOND, stall_us=60 * SECOND, buckets_s=buckets_s
        ),
        origin_us=origin_us,
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
            zero = acc2.new_counters()
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


def unversioned(accounting: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint of an older exporter (written as format 1) of this accounting state, its
    nodes as they were before the reasons and the start-ups (a count of cancels, no untimed
    reasons, slots, server state, model instances, slot busy seconds or start-ups, and none of
    what version 10 added)."""
    accounting = as_of_9({"accounting": accounting})["accounting"]
    for node in accounting["nodes"].values():
        for new in ("untimed", "slots", "server_up", "models", "slot_busy_us", "startups"):
            del node[new]
        node["cancelled"] = 0
    return {
        "format": 1,
        "accounting": accounting,
        "parsers": {},
        "positions": {},
        "checkpoint_errors": 0,
        "written_at_us": ORIGIN,
    }


def test_a_checkpoint_from_before_the_histogram_sum_restores_it_from_request_seconds() -> None:
    acc1 = base_acc()
    saved = unversioned(json.loads(json.dumps(state_of(acc1))))
    for node in saved["accounting"]["nodes"].values():
        for values in node["kinds"].values():
            del values[-1]  # what an older exporter wrote: no histogram sum of its own
    acc2 = new_acc(BASE_NODES, BASE_KINDS)
    assert restore(acc2, upgrade(saved)["accounting"]) == []
    for name, ns in acc2.nodes.items():
        for k, c in ns.kinds.items():
            assert c.histogram_us == c.request_us == acc1.nodes[name].kinds[k].histogram_us


def test_a_checkpoint_from_before_the_reasons_restores_its_cancels_as_cancelled() -> None:
    """An older exporter counted `cancelled` per node (no seconds), and knew nothing of the
    reasons, slots, server state, model instances or slot busy seconds."""
    acc1 = base_acc()
    saved = unversioned(json.loads(json.dumps(state_of(acc1))))
    for i, node in enumerate(saved["accounting"]["nodes"].values()):
        node["cancelled"] = 5 + i
    acc2 = new_acc(BASE_NODES, BASE_KINDS)
    assert restore(acc2, upgrade(saved)["accounting"]) == []
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
        # (a version without the prompt-eval and generation histograms: those start at 0)
        assert {k: _without_phases(c) for k, c in n.kinds.items()} == {
            k: _without_phases(c) for k, c in acc1.snapshot().nodes[i].kinds.items()
        }
    got = parse_metrics(Renderer("1.2.3").text(acc2.snapshot()))
    assert sample(got, "smllm_requests_untimed_total", node="b", reason="cancelled") == 6
    assert sample(got, "smllm_untimed_request_seconds_total", node="b", reason="cancelled") == 0


def _without_phases(c: KindCounters) -> KindCounters:
    """`c` without its prompt-eval and generation histograms."""
    c = c.copy()
    c.prompt_buckets, c.prompt_histogram_us = [], 0
    c.generation_buckets, c.generation_histogram_us = [], 0
    return c


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
