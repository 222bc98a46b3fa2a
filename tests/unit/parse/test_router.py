"""Router mode: the router's own lines read, an instance's first start no restart, and a router
whose instance exited holding the cluster figures no further back than any idle node that logs
launch lines.

The router's lines go through its parser and the accounting as the daemon's ingest step takes
them (`apply_batch`), from a real llama-server router's recorded journal and from lines made
here in its words."""

from __future__ import annotations

from exporter.accounting.accounting import Accounting
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.records import Batch, Event, EventKind, LogLine
from exporter.base.times import SECOND
from exporter.ingest.step import apply_batch
from exporter.parse.parser import Parser
from exporter.parse.router import (
    MAX_MODEL_NAME,
    OTHER_MODELS,
    model_name,
    read_exit,
    read_routed,
    read_spawn,
)

from support.dumps import dump_lines
from support.recorded import FIXTURES, entries
from support.settings import default_settings

KINDS = Kinds(DEFAULT_RULES)
NODE = "router"
T0 = 1_790_062_375_000_000  # 2026-09-22T07:32:55Z
PID = 4242
CAUGHT_UP_TRAIL = 2 * SECOND  # a caught-up node vouches for its journal up to now - 2 s
IDLE = 30 * SECOND  # how long the router sits idle after its last line
LISTENING = "srv  llama_server: listening on http://127.0.0.1:54855"


def spawn(name: str, port: int) -> str:
    return f"srv          load: spawning server instance with name={name} on port {port}"


def exited(name: str, status: int) -> str:
    return f"srv           run: instance name={name} exited with status {status}"


def routed(port: int, message: str) -> str:
    return f"[{port:5d}] 0.00.100.000 I {message}"


def launch(slot: int, task: int) -> str:
    return f"slot launch_slot_: id  {slot} | task {task} | processing task, is_child = 0"


def total(slot: int, task: int) -> str:
    return (
        f"slot print_timing: id  {slot} | task {task} |       total time =    500.00 ms / 9 tokens"
    )


def release(slot: int, task: int) -> str:
    return f"slot      release: id  {slot} | task {task} | stop processing: n_tokens = 9"


def through(lines: list[LogLine], origin_us: int) -> tuple[Accounting, int]:
    """The lines as one caught-up batch (the exporter's now: IDLE after the last), then a tick
    at that now; the accounting and that now."""
    parser, acc = Parser(NODE), Accounting([NODE], default_settings(KINDS), origin_us=origin_us)
    now = lines[-1].time_us + IDLE
    batch = Batch(NODE, tuple(lines), len(lines), lines[-1].time_us, caught_up=True)
    apply_batch(batch, parser, acc, now)
    acc.add_all(parser.flush(acc.read_until(NODE, now)))
    acc.advance(now)
    return acc, now


def made(*messages: str) -> list[LogLine]:
    """The router's lines, one every 10 ms."""
    return [LogLine(NODE, T0 + i * 10_000, "", PID, m) for i, m in enumerate(messages)]


def served(port: int, task: int) -> tuple[str, ...]:
    """One request of the instance on `port`, as the router re-logs its lines."""
    return (
        routed(port, launch(0, task)),
        routed(port, total(0, task)),
        routed(port, release(0, task)),
    )


def restarts(acc: Accounting) -> int:
    return acc.nodes[NODE].restarts


def test_a_routed_line_is_its_port_and_the_instances_line() -> None:
    assert read_routed("[42013] 0.00.021.921 I slot launch_slot_: id  2") == (
        42013,
        "0.00.021.921 I slot launch_slot_: id  2",
    )
    assert read_routed("[ 8081] a\nb") == (8081, "a\nb")
    assert read_routed("[123456] too long a port") is None
    assert read_routed("srv  load: no port") is None


def test_spawn_and_exit_lines_name_the_model_and_port_or_status() -> None:
    assert read_spawn(spawn("tiny-a", 42013)) == ("tiny-a", 42013)
    assert read_spawn(spawn("a on port 1", 2)) == ("a on port 1", 2)  # (the last one counts)
    assert read_spawn("spawning server instance with name=x on port 123456") is None
    assert read_exit("srv  run: instance name=tiny-a exited with status 0") == ("tiny-a", "0")
    assert read_exit("srv  run: instance name=b exited with status -9") == ("b", "-9")
    assert read_exit("srv  run: instance name=c exited with status nine") is None


