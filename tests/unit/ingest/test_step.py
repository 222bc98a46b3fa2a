"""exporter.ingest.step: a batch through the parser into the accounting, and the outcome it says.

The outcome is what the daemon logs and acts on: the parse errors and restarts a batch brought
(in order), the requests it aborted, the source catching up, a clock skew's start and end, the
models spilling over MAX_MODELS. Each is said once, when it happens.
"""

from __future__ import annotations

import pytest

from exporter.accounting.accounting import Accounting
from exporter.accounting.figures import MAX_MODELS
from exporter.base.records import Batch, Event, EventKind, LogLine
from exporter.base.times import SECOND
from exporter.config.schema import Config
from exporter.ingest.settings import settings
from exporter.ingest.step import Outcome, apply_batch, flush
from exporter.parse.parser import PID_GONE_US, Parser
from exporter.parse.router import OTHER_MODELS

NODE = "n0"
T0 = 1_790_000_000_000_000  # a journal time, microseconds
LAUNCH = "slot launch_slot_: id  {slot} | task {task} | processing task, is_child = 0"
TOTAL = "slot print_timing: id  {slot} | task {task} |       total time =    500.00 ms / 9 tokens"
GARBLED = "slot print_timing: id  0 | task 7 |       total time =    abc ms / 9 tokens"


def fresh() -> tuple[Parser, Accounting]:
    return Parser(NODE), Accounting([NODE], settings(Config()), origin_us=T0 - 3600 * SECOND)


def batch(*lines: tuple[int, int, str], caught_up: bool = False, **kw: object) -> Batch:
    """(time offset in ms, pid, message) lines as one batch."""
    logged = tuple(LogLine(NODE, T0 + ms * 1000, "", pid, m) for ms, pid, m in lines)
    newest = logged[-1].time_us if logged else None
    return Batch(NODE, logged, len(logged), newest, caught_up=caught_up, **kw)  # type: ignore[arg-type]


def test_a_quiet_batch_says_nothing_but_its_records() -> None:
    parser, acc = fresh()
    out = apply_batch(batch((0, 7, TOTAL.format(slot=0, task=1))), parser, acc, T0 + SECOND)
    assert [type(r).__name__ for r in out.records] == ["Interval"]
    assert out == Outcome(out.records)


def test_parse_errors_and_restarts_come_in_their_order() -> None:
    parser, acc = fresh()
    apply_batch(batch((0, 7, LAUNCH.format(slot=0, task=1))), parser, acc, T0)
    out = apply_batch(
        batch((10, 7, GARBLED), (20, 8, TOTAL.format(slot=1, task=2)), errors=("FILE:3: bad",)),
        parser,
        acc,
        T0 + SECOND,
    )
    assert [(e.kind, e.detail) for e in out.events] == [
        (EventKind.PARSE_ERROR, "FILE:3: bad"),  # (the source's, first)
        (EventKind.PARSE_ERROR, out.events[1].detail),
        (EventKind.RESTART, "llama-server PID 7 -> 8"),
    ]
    assert acc.nodes[NODE].parse_errors == 2 and acc.nodes[NODE].restarts == 1
    assert out.aborted == 0


def test_a_gone_servers_requests_are_aborted_by_its_successors_line() -> None:
    parser, acc = fresh()
    apply_batch(batch((0, 7, LAUNCH.format(slot=0, task=1))), parser, acc, T0)
    apply_batch(batch((1, 8, LAUNCH.format(slot=1, task=2))), parser, acc, T0)
    later_ms = PID_GONE_US // 1000 + 5  # (the old server silent longer than that)
    idle = "srv  update_slots: all slots are idle"
    out = apply_batch(batch((later_ms, 8, idle)), parser, acc, T0 + later_ms * 1000)
    assert [(e.kind, e.task) for e in out.records if isinstance(e, Event)] == [
        (EventKind.ABORTED, 1)
    ]
    assert out.aborted == 1 and out.events == ()
    assert acc.nodes[NODE].aborted == 1


def test_a_gone_servers_requests_are_aborted_by_the_tick() -> None:
    """Nothing more logged: the tick's flush decides, once the node has read that far."""
    parser, acc = fresh()
    apply_batch(batch((0, 7, LAUNCH.format(slot=0, task=1))), parser, acc, T0)
    apply_batch(batch((1, 8, LAUNCH.format(slot=1, task=2)), caught_up=True), parser, acc, T0)
    assert flush(parser, acc, T0) == Outcome([])
    out = flush(parser, acc, T0 + PID_GONE_US + 3 * SECOND)  # (read until now - 2 s)
    assert [(e.kind, e.task) for e in out.records if isinstance(e, Event)] == [
        (EventKind.ABORTED, 1)
    ]
    assert out.aborted == 1 and out.events == ()


def test_caught_up_is_said_once() -> None:
    parser, acc = fresh()
    assert not apply_batch(batch(), parser, acc, T0).caught_up
    assert apply_batch(batch(caught_up=True), parser, acc, T0).caught_up
    assert not apply_batch(batch(caught_up=True), parser, acc, T0).caught_up
    apply_batch(batch(), parser, acc, T0)  # (reading a backlog again)
    assert apply_batch(batch(caught_up=True), parser, acc, T0).caught_up


def test_a_clock_skew_is_said_when_it_begins_and_when_it_ends() -> None:
    parser, acc = fresh()
    now = T0 - 60 * SECOND  # the node's journal runs a minute ahead of now
    began = apply_batch(batch((0, 7, TOTAL.format(slot=0, task=1))), parser, acc, now)
    assert began.skew_began_us == 60 * SECOND and not began.skew_ended
    still = apply_batch(batch((1, 7, TOTAL.format(slot=0, task=2))), parser, acc, now)
    assert still.skew_began_us is None and not still.skew_ended
    ended = apply_batch(batch((2, 7, TOTAL.format(slot=0, task=3))), parser, acc, T0 + SECOND)
    assert ended.skew_began_us is None and ended.skew_ended


def test_models_spilling_over_the_limit_is_said_once() -> None:
    parser, acc = fresh()
    said = []
    for i in range(MAX_MODELS + 3):
        port = 40000 + i
        lines = (
            (
                3 * i,
                7,
                f"srv          load: spawning server instance with name=m{i} on port {port}",
            ),
            (3 * i + 1, 7, f"[{port}] 0.00.100.000 I " + TOTAL.format(slot=0, task=i)),
        )
        said.append(apply_batch(batch(*lines), parser, acc, T0 + SECOND).models_spilled)
    assert OTHER_MODELS in acc.nodes[NODE].models
    assert said.count(True) == 1


def test_an_accounting_failure_is_one_parse_error_and_the_node_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser, acc = fresh()
    add_all, calls = acc.add_all, []

    def failing_once(recs: object) -> None:
        calls.append(recs)
        if len(calls) == 1:
            raise ValueError("a defect")
        add_all(recs)  # type: ignore[arg-type]

    monkeypatch.setattr(acc, "add_all", failing_once)
    out = apply_batch(batch((0, 7, TOTAL.format(slot=0, task=1)), caught_up=True), parser, acc, T0)
    (error,) = out.events
    assert error.kind is EventKind.PARSE_ERROR and "a defect" in error.detail
    assert out.records == [error]
    assert not acc.nodes[NODE].up and acc.nodes[NODE].parse_errors == 1
