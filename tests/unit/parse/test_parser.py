"""The parser on verbatim llama.cpp lines of every era (format strings rendered as printf would)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from exporter.base.records import Draft, Event, EventKind, Interval, LogLine, Record
from exporter.checkpoint.codec import parser_of, parser_state
from exporter.parse import parser as parse
from exporter.parse import tokens
from exporter.parse.parser import PID_GONE_US, SLOT_MARGIN, Parser
from exporter.parse.tokens import Token, ms_to_us

T0 = 1_790_000_000_000_000  # a journal time, microseconds


@dataclass(frozen=True)
class Want:
    """An expected interval: end (ms after T0), duration (ms, as logged), tokens and the rest."""

    end_ms: int
    dur: str
    tokens: int | None
    prompt: int | None = None
    generated: int | None = None
    slot: int | None = None
    task: int | None = None
    prompt_ms: str | None = None
    gen_ms: str | None = None


def feed(lines: list[tuple[int, str] | tuple[int, str, int]]) -> tuple[list[Interval], list[Event]]:
    parser = Parser("n0")
    out = []
    for item in lines:
        t_ms, msg = item[0], item[1]
        pid = item[2] if len(item) == 3 else 100
        out += parser.feed(LogLine("n0", T0 + t_ms * 1000, "", pid, msg))
    return ([r for r in out if isinstance(r, Interval)], [r for r in out if isinstance(r, Event)])


def want(w: Want) -> Interval:
    return Interval(
        node="n0",
        start_us=T0 + w.end_ms * 1000 - ms_to_us(w.dur),
        end_us=T0 + w.end_ms * 1000,
        tokens=w.tokens,
        prompt_tokens=w.prompt,
        generated_tokens=w.generated,
        prompt_us=ms_to_us(w.prompt_ms) if w.prompt_ms else None,
        generation_us=ms_to_us(w.gen_ms) if w.gen_ms else None,
        slot=w.slot,
        task=w.task,
        pid=100,
    )


PROMPT_C = "prompt eval time =    1171.24 ms /   381 tokens (    3.07 ms per token,   325.30 tokens per second)"
EVAL_C = "       eval time =    3364.22 ms /   124 tokens (   27.13 ms per token,    36.86 tokens per second)"
TOTAL_C = "      total time =    4535.45 ms /   505 tokens"
D = "slot print_timing: id  0 | task 36 | "
B_TAIL = 'tid="123510069428224" timestamp=1748883151 id_slot=0 id_task=408'
FULL = {"prompt": 381, "generated": 124, "prompt_ms": "1171.24", "gen_ms": "3364.22"}

ERAS: list[tuple[str, list[tuple[int, str]], list[Want]]] = [
    (
        "seed example",
        [(0, "srv ... print_timing: ... total time = 47390.06 ms / 730 tokens")],
        [Want(0, "47390.06", 730)],
    ),
    (
        "era D: every line prefixed",
        [
            (0, D + PROMPT_C),
            (0, D + EVAL_C),
            (0, D + TOTAL_C),
            (0, D + "   graphs reused =        122"),
            (
                0,
                D
                + "draft acceptance = 0.71875 (   92 accepted /   128 generated), mean len =  2.53",
            ),
        ],
        [Want(0, "4535.45", 505, slot=0, task=36, **FULL)],  # type: ignore[arg-type]
    ),
    (
        "era D with the 2026 log prefix",
        [
            (
                0,
                "50.10.605.993 I slot print_timing: id  0 | task 22576 |       total time =    "
                "6739.60 ms /  2430 tokens",
            )
        ],
        [Want(0, "6739.60", 2430, slot=0, task=22576)],
    ),
    (
        "era C: header then three unprefixed lines",
        [(0, "slot print_timing: id  1 | task 36 | "), (0, PROMPT_C), (0, EVAL_C), (0, TOTAL_C)],
        [Want(0, "4535.45", 505, slot=1, task=36, **FULL)],  # type: ignore[arg-type]
    ),
    (
        "era C with prefix on the header only, and the early \\r body lines",
        [
            (0, "0.12.345.678 I slot print_timing: id  0 | task 36 | "),
            (0, "\r" + PROMPT_C),
            (0, "\r" + EVAL_C),
            (0, "\r" + TOTAL_C),
            (0, "draft acceptance rate = 0.71875 (   92 accepted /   128 generated)"),
        ],
        [Want(0, "4535.45", 505, slot=0, task=36, **FULL)],  # type: ignore[arg-type]
    ),
    (
        "era B: key=value tail, tokens from the earlier lines",
        [
            (
                0,
                "INFO [           print_timings] prompt eval time     =    1171.24 ms /   381 tokens "
                "(    3.07 ms per token,   325.30 tokens per second) | "
                + B_TAIL
                + " t_prompt_processing=1171.238 n_prompt_tokens_processed=381 t_token=3.07 "
                "n_tokens_second=325.29",
            ),
            (
                0,
                "INFO [           print_timings] generation eval time =    3364.22 ms /   124 runs   "
                "(   27.13 ms per token,    36.86 tokens per second) | "
                + B_TAIL
                + " t_token_generation=3364.215 n_decoded=124 t_token=27.13 n_tokens_second=36.85",
            ),
            (
                0,
                "INFO [           print_timings]           total time =    4535.45 ms | "
                + B_TAIL
                + " t_prompt_processing=1171.238 t_token_generation=3364.215 t_total=4535.453",
            ),
        ],
        [Want(0, "4535.45", 505, slot=0, task=408, **FULL)],  # type: ignore[arg-type]
    ),
    (
        "era B in its JSON log format, early-2024 key names",
        [
            (
                0,
                '{"tid":"1","timestamp":1,"level":"INFO","function":"print_timings","line":1,'
                '"msg":"prompt eval time     =    1171.24 ms /   381 tokens (    3.07 ms per token,'
                '   325.30 tokens per second)","slot_id":2,"task_id":9}',
            ),
            (
                0,
                '{"tid":"1","timestamp":1,"level":"INFO","function":"print_timings","line":2,'
                '"msg":"generation eval time =    3364.22 ms /   124 runs   (   27.13 ms per token,'
                '    36.86 tokens per second)","slot_id":2,"task_id":9}',
            ),
            (
                0,
                '{"tid":"1","timestamp":1,"level":"INFO","function":"print_timings","line":3,'
                '"msg":"          total time =    4535.45 ms","slot_id":2,"task_id":9}',
            ),
        ],
        [Want(0, "4535.45", 505, slot=2, task=9, **FULL)],  # type: ignore[arg-type]
    ),
    (
        "era A: prefix print_timings:, an empty line first, total without tokens",
        [
            (0, ""),
            (
                0,
                "print_timings: prompt eval time =    1171.24 ms /   381 tokens (    3.07 ms "
                "per token,   325.30 tokens per second)",
            ),
            (
                0,
                "print_timings:        eval time =    3364.22 ms /   124 runs   (   27.13 ms per "
                "token,    36.86 tokens per second)",
            ),
            (0, "print_timings:       total time =    4535.45 ms"),
        ],
        [Want(0, "4535.45", 505, **FULL)],  # type: ignore[arg-type]
    ),
    (
        "libllama perf print (llama-cli, llama-cpp-python)",
        [
            (0, "llama_perf_context_print:        load time =    2345.67 ms"),
            (
                0,
                "llama_perf_context_print: prompt eval time =    1171.24 ms /   381 tokens (    3.07 "
                "ms per token,   325.30 tokens per second)",
            ),
            (
                0,
                "llama_perf_context_print:        eval time =    3364.22 ms /   123 runs   (   27.35"
                " ms per token,    36.56 tokens per second)",
            ),
            (0, "llama_perf_context_print:       total time =    4612.03 ms /   504 tokens"),
            (0, "llama_perf_context_print:    graphs reused =        121"),
            (
                0,
                "llama_perf_sampler_print:    sampling time =      41.37 ms /   124 runs   (    0.33"
                " ms per token,  2997.34 tokens per second)",
            ),
        ],
        [Want(0, "4612.03", 504, prompt=381, generated=123, prompt_ms="1171.24", gen_ms="3364.22")],
    ),
    (
        "older llama_print_timings without tokens on the total line",
        [
            (0, "llama_print_timings:        load time =    2345.67 ms"),
            (
                0,
                "llama_print_timings:      sample time =      41.37 ms /   124 runs   (    0.33 ms "
                "per token,  2997.34 tokens per second)",
            ),
            (
                0,
                "llama_print_timings: prompt eval time =    1171.24 ms /   381 tokens (    3.07 ms "
                "per token,   325.30 tokens per second)",
            ),
            (
                0,
                "llama_print_timings:        eval time =    3364.22 ms /   123 runs   (   27.35 ms "
                "per token,    36.56 tokens per second)",
            ),
            (0, "llama_print_timings:       total time =    4612.03 ms"),
        ],
        [Want(0, "4612.03", 504, prompt=381, generated=123, prompt_ms="1171.24", gen_ms="3364.22")],
    ),
    (
        "progress and other print_timing lines are not requests",
        [
            (
                0,
                "slot print_timing: id  0 | task 1 | prompt processing, n_tokens =   3584, progress ="
                " 0.08, t =   3.38 s / 1061.20 tokens per second",
            ),
            (0, "slot print_timing: id  0 | task 36 | n_decoded =    100, tg =  11.44 t/s"),
            (
                0,
                "slot update_slots: id  0 | task 36 | prompt processing progress, n_tokens = 4096, "
                "batch.n_tokens = 2048, progress = 0.819200",
            ),
            (
                0,
                "common_perf_print: unaccounted time =      12.00 ms /   0.3 %      (total - sampling"
                " - prompt eval - eval) / (total)",
            ),
        ],
        [],
    ),
    (
        "two parallel slots, blocks back to back",
        [
            (0, "slot print_timing: id  0 | task 5 | "),
            (0, TOTAL_C),
            (
                10,
                "slot print_timing: id  1 | task 6 |       total time =   20000.00 ms /   900 tokens",
            ),
        ],
        [Want(0, "4535.45", 505, slot=0, task=5), Want(10, "20000.00", 900, slot=1, task=6)],
    ),
]


@pytest.mark.parametrize(
    ("lines", "expected"), [(lines, w) for _, lines, w in ERAS], ids=[name for name, _, _ in ERAS]
)
def test_eras(lines: list[tuple[int, str]], expected: list[Want]) -> None:
    intervals, events = feed(lines)  # type: ignore[arg-type]
    assert intervals == [want(w) for w in expected]
    assert events == []


GARBLED = [
    "slot print_timing: id  0 | task 36 |       total time =    -12.00 ms /   505 tokens",
    "slot print_timing: id  0 | task 36 |       total time =     nan ms /   505 tokens",
    "slot print_timing: id  0 | task 36 |       total time =    12.0.0 ms /   505 tokens",
    "slot print_timing: id  0 | task 36 |       total time =    12.00 ms /   -5 tokens",
    "slot print_timing: id  0 | task 36 |       total time =   9999999999.00 ms /   5 tokens",
    "      total time =    4535.45 ms /   5000000000000 tokens",
    "      total time = ms",
    "prompt eval time =    1e5 ms /   381 tokens",
    "       eval time =    33.2 ms /   abc tokens",
]


@pytest.mark.parametrize("message", GARBLED)
def test_garbled_lines_are_parse_errors(message: str) -> None:
    intervals, events = feed([(0, message), (5, "slot print_timing: id  0 | task 37 | " + TOTAL_C)])
    assert [e.kind for e in events] == [EventKind.PARSE_ERROR]
    assert events[0].node == "n0" and events[0].detail
    assert [i.task for i in intervals] == [37]  # and the parser goes on


def test_garbled_component_does_not_leak_into_next_block() -> None:
    intervals, events = feed([(0, "prompt eval time = x ms / 3 tokens"), (0, TOTAL_C)])
    assert len(events) == 1 and intervals[0].prompt_tokens is None


START = "slot launch_slot_: id  0 | task {t} | processing task"
STOP = "slot      release: id  0 | task {t} | stop processing: n_past = 505, truncated = 0"
TOTAL_D = "slot print_timing: id  0 | task {t} |       total time =    4535.45 ms /   505 tokens"


CANCEL = "W srv          stop: cancel task, id_task = {t}"
SEND_ERROR = (
    "E srv    send_error: task id = {t}, error: request (4804 tokens) exceeds the available "
    "context size (512 tokens), try increasing it"
)

# An event as (kind, task); an occupancy without timing as (reason, task, start ms, end ms)
Step = tuple[EventKind, int | None] | tuple[str, int | None, int, int]


def kinds(events: list[Event]) -> list[tuple[EventKind, int | None]]:
    return [(e.kind, e.task) for e in events]


def trace(records: list[Record]) -> list[Step]:
    """The events and the untimed occupancies, in the order they came (timed requests left
    out: they are counted apart)."""
    steps: list[Step] = []
    for r in records:
        if isinstance(r, Event):
            steps.append((r.kind, r.task))
        elif isinstance(r, Interval) and r.reason:
            assert r.tokens is r.prompt_us is r.generation_us is None
            steps.append((r.reason, r.task, (r.start_us - T0) // 1000, (r.end_us - T0) // 1000))
    return steps


def feed_records(lines: list[tuple[int, str]]) -> list[Record]:
    parser = Parser("n0")
    out: list[Record] = []
    for t_ms, msg in lines:
        out += parser.feed(LogLine("n0", T0 + t_ms * 1000, "", 100, msg))
    return out


@pytest.mark.parametrize(
    ("lines", "n_intervals", "steps"),
    [
        # older servers: stop before the block; newer: after it. Neither is untimed.
        (
            [
                (0, START.format(t=1)),
                (4535, STOP.format(t=1)),
                (4535, TOTAL_D.format(t=1)),
                (9000, START.format(t=2)),
            ],
            1,
            [(EventKind.STARTED, 1), (EventKind.STARTED, 2)],
        ),
        (
            [
                (0, START.format(t=1)),
                (4535, TOTAL_D.format(t=1)),
                (4535, STOP.format(t=1)),
                (9000, START.format(t=2)),
            ],
            1,
            [(EventKind.STARTED, 1), (EventKind.STARTED, 2)],
        ),
        # newest builds: `processing task, is_child = 0`, `stop processing: n_tokens = ...`
        (
            [
                (0, START.format(t=1) + ", is_child = 0"),
                (4535, TOTAL_D.format(t=1)),
                (4535, STOP.format(t=1).replace("n_past", "n_tokens")),
            ],
            1,
            [(EventKind.STARTED, 1)],
        ),
        # a client cancel, no timing within 1 s of journal time: decided at the next line
        # after that, an occupancy from the launch to the release
        (
            [
                (0, START.format(t=1)),
                (299, CANCEL.format(t=1)),
                (300, STOP.format(t=1)),
                (1200, "unrelated"),
                (1301, "unrelated"),
            ],
            0,
            [(EventKind.STARTED, 1), ("cancelled", 1, 0, 300)],
        ),
        # the cancel line may come just after the release (within the second)
        (
            [
                (0, START.format(t=1)),
                (300, STOP.format(t=1)),
                (1299, CANCEL.format(t=1)),
                (1301, "unrelated"),
            ],
            0,
            [(EventKind.STARTED, 1), ("cancelled", 1, 0, 300)],
        ),
        # ... but not later: by then the release was decided, untimed
        (
            [
                (0, START.format(t=1)),
                (300, STOP.format(t=1)),
                (1301, CANCEL.format(t=1)),
                (2400, "unrelated"),
            ],
            0,
            [(EventKind.STARTED, 1), ("untimed", 1, 0, 300)],
        ),
        # released with no timing and no cancel line (an embedding, a rerank): untimed
        (
            [
                (0, START.format(t=1)),
                (300, STOP.format(t=1)),
                (1200, "unrelated"),
                (1301, "unrelated"),
            ],
            0,
            [(EventKind.STARTED, 1), ("untimed", 1, 0, 300)],
        ),
        # an error sent for the task: error
        (
            [
                (0, START.format(t=1)),
                (250, SEND_ERROR.format(t=1)),
                (300, STOP.format(t=1)),
                (1301, "unrelated"),
            ],
            0,
            [(EventKind.STARTED, 1), ("error", 1, 0, 300)],
        ),
        # another task's cancel line notes a reason for that task only
        (
            [
                (0, START.format(t=1)),
                (250, CANCEL.format(t=7)),
                (300, STOP.format(t=1)),
                (1301, "unrelated"),
            ],
            0,
            [(EventKind.STARTED, 1), ("untimed", 1, 0, 300)],
        ),
        # a cancel, and the next start on the slot comes first: decided then
        (
            [
                (0, START.format(t=1)),
                (299, CANCEL.format(t=1)),
                (300, STOP.format(t=1)),
                (400, START.format(t=2)),
            ],
            0,
            [(EventKind.STARTED, 1), ("cancelled", 1, 0, 300), (EventKind.STARTED, 2)],
        ),
        # untimed, and the next start on the slot comes first: decided then
        (
            [(0, START.format(t=1)), (300, STOP.format(t=1)), (400, START.format(t=2))],
            0,
            [(EventKind.STARTED, 1), ("untimed", 1, 0, 300), (EventKind.STARTED, 2)],
        ),
        # task -1 lines are not requests, timing lines neither (even garbled ones)
        ([(0, START.format(t=-1)), (10, STOP.format(t=-1)), (5000, "x")], 0, []),
        (
            [
                (10, "slot print_timing: id  0 | task -1 | " + PROMPT_C),
                (10, "slot print_timing: id  0 | task -1 | " + TOTAL_C),
                (20, "slot print_timing: id  0 | task -1 |       total time = 4x ms"),
                (30, "INFO [ print_timings] total time =    4535.45 ms | id_slot=0 id_task=-1"),
            ],
            0,
            [],
        ),
        # era B start and release (the release comes after the block: not untimed)
        (
            [
                (0, "INFO [   launch_slot_with_task] slot is processing task | " + B_TAIL),
                (
                    4535,
                    "INFO [           print_timings]           total time =    4535.45 ms | "
                    + B_TAIL,
                ),
                (
                    4536,
                    "INFO [            update_slots] slot released | "
                    + B_TAIL
                    + " n_ctx=40960 n_past=960 truncated=false",
                ),
                (9000, "x"),
            ],
            1,
            [(EventKind.STARTED, 408)],
        ),
        # era B cancel: released, never timed (those builds log no cancel line)
        (
            [
                (0, "INFO [   launch_slot_with_task] slot is processing task | " + B_TAIL),
                (10, "INFO [            update_slots] slot released | " + B_TAIL),
                (2000, "x"),
            ],
            0,
            [(EventKind.STARTED, 408), ("cancelled", 408, 0, 10)],
        ),
    ],
    ids=[
        "stop-before-block",
        "stop-after-block",
        "newest-wording",
        "cancel-by-time",
        "cancel-line-after-release",
        "cancel-line-too-late",
        "untimed-by-time",
        "error",
        "other-tasks-cancel",
        "cancel-by-next-start",
        "untimed-by-next-start",
        "task-minus-one",
        "task-minus-one-timing",
        "era-b-release",
        "era-b-cancel",
    ],
)
def test_start_stop(lines: list[tuple[int, str]], n_intervals: int, steps: list[Step]) -> None:
    out = feed_records(lines)
    assert len([r for r in out if isinstance(r, Interval) and not r.reason]) == n_intervals
    assert trace(out) == steps


LONG = "9" * 5000  # more digits than int() takes from a string


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
@pytest.mark.parametrize(
    "msg",
    [
        f"slot print_timing: id  0 | task {LONG} | " + TOTAL_C,
        f"slot launch_slot_: id  {LONG} | task 1 | processing task",
        "slot print_timing: id  0 | task 1 |       total time = " + LONG + " ms / 5 tokens",
        "slot print_timing: id  0 | task 1 |       total time = 5.00 ms / " + LONG + " tokens",
        "INFO [ print_timings] prompt eval time = 5.00 ms / 12 tokens | id_slot=0 id_task=" + LONG,
    ],
    ids=["task", "slot", "duration", "tokens", "era-b-task"],
)
def test_a_number_too_long_is_a_parse_error_and_the_parser_goes_on(
    msg: str, compiled: bool
) -> None:
    p = Parser("n0")
    out = (p.feed_all if compiled else p.feed_reference)(
        (LogLine("n0", T0, "", 100, msg), LogLine("n0", T0 + 5_000_000, "", 100, D + TOTAL_C))
    )
    assert [type(r) for r in out] == [Event, Interval]
    assert isinstance(out[0], Event) and out[0].kind is EventKind.PARSE_ERROR
    assert out[0].detail.startswith(("a number too long", "absurd", "not a"))


def test_flush_decides_a_waiting_stop_without_new_lines() -> None:
    p = Parser("n0")
    p.feed(LogLine("n0", T0, "", 100, START.format(t=1)))
    p.feed(LogLine("n0", T0 + 300_000, "", 100, STOP.format(t=1)))
    assert p.flush(T0 + 1_300_000) == []
    (iv,) = p.flush(T0 + 1_300_001)
    assert isinstance(iv, Interval)
    assert (iv.reason, iv.slot, iv.task, iv.start_us, iv.end_us, iv.tokens) == (
        "untimed",
        0,
        1,
        T0,
        T0 + 300_000,
        None,
    )


def test_new_pid_is_a_restart_and_drops_the_block() -> None:
    intervals, events = feed(
        [
            (0, START.format(t=1), 100),
            (10, "slot print_timing: id  0 | task 1 | ", 100),
            (10, PROMPT_C, 100),
            (20, "Started sm-llm.service", 1),  # systemd's own line: not llama-server's
            (5000, "      total time =    4535.45 ms", 200),
        ]
    )
    # (systemd's line says the server runs: its up state, from unknown; and a start-up milestone)
    assert [(e.kind, e.pid) for e in events if e.kind is not EventKind.PHASE] == [
        (EventKind.STARTED, 100),
        (EventKind.SERVER_UP, 1),
        (EventKind.RESTART, 200),
    ]
    assert len(intervals) == 1
    assert (intervals[0].task, intervals[0].tokens, intervals[0].prompt_tokens) == (
        None,
        None,
        None,
    )


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
def test_a_restart_on_a_garbled_line_forgets_the_old_servers_launches(
    compiled: bool,
) -> None:
    """The new server's launches land in its own table (the pure loop once kept writing them
    to the table the restart had dropped)."""
    p = Parser("n0")
    for t, msg, pid in [
        (0, START.format(t=1), 100),
        (10, D + "      total time =    45x35.45 ms /   505 tokens", 200),  # garbled, new PID
        (20, START.format(t=2), 200),
    ]:
        line = LogLine("n0", T0 + t * 1000, "", pid, msg)
        (p.feed_all if compiled else p.feed_reference)((line,))
    assert p.pid == 200
    assert parser_state(p)["started"] == [[0, 2, T0 + 20_000]]


def test_an_old_servers_waiting_stop_is_decided_in_its_own_context() -> None:
    p = Parser("n0")
    out: list[Record] = []
    for t, msg, pid in [
        (0, START.format(t=1), 100),
        (5, CANCEL.format(t=1), 100),
        (10, STOP.format(t=1), 100),
        (20, START.format(t=1), 200),  # the new server's task 1: another request
        (2000, D + TOTAL_C, 200),  # (and time passes)
    ]:
        out += p.feed(LogLine("n0", T0 + t * 1000, "", pid, msg))
    assert [
        (r.kind, r.pid) if isinstance(r, Event) else (r.reason, r.pid, r.start_us, r.end_us)
        for r in out
        if not isinstance(r, Draft)
    ] == [
        (EventKind.STARTED, 100),
        (EventKind.RESTART, 200),
        (EventKind.STARTED, 200),
        ("cancelled", 100, T0, T0 + 10_000),
        ("", 200, T0 + 2_000_000 - ms_to_us("4535.45"), T0 + 2_000_000),
    ]


TIMED = D.replace("36", "{t}") + TOTAL_C


def test_interleaved_pids_are_one_restart_and_both_requests_complete() -> None:
    """The old server's last timing block is logged after the new one's first lines."""
    p = Parser("n0")
    out: list[Record] = []
    for t, msg, pid in [
        (0, START.format(t=57), 100),
        (10, START.format(t=0).replace("id  0", "id  1"), 200),  # new PID: a restart
        (20, TIMED.format(t=57), 100),  # the old one's request ends
        (30, START.format(t=58).replace("id  0", "id  1"), 100),  # and it goes on a little
        (40, TIMED.format(t=0).replace("id  0", "id  1"), 200),
        (50, TIMED.format(t=58).replace("id  0", "id  1"), 100),
    ]:
        out += p.feed(LogLine("n0", T0 + t * 1000, "", pid, msg))
    kinds = [r.kind for r in out if isinstance(r, Event)]
    assert kinds.count(EventKind.RESTART) == 1
    assert EventKind.ABORTED not in kinds and EventKind.LOST not in kinds
    assert sorted((r.pid, r.task) for r in out if isinstance(r, Interval)) == [
        (100, 57),
        (100, 58),
        (200, 0),
    ]
    assert p.flush(T0 + 60_000) == []  # both still logging of late: nothing gone yet


def test_an_old_pid_silent_for_a_while_has_gone_and_its_requests_are_aborted() -> None:
    p = Parser("n0")
    p.feed(LogLine("n0", T0, "", 100, START.format(t=5)))
    (restart,) = p.feed(LogLine("n0", T0 + 1000, "", 200, TIMED.format(t=9)[: len(D)].strip()))
    assert isinstance(restart, Event) and restart.kind is EventKind.RESTART
    assert p.flush(T0 + 1000 + PID_GONE_US) == []
    (gone,) = p.flush(T0 + 1001 + PID_GONE_US)
    assert isinstance(gone, Event)
    assert (gone.kind, gone.pid, gone.slot, gone.task) == (EventKind.ABORTED, 100, 0, 5)
    # the PID logging again later is no second restart
    out = p.feed(LogLine("n0", T0 + 2 * PID_GONE_US, "", 100, START.format(t=6)))
    assert [r.kind for r in out if isinstance(r, Event)] == [EventKind.STARTED]


def test_after_an_old_pids_late_line_the_newest_is_the_one_logging_again() -> None:
    """The old server's late line is its own; its silence after it still makes it gone, while
    the newest server, silent as long on a long request, is never taken as gone."""
    p = Parser("n0")
    p.feed(LogLine("n0", T0, "", 100, START.format(t=5)))
    p.feed(LogLine("n0", T0 + 10, "", 200, START.format(t=1).replace("id  0", "id  1")))
    p.feed(LogLine("n0", T0 + 20, "", 100, START.format(t=6).replace("id  0", "id  2")))
    assert p.flush(T0 + 20 + PID_GONE_US) == []
    out = p.flush(T0 + 21 + PID_GONE_US)
    assert sorted((r.kind, r.pid, r.task) for r in out if isinstance(r, Event)) == [
        (EventKind.ABORTED, 100, 5),
        (EventKind.ABORTED, 100, 6),
    ]
    assert (p.pid, list(p.started), p.others) == (200, [(1, 1)], {})


def test_lines_with_no_pid_before_the_first_pid_are_that_servers() -> None:
    """(The context they built was once dropped with no event: a request stuck in flight.)"""
    p = Parser("n0")
    out = p.feed_all(
        (
            LogLine("n0", T0, "", 0, START.format(t=1)),
            LogLine("n0", T0 + 500_000, "", 0, STOP.format(t=1)),
            LogLine("n0", T0 + 600_000, "", 4242, START.format(t=2).replace("id  0", "id  1")),
        )
    )
    out += p.flush(T0 + 2_000_000)
    assert trace(out) == [
        (EventKind.STARTED, 1),
        (EventKind.STARTED, 2),
        ("untimed", 1, 0, 500),
    ]
    assert (p.pid, p.others) == (4242, {})


def test_each_server_has_its_own_slot_count() -> None:
    p = Parser("n0")
    big = LogLine("n0", T0, "", 100, "srv    load_model: initializing slots, n_slots = 8")
    launches = [
        LogLine("n0", T0 + k, "", 100, START.format(t=k).replace("id  0", f"id  {k}"))
        for k in range(1, 9)
    ]
    small = LogLine("n0", T0 + 10, "", 200, "srv    load_model: initializing slots, n_slots = 1")
    one_more = LogLine("n0", T0 + 20, "", 100, START.format(t=20).replace("id  0", "id  9"))
    out = p.feed_all((big, *launches, small, one_more))
    assert not [r for r in out if isinstance(r, Event) and r.kind is EventKind.LOST]
    assert p.pid == 100 and p.n_slots == 8 and p.others[200].n_slots == 1
    assert [(r.pid, r.slot) for r in out if isinstance(r, Event) and r.kind is EventKind.SLOTS] == [
        (100, 8),
        (200, 1),
    ]


def test_a_pid_logging_long_after_the_newest_began_is_a_second_server_given_more_time() -> None:
    p = Parser("n0", gone_us=600 * 1_000_000)
    p.feed(LogLine("n0", T0, "", 100, START.format(t=5)))
    p.feed(LogLine("n0", T0 + 10, "", 200, START.format(t=1).replace("id  0", "id  1")))
    late = T0 + PID_GONE_US // 2
    p.feed(LogLine("n0", late, "", 100, TIMED.format(t=5)))  # in time: its own, no second yet
    p.feed(LogLine("n0", late + 1, "", 100, START.format(t=6)))
    again = T0 + 2 * PID_GONE_US  # it logs again well after the newest began: a second server
    p.feed(LogLine("n0", again, "", 100, TIMED.format(t=6)))
    p.feed(LogLine("n0", again + 1, "", 100, START.format(t=7)))  # a long request
    assert p.flush(again + 1 + 300 * 1_000_000) == []  # 5 minutes silent: still running
    (gone,) = p.flush(again + 2 + 600 * 1_000_000)
    assert isinstance(gone, Event) and (gone.kind, gone.pid, gone.task) == (
        EventKind.ABORTED,
        100,
        7,
    )


def test_a_server_that_says_it_exits_aborts_what_it_held_at_once() -> None:
    p = Parser("n0")
    p.feed(LogLine("n0", T0, "", 100, START.format(t=5)))
    p.feed(LogLine("n0", T0 + 10, "", 200, START.format(t=1).replace("id  0", "id  1")))
    # the old server's own last words, after the new one started (which still runs: the
    # node's server is not down)
    (gone,) = p.feed(LogLine("n0", T0 + 20, "", 100, "main: cleaning up before exit..."))
    assert isinstance(gone, Event)
    assert (gone.kind, gone.pid, gone.task, gone.time_us) == (EventKind.ABORTED, 100, 5, T0 + 20)
    assert p.flush(T0 + 2 * PID_GONE_US) == [] and list(p.started) == [(1, 1)]


def test_the_last_server_saying_it_exits_is_the_server_down() -> None:
    p = Parser("n0")
    slots = "srv    load_model: initializing slots, n_slots = 3"
    out = p.feed_all(
        (
            LogLine("n0", T0, "", 100, slots),
            LogLine("n0", T0 + 10, "", 100, START.format(t=5)),
            LogLine("n0", T0 + 20, "", 100, "main: cleaning up before exit..."),
        )
    )
    assert [(r.kind, r.time_us, r.slot) for r in out if isinstance(r, Event)] == [
        (EventKind.SLOTS, T0, 3),
        (EventKind.PHASE, T0, None),  # (a start-up milestone)
        (EventKind.SERVER_UP, T0, None),
        (EventKind.STARTED, T0 + 10, 0),
        (EventKind.ABORTED, T0 + 20, 0),
        (EventKind.SERVER_DOWN, T0 + 20, None),
    ]


def test_a_launch_on_a_slot_that_holds_a_request_ends_the_older_one_as_lost() -> None:
    _, events = feed([(0, START.format(t=1)), (10, START.format(t=2))])
    assert [(e.kind, e.task) for e in events] == [
        (EventKind.STARTED, 1),
        (EventKind.LOST, 1),
        (EventKind.STARTED, 2),
    ]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
def test_requests_in_flight_stay_within_the_slots_logged_plus_a_margin(compiled: bool) -> None:
    """50,000 launches whose ends never come, each on a slot id of its own."""
    p = Parser("n0")
    feed_ = p.feed_all if compiled else p.feed_reference
    slots = "srv    load_model: initializing slots, n_slots = 3"
    out = list(feed_((LogLine("n0", T0, "", 100, slots),)))
    assert p.n_slots == 3 and p.max_in_flight == 3 + SLOT_MARGIN
    launches = tuple(
        LogLine("n0", T0 + k, "", 100, START.format(t=k).replace("id  0", f"id  {k}"))
        for k in range(1, 50_001)
    )
    out += feed_(launches)
    assert len(p.started) == p.max_in_flight
    lost = [r for r in out if isinstance(r, Event) and r.kind is EventKind.LOST]
    assert len(lost) == 50_000 - p.max_in_flight


def test_a_garbled_slot_count_is_a_parse_error_and_the_configured_one_holds() -> None:
    p = Parser("n0", slots=2)
    (err,) = p.feed(LogLine("n0", T0, "", 100, "load_model: initializing, n_slots = 99999999"))
    assert isinstance(err, Event) and err.kind is EventKind.PARSE_ERROR
    assert p.max_in_flight == 2 + SLOT_MARGIN


def test_a_parser_with_an_old_server_resumes_from_its_state() -> None:
    p = Parser("n0")
    p.feed(LogLine("n0", T0, "", 100, START.format(t=5)))
    p.feed(LogLine("n0", T0 + 10, "", 200, START.format(t=1).replace("id  0", "id  1")))
    resumed = parser_of("n0", json.loads(json.dumps(parser_state(p))))
    assert resumed == p
    line = LogLine("n0", T0 + 20, "", 100, TIMED.format(t=5))
    assert resumed.feed(line) == p.feed(line)


@pytest.mark.parametrize(
    "broken",
    [{"pid": "100"}, {"pid": None}, {"block": [1, 2]}, {"others": [[1, "x", {}]]}],
    ids=["pid-text", "pid-none", "block-short", "others-bad"],
)
def test_a_parser_state_that_does_not_fit_is_refused(broken: dict[str, object]) -> None:
    p = Parser("n0")
    p.feed(LogLine("n0", T0, "", 100, START.format(t=5)))
    with pytest.raises((KeyError, TypeError, ValueError)):
        parser_of("n0", {**parser_state(p), **broken})


def test_state_round_trip_mid_block() -> None:
    """A checkpoint taken inside a multi-line block resumes it."""
    lines = [
        (0, START.format(t=1)),
        (10, STOP.format(t=2)),
        (20, D.strip() + " "),
        (20, PROMPT_C),
        (20, EVAL_C),
    ]
    p = Parser("n0")
    for t, msg in lines:
        p.feed(LogLine("n0", T0 + t * 1000, "", 100, msg))
    resumed = parser_of("n0", parser_state(p))
    assert resumed == p
    last = LogLine("n0", T0 + 20_000, "", 100, TOTAL_C)
    assert resumed.feed(last) == p.feed(last)


def test_stop_of_a_request_launched_before_reading_began_is_no_cancel() -> None:
    """The journal was read from `since`, between a request's timing block and its release."""
    assert feed([(30, STOP.format(t=1)), (5000, "x")]) == ([], [])