def test_a_model_name_is_bounded_and_never_one_of_the_exporters_own() -> None:
    assert model_name("m" * (MAX_MODEL_NAME + 5)) == "m" * MAX_MODEL_NAME
    assert model_name(OTHER_MODELS) == "_" + OTHER_MODELS
    assert model_name("__:1") == "___:1" and model_name("a:b") == "a:b"


def test_a_router_that_started_two_instances_once_each_and_stopped_restarted_nothing() -> None:
    """Before: 2 restarts, one per instance's exit."""
    acc, _ = through(
        made(
            spawn("tiny-a", 8081),
            spawn("tiny-b", 8082),
            *served(8081, 1),
            *served(8082, 1),
            exited("tiny-a", 0),
            exited("tiny-b", 0),
        ),
        T0,
    )
    assert restarts(acc) == 0
    assert sum(n for n, _, _ in acc.snapshot().nodes[0].models.values()) == 2


def test_an_instance_started_again_is_one_restart_of_it() -> None:
    acc, _ = through(
        made(
            spawn("tiny-a", 8081),
            *served(8081, 1),
            exited("tiny-a", 1),
            spawn("tiny-a", 8083),  # started again: a restart
            spawn("tiny-a", 8084),  # again, with no exit line between: one more
            *served(8084, 1),
        ),
        T0,
    )
    assert restarts(acc) == 2


def test_a_new_router_starting_its_instances_restarts_only_itself() -> None:
    lines = made(LISTENING, spawn("tiny-a", 8081), *served(8081, 1), exited("tiny-a", 0))
    after = [
        LogLine(NODE, lines[-1].time_us + (1 + i) * 10_000, "", PID + 1, m)
        for i, m in enumerate((LISTENING, spawn("tiny-a", 8081), *served(8081, 1)))
    ]
    acc, _ = through(lines + after, T0)
    assert restarts(acc) == 1  # the new PID; tiny-a's first start under it is none


def test_the_recorded_router_restarted_each_model_once() -> None:
    """The recorded router spawned tiny-a and tiny-b twice each and exited all four: two
    restarts (before: four, one per exit)."""
    lines = dump_lines(FIXTURES / "router.journal.json", NODE)
    acc, _ = through(lines, lines[0].time_us - SECOND)
    spawns = [e for e in entries("router") if "spawning server instance with name=" in e["MESSAGE"]]
    assert len(spawns) == 4
    assert restarts(acc) == 2


def test_after_an_instance_exits_the_figures_follow_the_idle_router() -> None:
    """Before, an instance's exit made the node one that logs no launch lines: while it sat
    idle the watermark trailed now by max_request_seconds (10 minutes)."""
    lines = dump_lines(FIXTURES / "router.journal.json", NODE)
    acc, now = through(lines, lines[0].time_us - SECOND)
    assert acc.nodes[NODE].start_lines and not acc.nodes[NODE].in_flight
    assert acc.watermark_us == now - CAUGHT_UP_TRAIL


def test_after_an_instance_starts_again_the_figures_follow_the_idle_router() -> None:
    acc, now = through(
        made(
            spawn("tiny-a", 8081),
            *served(8081, 1),
            exited("tiny-a", 0),
            spawn("tiny-a", 8082),  # (a restart of it)
        ),
        T0,
    )
    assert restarts(acc) == 1
    assert acc.watermark_us == now - CAUGHT_UP_TRAIL


def test_the_routers_own_restart_still_forgets_its_launch_lines() -> None:
    """(A guard: a new router PID may be a build that logs none: until it logs one, its node
    is one whose requests may be unseen for max_request_seconds.)"""
    acc = Accounting([NODE], default_settings(KINDS), origin_us=T0)
    acc.add(Event(NODE, T0, EventKind.STARTED, PID, 0, 1, model="tiny-a"))
    acc.add(Event(NODE, T0, EventKind.RESTART, PID, model="tiny-a"))
    assert acc.nodes[NODE].start_lines
    acc.add(Event(NODE, T0, EventKind.RESTART, PID + 1))
    assert not acc.nodes[NODE].start_lines
