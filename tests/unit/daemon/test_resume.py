"""exporter.daemon.resume: a daemon takes its checkpoint up across a config change, and sets an
unusable one aside (every node from `since`), never crashing on it."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from exporter.base.kinds import Kinds, split_rules
from exporter.base.records import Interval
from exporter.base.times import SECOND
from exporter.checkpoint.codec import parser_state, state_of
from exporter.checkpoint.layout import VERSION
from exporter.checkpoint.store import NAME, Checkpoint
from exporter.commands.demo import NODES
from exporter.config.schema import Config
from exporter.daemon.daemon import Daemon
from exporter.sources.file import FileNode

from support.checkpoints import END_S, ManualClock, names_in
from support.dumps import END, SINCE, config_for

NEW_KINDS = Kinds(split_rules(800))


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
    d1.nodes["node0"].position, d1.nodes["node1"].position = "1:2:300", "1:3:400"
    d1.nodes["node1"].parser.pid = 4242
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
        if n in d1.nodes:
            assert d2.nodes[n].position == d1.nodes[n].position
            assert d2.nodes[n].since_us == d1.acc.origin_us
            assert parser_state(d2.nodes[n].parser) == parser_state(d1.nodes[n].parser)
            assert d2.acc.nodes[n].entries == d1.acc.nodes[n].entries
        else:
            assert d2.nodes[n].position == ""
            assert d2.nodes[n].since_us == d2.since_us == (END_S + 600 - 3600) * SECOND
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
    pytest.param(refused_case(lambda s: s.update(format=VERSION + 1)), id="another format"),
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
    assert {n: x.position for n, x in d.nodes.items()} == {
        n: x.position for n, x in fresh.nodes.items()
    }
    assert {n: parser_state(x.parser) for n, x in d.nodes.items()} == {
        n: parser_state(x.parser) for n, x in fresh.nodes.items()
    }
    assert {n: x.since_us for n, x in d.nodes.items()} == {
        n: x.since_us for n, x in fresh.nodes.items()
    }
    assert d.checkpoint_errors == 0
    aside = cfg.state_dir / f"{NAME}.unusable-{END_S * 1_000_000}"
    assert names_in(cfg.state_dir) == [aside.name]
    assert aside.read_bytes() == bad
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert str(cp.path) in errors[0]
    assert f"starting every node from since={SINCE} instead" in errors[0]
    assert str(aside) in errors[0]