def test_started_survives_a_checkpoint() -> None:
    p = Parser("n0")
    p.feed(LogLine("n0", T0, "", 100, START.format(t=1)))
    resumed = parser_of("n0", parser_state(p))
    resumed.feed(LogLine("n0", T0 + 10_000, "", 100, STOP.format(t=1)))
    (iv,) = resumed.flush(T0 + 2_000_000)
    assert isinstance(iv, Interval)
    assert (iv.reason, iv.task, iv.start_us, iv.end_us) == ("untimed", 1, T0, T0 + 10_000)


def test_a_cancel_line_survives_a_checkpoint_between_it_and_the_release() -> None:
    p = Parser("n0")
    p.feed(LogLine("n0", T0, "", 100, START.format(t=1)))
    p.feed(LogLine("n0", T0 + 5_000, "", 100, CANCEL.format(t=1)))
    resumed = parser_of("n0", json.loads(json.dumps(parser_state(p))))
    assert resumed == p
    resumed.feed(LogLine("n0", T0 + 10_000, "", 100, STOP.format(t=1)))
    (iv,) = resumed.flush(T0 + 2_000_000)
    assert isinstance(iv, Interval)
    assert (iv.reason, iv.task, iv.start_us, iv.end_us) == ("cancelled", 1, T0, T0 + 10_000)


def test_a_line_the_parser_fails_on_is_a_parse_error_and_the_state_rolls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A defect (here: tokenizing one line raises) costs that line only: it is a parse error,
    and the state is as if the line had not come, the older server's context included."""

    def failing(msg: str) -> Token | None:
        if msg == TOTAL_C:
            raise RuntimeError("a defect")
        return tokens.tokenize(msg)

    lines = [
        LogLine("n0", T0, "", 100, START.format(t=1)),
        LogLine("n0", T0 + 10, "", 200, START.format(t=2).replace("id  0", "id  1")),
        LogLine("n0", T0 + 20, "", 200, TOTAL_C),  # (a line only the Python tokenizer reads)
        LogLine("n0", T0 + 30, "", 100, TIMED.format(t=1)),
    ]
    clean = Parser("n0")
    want = clean.feed_all((*lines[:2], lines[3]))
    monkeypatch.setattr(parse, "tokenize", failing)  # (the tokenizer the parser calls)
    p = Parser("n0")
    got = p.feed_all(tuple(lines))
    errors = [r for r in got if isinstance(r, Event) and r.kind is EventKind.PARSE_ERROR]
    assert len(errors) == 1 and "internal error (RuntimeError: a defect)" in errors[0].detail
    assert [r for r in got if r not in errors] == want
    assert parser_state(p) == parser_state(clean)
