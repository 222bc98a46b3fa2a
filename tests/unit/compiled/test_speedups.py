"""The compiled fast paths give exactly what their pure-Python references give, or hand back.

`_speedups.tokenize(msg)` must be None or equal to `parse.tokens.tokenize(msg)` (and None
wherever the reference raises); `_speedups.feed`, run by `Parser.feed_all`, must leave the
records and the parser state that `Parser.feed_reference` leaves; and `_speedups.scan` must find
the same lines as `lines.find_lines`, decoding a line only to the LogLine that `EntryDecoder`
makes of it. Hypothesis builds the lines from the verbatim llama.cpp and journalctl shapes with
every perturbation that changes how the references read them. (tests/hostile/test_parse_fuzz.py
throws arbitrary input at the same pairs.)
"""

from __future__ import annotations

import _testcapi
import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from exporter.base.records import Event, EventKind, Interval, LogLine, Record
from exporter.base.times import MAX_TIME_US, SECOND
from exporter.checkpoint.codec import parser_of, parser_state
from exporter.compiled import switch
from exporter.parse import parser as parser_module
from exporter.parse.context import NO_BLOCK
from exporter.parse.contract import FEED_TYPES
from exporter.parse.parser import Parser
from exporter.parse.tokens import ParseError, Token, tokenize
from exporter.sources.entries import EntryDecoder, EntryError
from exporter.sources.lines import KEYWORDS, MAX_LINE, find_lines, join

from support import dumps
from support.line_dumps import as_json
from support.tools import examples, require_compiled

require_compiled(switch.speedups, "_speedups")

from exporter.compiled import _speedups  # noqa: E402 (the module the switch loaded; _speedups.pyi

NODE = "node0"

# -- the pieces lines are made of ----------------------------------------------------------------

PREFIXES = (
    "",
    "50.10.605.993 I ",
    "2025-11-15 14:23:35.060 I ",
    "0.00.001.002 W ",
    "I ",
    "x ",
    "srv ",
    "id 3 | task 4 | ",
    "[ 8081] ",
    "srv  log_server_r: request: ",
)

NAMES = ("print_timing", "launch_slot_", "release", "releases", "launch_slot", "print_timings")
WHAT = (
    "prompt eval time",
    "eval time",
    "total time",
    "graphs reused",
    "n_decoded",
    "",
    "draft acceptance = 0.00758 (    1 accepted /   132 generated), mean len =  1.02",
    "n_gen =    300, tg =  36.86 t/s, tg_3s =  37.02 t/s",
)
UNITS = ("tokens", "runs", "token", "tokens (  3.07 ms per token)")
TAILS = (
    "",
    " (    3.07 ms per token,   325.30 tokens per second)",
    " processing task",
    " processing task, is_child = 0",
    " stop processing: n_past = 505, truncated = 0",
    " processing task, is_child = 1",
    " processing task, is_child = 00",
    " stop processing: n_tokens = 730, total time = 3 ms",
    " launch_slot_ again",
    " release",
    " eval time = 5.00 ms / 3 tokens",
    " prompt eval time = 5.00 ms / 3 tokens",
    " time",
    "\t",
    " \u00e9t\u00e9",
    "   ",
)
good_spaces = st.sampled_from((" ", "  ", "       "))
spaces = st.sampled_from((" ", "  ", "       ", "\t", ""))
good_numbers = st.integers(0, 99_999).map(str)
numbers = st.one_of(
    good_numbers,
    st.sampled_from(("-1", "007", "99999999999", "1000000001", "604800000", "604800001")),
)
good_durations = st.builds(
    lambda w, f: f"{w}.{f}", st.integers(0, 10**6), st.text("0123456789", min_size=1, max_size=7)
)
durations = st.one_of(
    good_durations,
    st.integers(0, 10**6).map(str),
    st.sampled_from(
        (
            "604800000.00",
            "604800000.0005",
            "604800000.0004",
            "1.2.3",
            "NaN",
            "-5.00",
            "999999999999.99",
            "9999999999999.99",
            "99999999999999999999.5",
        )
    ),
)


@st.composite
def slot_lines(draw: st.DrawFn) -> str:
    """Era C/D slot lines: half of them in the exact shapes llama.cpp prints (with any prefix,
    name, numbers and tail), the others off in one of many small ways."""
    good = draw(st.booleans())
    sp = good_spaces if good else spaces
    num = good_numbers if good else numbers

    def pick(choices: tuple[str, ...], good_ones: int) -> st.SearchStrategy[str]:
        return st.sampled_from(choices[:good_ones] if good else choices)

    name = draw(pick(NAMES, 3))
    head = (
        f"{draw(pick(PREFIXES, 5))}slot{draw(sp)}{name}:"
        f" id{draw(sp)}{draw(num)} | task {draw(num)} |"
    )
    what = draw(pick(WHAT, 3)) if name == "print_timing" or not good else ""
    if not what:
        return head + draw(pick(TAILS, 8))
    timing = (
        f"{draw(sp)}{what}{draw(sp)}={draw(sp)}"
        f"{draw(good_durations if good else durations)}{draw(sp)}ms"
        f"{draw(sp)}/{draw(sp)}{draw(num)}{draw(sp)}{draw(pick(UNITS, 1))}"
    )
    return head + timing + draw(pick(TAILS, 2))


# any str, lone surrogates included
any_text = st.text(st.characters(blacklist_categories=()), max_size=80)
messages = st.one_of(slot_lines(), any_text, st.text("slot |taskid0123 .:=/", max_size=60))

VERBATIM = (
    "slot print_timing: id  0 | task 22576 |       total time =    6739.60 ms /  2430 tokens",
    "slot print_timing: id  0 | task 36 | prompt eval time =    1171.24 ms /   381 tokens "
    "(    3.07 ms per token,   325.30 tokens per second)",
    "slot print_timing: id  0 | task 36 |        eval time =    3364.22 ms /   124 tokens "
    "(   27.13 ms per token,    36.86 tokens per second)",
    "50.10.605.993 I slot print_timing: id  0 | task 22576 |       total time =    6739.60 ms /  "
    "2430 tokens",
    "slot print_timing: id  0 | task 36 | ",
    "slot launch_slot_: id  0 | task 5 | processing task",
    "slot launch_slot_: id  0 | task 5 | processing task, is_child = 0",
    "slot      release: id  0 | task 5 | stop processing: n_past = 505, truncated = 0",
    "slot print_timing: id  0 | task 5 |    graphs reused = 3",
)
# print_timing lines whose figures the reference reads (parse.extras): handed back
HANDED_BACK = (
    "slot print_timing: id  0 | task 5 | draft acceptance = 0.00758 (    1 accepted /   132 "
    "generated), mean len =  1.02",
    "slot print_timing: id  0 | task 36 | n_gen =    300, tg =  36.86 t/s, tg_3s =  37.02 t/s",
)


def reference(msg: str) -> Token | type[ParseError] | None:
    try:
        return tokenize(msg)
    except ParseError:
        return ParseError


# -- tokenize ------------------------------------------------------------------------------------


@pytest.mark.parametrize("msg", HANDED_BACK)
def test_the_compiled_tokenizer_hands_back_the_lines_whose_figures_python_reads(msg: str) -> None:
    assert _speedups.tokenize(msg) is None
    assert reference(msg) is not None


@pytest.mark.parametrize("msg", VERBATIM)
def test_the_compiled_tokenizer_reads_every_verbatim_era_c_and_d_line(msg: str) -> None:
    got = _speedups.tokenize(msg)
    assert got is not None, "the fast path handed a common line back"
    assert got == tokenize(msg)


@settings(max_examples=examples(3000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
@example("slot print_timing: id  0 | task 1 |\t")  # whitespace the reference strips
@example("slot print_timing: id  0 | task 1 | total time = 1.00ms / 2 tokens")
@example("slot print_timing: id  0 | task 1 | total time = 604800000.0005 ms / 2 tokens")
@example("slot print_timing: id  0 | task 1 | total time = 99999999999999999999.5 ms / 2 tokens")
@example("slot print_timing: id  0 | task 1 | total time = 1.00 ms / 99999999999999999999 tokens")
@example("slot print_timing: id  99999999999999999999 | task 1 | total time = 1.00 ms / 2 tokens")
@example("slot      release: id  0 | task 1 | launch_slot_ processing task")
@example("slot launch_slot_: id  0 | task 1 | processing task \ud800")  # a lone surrogate
def test_the_compiled_tokenizer_agrees_with_the_reference_or_hands_back(msg: str) -> None:
    got = _speedups.tokenize(msg)  # never raises on a str
    want = reference(msg)
    if got is not None:
        assert want is not ParseError, f"the reference rejects {msg!r}, the fast path gave {got}"
        assert got == want


def test_the_compiled_tokenizer_takes_only_a_str_and_hands_back_str_subclasses() -> None:
    class Text(str):  # may read differently (its own __contains__): the reference's to read
        __slots__ = ()

    assert _speedups.tokenize(Text(VERBATIM[0])) is None
    with pytest.raises(TypeError):
        _speedups.tokenize(VERBATIM[0].encode())  # type: ignore[arg-type]


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(slot_lines(), max_size=30), st.lists(st.integers(0, 3_000_000), max_size=30))
def test_a_parser_gives_the_same_records_with_and_without_the_fast_path(
    msgs: list[str], gaps: list[int]
) -> None:
    lines, t = [], 1_790_000_000_000_000
    for i, msg in enumerate(msgs):
        t += gaps[i] if i < len(gaps) else 1000
        lines.append(LogLine(NODE, t, "", 4242 + (i == len(msgs) - 1), msg))
    assert _records(lines, fast=True) == _records(lines, fast=False)


def _records(lines: Sequence[LogLine], *, fast: bool) -> list[Record]:
    """`feed_all` (the compiled feed and tokenizer where they apply) or `feed_reference`."""
    p = Parser(NODE)
    got = p.feed_all(lines) if fast else p.feed_reference(lines)
    return [*got, *p.flush(2**62)]


# -- feed: the state machine over whole requests -------------------------------------------------

# One step of a node's journal: what line, on which slot and task. The tasks are few, so that
# launches, blocks, totals and stops of the same and of different requests meet in every order.
STEP_LINES = {
    "launch": "slot launch_slot_: id  {s} | task {t} | processing task",
    "header": "slot print_timing: id  {s} | task {t} | ",
    "prompt": "slot print_timing: id  {s} | task {t} | prompt eval time =  1171.24 ms /  {n} tokens"
    " (    3.07 ms per token,   325.30 tokens per second)",
    "eval": "slot print_timing: id  {s} | task {t} |        eval time =  3364.22 ms /  {n} tokens",
    "eval_b": "        eval time =  3364.22 ms /  {n} runs",  # era A/B: Python's, no ids
    "total": "slot print_timing: id  {s} | task {t} |       total time =  {n}.60 ms /  {n} tokens",
    "total_b": "       total time =  {n}.60 ms",  # era A: Python's
    "release": "slot      release: id  {s} | task {t} | stop processing: n_past = 5, truncated = 0",
    "stop_b": "slot released id_slot={s} id_task={t} n_ctx_slot=8192",  # era B: Python's
    "other": "slot print_timing: id  {s} | task {t} |    graphs reused = 3",
    "garbled": "slot print_timing: id  {s} | task {t} |       total time = {n}.x ms / 3 tokens",
    # what a current server logs besides (all Python's): n_cmpl children, cancel and error
    # lines, its start-up and exit, systemd's lines for the unit, a router's instances
    "child": "slot launch_slot_: id  {s} | task {t} | processing task, is_child = 1",
    "cancel": "srv          stop: cancel task, id_task = {t}",
    "error": "srv    send_error: task id = {t}, error: request ({n} tokens) exceeds the context",
    "slots": "srv    load_model: initializing, n_slots = {s}, n_ctx_slot = 512",
    "exit": "srv    operator(): operator(): cleaning up before exit...",
    "draft": "slot print_timing: id  {s} | task {t} | draft acceptance = 0.00758 (    1 accepted /"
    "   {n} generated), mean len =  1.02",
    "decode": "slot print_timing: id  {s} | task {t} | n_gen =    300, tg =  36.86 t/s, tg_3s = "
    " {n}.02 t/s",
    "sleep": "srv  handle_sleep: server is entering sleeping state",
    "wake": "srv  handle_sleep: server is exiting sleeping state",
    "queued": "srv          join: request for name=tiny-{s} queued at position {n}",
    "waiting": "srv  ensure_model: waiting until model name=tiny-{s} is fully loaded...",
    "unit_up": "Started sm-llm.service - sm-llm llama-server.",
    "unit_stopping": "Stopping sm-llm.service - sm-llm llama-server...",
    "unit_gone": "sm-llm.service: Main process exited, code=killed, status=9/KILL",
    "wallclock": "2025-11-15 14:23:35.060 I slot launch_slot_: id  {s} | task {t} | processing task",
    "quoted": "srv  log_server_r: request: slot launch_slot_: id  {s} | task {t} | processing task",
    "routed": "[ 8081] slot launch_slot_: id  {s} | task {t} | processing task",
    "routed_total": "[4242] slot print_timing: id  {s} | task {t} |       total time =  {n}.60 ms /  "
    "{n} tokens",
    "spawn": "srv          load: spawning server instance with name=m{s} on port 8081",
    "instance_exit": "srv           run: instance name=m{s} exited with status 1",
}
steps = st.tuples(
    st.sampled_from(sorted(STEP_LINES)),
    st.integers(0, 2),  # slot
    st.integers(0, 3),  # task
    st.integers(1, 2000),  # a number (tokens, ms)
    st.sampled_from((4242, 4242, 4242, 4242, 0, 5151, 1)),  # pid: mostly one server (1: systemd)
    st.sampled_from((1000, 1000, 200_000, 900_000, 1_500_000)),  # microseconds since the last
)


LAUNCH_STOP = [("launch", 0, 1, 5, 4242, 1000), ("release", 0, 1, 5, 4242, 1000)]


@settings(max_examples=examples(1000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, max_size=60), st.lists(st.integers(1, 60), max_size=6), st.booleans())
@example(LAUNCH_STOP, [], False)  # a stop before any timing block of its slot: a cancel
@example([*LAUNCH_STOP, ("total", 0, 1, 5, 4242, 1000)], [], False)  # ... unless it comes
@example([("launch", 0, 1, 5, 4242, 1000), ("launch", 0, 1, 5, 0, 1000)] * 3, [1, 2], True)
def test_the_compiled_feed_leaves_records_and_state_as_the_python_loop_does(
    program: list[tuple[str, int, int, int, int, int]], cuts: list[int], resume: bool
) -> None:
    lines, t = [], 1_790_000_000_000_000
    for what, slot, task, number, pid, gap in program:
        t += gap
        lines.append(LogLine(NODE, t, "", pid, STEP_LINES[what].format(s=slot, t=task, n=number)))
    results = []
    for fast in (True, False):
        p, got, at = Parser(NODE), list[Record](), 0
        feed = Parser.feed_all if fast else Parser.feed_reference
        for cut in [*cuts, len(lines)]:  # the same lines in batches cut anywhere
            got += feed(p, tuple(lines[at : at + cut]))
            at += cut
            if resume:  # from a checkpoint between batches
                p = parser_of(NODE, json.loads(json.dumps(parser_state(p))))
        got += feed(p, tuple(lines[at:]))
        results.append((got, parser_state(p), p.flush(2**62)))
    assert results[0] == results[1]


def test_the_compiled_feed_runs_whole_requests_and_hands_back_a_stop_to_decide() -> None:
    t, pid = 1_790_000_000_000_000, 4242
    msgs = [STEP_LINES[w].format(s=0, t=7, n=100) for w in ("launch", "prompt", "eval", "total")]
    lines = tuple(LogLine(NODE, t + k, "", pid, m) for k, m in enumerate(msgs))
    p, out = Parser(NODE, pid=pid), list[object]()
    assert _speedups.feed(p, lines, 0, out, FEED_TYPES, p.max_in_flight) == 4
    assert [type(r).__name__ for r in out] == ["Event", "Interval"]
    assert out == Parser(NODE, pid=pid).feed_reference(lines)  # (and Python agrees)
    # a stop of a launched request before its timing block: Python adds the pending stop
    stop = LogLine(NODE, t + 9, "", pid, STEP_LINES["release"].format(s=0, t=8, n=0))
    launch = LogLine(NODE, t + 8, "", pid, STEP_LINES["launch"].format(s=0, t=8, n=0))
    assert _speedups.feed(p, (launch, stop), 0, out, FEED_TYPES, p.max_in_flight) == 1
    # another server's line is Python's to restart on
    other = LogLine(NODE, t + 10, "", pid + 1, msgs[0])
    assert _speedups.feed(p, (other,), 0, [], FEED_TYPES, p.max_in_flight) == 0


def test_the_compiled_feed_changes_only_whole_lines_whatever_allocation_fails() -> None:
    """Whichever one allocation fails, `feed` raises having changed nothing, or stops at a line
    having fed exactly the lines before it (the line it could not feed undone, left to Python):
    what `Parser.feed_all` counts on instead of a copy of the state before every batch. Failing
    to make the block at the end lets go of the block of a request not yet timed, nothing
    more."""
    t, pid = 1_790_000_000_000_000, 4242
    program = [
        ("launch", 0, 5000),
        ("launch", 1, 5001),
        ("header", 0, 5000),
        ("prompt", 0, 5000),
        ("eval", 0, 5000),
        ("total", 0, 5000),
        ("release", 0, 5000),
        ("prompt", 1, 5001),
    ]
    lines = tuple(
        LogLine(NODE, t + 1000 * k, "", pid, STEP_LINES[what].format(s=slot, t=task, n=300 + k))
        for k, (what, slot, task) in enumerate(program)
    )

    def fed(upto: int) -> tuple[object, list[object]]:
        p, out = Parser(NODE, pid=pid), list[object]()
        assert _speedups.feed(p, lines[:upto], 0, out, FEED_TYPES, p.max_in_flight) == upto
        return parser_state(p), out

    assert fed(len(lines))[0] != fed(0)[0]
    outcomes = set()
    for k in range(1, 300):
        p, out = Parser(NODE, pid=pid), list[object]()
        _testcapi.set_nomemory(k, k + 1)  # (only the k-th allocation from here fails)
        try:
            at: int | None = _speedups.feed(p, lines, 0, out, FEED_TYPES, p.max_in_flight)
        except MemoryError:
            at = None
        finally:
            _testcapi.remove_mem_hooks()
        state, want = fed(at or 0)
        if at is not None and parser_state(p) != state:  # the block could not be made
            clean = Parser(NODE, pid=pid)
            _speedups.feed(clean, lines[:at], 0, [], FEED_TYPES, clean.max_in_flight)
            clean.block = NO_BLOCK
            assert p.block is NO_BLOCK and parser_state(p) == parser_state(clean)
            outcomes.add("block let go")
        else:
            assert parser_state(p) == state
            outcomes.add("raised" if at is None else "stopped" if at < len(lines) else "fed")
        assert out == want
        if at == len(lines) and k > 200:
            break
    assert outcomes == {"raised", "stopped", "fed", "block let go"}


def _request_lines(
    t: int, pid: int, tasks: range, python_line_at: int | None
) -> tuple[LogLine, ...]:
    """Whole requests on slot 0, one after another; where asked, a line only the Python loop
    reads (a launch on the busy slot: the request on it is lost), after which the compiled feed
    reads on."""
    msgs = [STEP_LINES[w].format(s=0, t=task, n=300) for task in tasks for w in STEP_ORDER]
    if python_line_at is not None:
        msgs.insert(python_line_at, STEP_LINES["launch"].format(s=0, t=7999))
    return tuple(LogLine(NODE, t + 1000 * k, "", pid, m) for k, m in enumerate(msgs))


STEP_ORDER = ("launch", "header", "prompt", "eval", "total", "release")


@pytest.mark.parametrize(("python_line_at", "fails_at_call"), [(None, 1), (7, 1), (7, 2)])
def test_a_compiled_feed_that_fails_costs_no_line_and_counts_none_twice(
    monkeypatch: pytest.MonkeyPatch, fails_at_call: int, python_line_at: int | None
) -> None:
    """A defect in the compiled feed (here: raising before it changes anything, as it does):
    the batch is read from where the state is known, each line alone, and comes out as the
    reference reads it, with the parser's state."""
    lines = _request_lines(1_790_000_000_000_000, 4242, range(700, 704), python_line_at)
    reference = Parser(NODE, pid=4242)
    want = reference.feed_reference(lines)
    calls = 0

    def failing(*args: Any) -> int:
        nonlocal calls
        calls += 1
        if calls == fails_at_call:
            raise RuntimeError("a defect")
        return _speedups.feed(*args)

    monkeypatch.setattr(parser_module, "_fast_feed", failing)
    p = Parser(NODE, pid=4242)
    assert p.feed_all(lines) == want
    assert parser_state(p) == parser_state(reference)
    assert calls == fails_at_call  # (it failed: from there on each line went alone)


def test_a_batch_the_compiled_feed_reads_whole_takes_no_copy_of_the_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The way back from a defect is a copy of the parser's state, taken only before the first
    line the Python loop reads, once a batch."""
    copies = 0
    savepoint: Callable[[Parser], tuple[Any, ...]] = vars(Parser)["_savepoint"]

    def counted(self: Parser) -> tuple[Any, ...]:
        nonlocal copies
        copies += 1
        return savepoint(self)

    monkeypatch.setattr(Parser, "_savepoint", counted)
    p = Parser(NODE, pid=4242)
    p.feed_all(_request_lines(1_790_000_000_000_000, 4242, range(700, 710), None))
    assert copies == 0
    p.feed_all(_request_lines(1_790_000_100_000_000, 4242, range(710, 720), 13))
    assert copies == 1


def test_the_compiled_feed_leaves_a_bound_that_shrank_to_the_reference() -> None:
    """Six slots timed, then the server says it has one: the next total forgets slots as the
    reference does (the compiled feed once kept them all)."""
    t, pid = 1_790_000_000_000_000, 4242
    lines = [
        LogLine(NODE, t + s, "", pid, STEP_LINES["total"].format(s=s, t=s, n=100)) for s in range(6)
    ]
    lines.append(LogLine(NODE, t + 10, "", pid, "load_model: initializing slots, n_slots = 1"))
    lines.append(LogLine(NODE, t + 20, "", pid, STEP_LINES["total"].format(s=0, t=9, n=100)))
    p, q = Parser(NODE), Parser(NODE)
    assert p.feed_all(tuple(lines)) == q.feed_reference(tuple(lines))
    state = parser_state(p)
    assert state == parser_state(q) and len(state["last_timed"]) == 5  # (one forgotten)


OUT_OF_RANGE = (-1, MAX_TIME_US + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**19 - 1)


@pytest.mark.parametrize("time_us", OUT_OF_RANGE)
def test_the_compiled_feed_hands_back_a_time_out_of_range(time_us: int) -> None:
    t, pid = 1_790_000_000_000_000, 4242
    total = STEP_LINES["total"].format(s=0, t=7, n=100)
    lines = (LogLine(NODE, t, "", pid, total), LogLine(NODE, time_us, "", pid, total))
    p, out = Parser(NODE, pid=pid), list[object]()
    assert _speedups.feed(p, lines, 0, out, FEED_TYPES, p.max_in_flight) == 1
    assert len(out) == 1  # the first line's interval, nothing of the second
    got = Parser(NODE, pid=pid).feed_all(lines)
    assert got == Parser(NODE, pid=pid).feed_reference(lines)
    assert [type(r).__name__ for r in got] == ["Interval", "Event"]


@pytest.mark.parametrize("pid", [2**63, -(2**63) - 1, 2**64, 10**30])
def test_the_compiled_feed_hands_back_a_pid_that_does_not_fit(pid: int) -> None:
    t = 1_790_000_000_000_000
    msgs = [STEP_LINES[w].format(s=0, t=7, n=100) for w in ("launch", "total")]
    lines = (LogLine(NODE, t, "", 4242, msgs[0]), LogLine(NODE, t + 1, "", pid, msgs[1]))
    assert _speedups.feed(Parser(NODE, pid=4242), lines, 0, [], FEED_TYPES, 9) == 1
    assert _speedups.feed(Parser(NODE, pid=pid), lines[1:], 0, [], FEED_TYPES, 9) == 0
    p, q = Parser(NODE), Parser(NODE)
    got = p.feed_all(lines)
    assert got == q.feed_reference(lines)
    assert parser_state(p) == parser_state(q)
    assert [r.kind for r in got if isinstance(r, Event)][-1] == EventKind.RESTART


def test_the_compiled_feed_hands_back_a_line_that_is_no_log_line() -> None:
    line = LogLine(NODE, 1, "", 4242, STEP_LINES["launch"].format(s=0, t=7, n=100))
    float_time: tuple[Any, ...] = (NODE, 1.0, "", 4242, line.message)
    bool_pid: tuple[Any, ...] = (NODE, 1, "", True, line.message)
    odd_lines: list[Any] = [tuple(line), LogLine(*float_time), LogLine(*bool_pid)]
    for odd in odd_lines:
        assert _speedups.feed(Parser(NODE, pid=4242), (line, odd), 0, [], FEED_TYPES, 9) == 1


def test_the_compiled_feed_hands_back_a_block_it_cannot_hold() -> None:
    """A parser restored from a checkpoint whose block holds a number beyond 64 bits."""
    state = parser_state(Parser(NODE, pid=4242))
    state["block"] = [0, 7, 2**64, 5, None, None]
    lines = (LogLine(NODE, 1, "", 4242, STEP_LINES["total"].format(s=0, t=7, n=100)),)
    p, q = parser_of(NODE, state), parser_of(NODE, state)
    assert _speedups.feed(p, lines, 0, [], FEED_TYPES, 9) == 0
    got = p.feed_all(lines)
    assert got == q.feed_reference(lines)
    assert isinstance(got[0], Interval) and got[0].prompt_us == 2**64


def test_the_compiled_feed_refuses_record_types_it_cannot_build() -> None:
    types = (dict, *FEED_TYPES[1:])
    with pytest.raises(TypeError, match="NamedTuple"):
        _speedups.feed(Parser(NODE), (), 0, [], types, 1)


@pytest.mark.parametrize("start", [-1, 2, 2**40])
def test_the_compiled_feed_refuses_a_start_outside_its_lines(start: int) -> None:
    line = LogLine(NODE, 1, "", 4242, STEP_LINES["launch"].format(s=0, t=7, n=100))
    with pytest.raises(IndexError):
        _speedups.feed(Parser(NODE, pid=4242), (line,), start, [], FEED_TYPES, 9)


# -- scan ----------------------------------------------------------------------------------------

stamps = st.sampled_from(
    (
        "2026-09-22T07:31:04.127792+0000",
        "2026-09-22T07:31:04+00:00",
        "2026-09-22T07:31:04.1-0530",
        "2024-02-29T23:59:60.999999Z",
        "2026-09-22T07:31:04.1234567+0000",
        "2026-13-22T07:31:04.127792+0000",
        "2023-02-29T07:31:04+0000",
        "2026-09-22T24:00:00+0000",
        "2026-09-22T07:60:04+0000",
        "1969-12-31T23:59:59.5+0000",
        "1970-01-01T00:30:00+0015",  # the line is after the epoch, its hour (with offset) not
        "1970-01-01T00:00:00.000001-0000",
        "1970-01-01T00:00:00+0001",
        "9999-12-31T23:59:59.999999+0000",
        "9999-12-31T23:59:60+0000",  # one second after the last time there is
        "9999-12-31T22:59:59-0100",
        "2026-09-22T07:31:04+2400",
        "2026-09-22T07:31:04.+0000",
        "2026-09-22T07:31:04+05",
        "2026-09-22 07:31:04+0000",
    )
)
idents = st.sampled_from(
    (
        "sm-llm[1234]",
        "sm-llm",
        "llama-server[7]",
        "a:b[1]",
        "x[]",
        "sm llm[1]",
        "kernel",
        "s[1]x",
        "sm-llm[4294967295]",
        "sm-llm[12345678901]",  # 11 digits: PID 0, as the decoder reads it
        "sm-llm[99999999999999999999999]",
        "sm-llm[0042]",
    )
)
bodies = st.one_of(
    st.sampled_from(VERBATIM),
    st.sampled_from(("all slots are idle", "GET /health 200", "slot released id_slot=0 id_task=1")),
    st.text(max_size=40),
)


@st.composite
def short_lines(draw: st.DrawFn) -> bytes:
    """`-o short-iso-precise` lines, right and wrong in the ways that matter."""
    sep = draw(st.sampled_from((" ", ": ", ":", "\t")))
    host = draw(st.sampled_from(("node0", "n", "")))
    text = f"{draw(stamps)} {host} {draw(idents)}{sep}{draw(bodies)}"
    raw = text.encode("utf-8", "surrogatepass").replace(b"\n", b" ")
    return raw + draw(st.sampled_from((b"", b"\r", b"\xff\xfe")))


# -- the usual journal JSON entry, and everything near it --

GOOD_TIMES = ("1790062375127792", "0", "1", str(MAX_TIME_US), "007", "000000000000000001")
BAD_TIMES = (
    "",
    str(MAX_TIME_US + 1),
    "9999999999999999999",
    str(2**64),
    "-1",
    "+5",
    " 12",
    "12 ",
    "1_000",
    "1e5",
    "0x10",
    "\u0661\u0662",  # Arabic-Indic digits: int() takes them
    "0000000000000000000001",  # 22 digits, a small value
    "1" * 30,
)
GOOD_PIDS = ("4242", "1", "0", "0042", "4294967295", "9999999999")
BAD_PIDS = ("", "12345678901", "-1", " 5", "5 ", "\u0665", "1" * 25, "4_2")
CURSORS = (
    "s=8f2a1c;i=1f;b=4f2a;m=12ab;t=63a1b2c3d4e5f;x=9e",
    "",
    'quote " and backslash \\ and slash /',
    "caf\u00e9 \U0001f600",
)
COMMON_VALUES = st.sampled_from(("998", "stdout", "/opt/llama.cpp/bin/llama-server -c 8", ""))
FIELDS = (
    "__MONOTONIC_TIMESTAMP",
    "_BOOT_ID",
    "_TRANSPORT",
    "PRIORITY",
    "SYSLOG_IDENTIFIER",
    "SYSLOG_PID",
    "_UID",
    "_COMM",
    "_CMDLINE",
    "_SYSTEMD_UNIT",
    "_HOSTNAME",
    "CODE_FILE",
    "",
    "\u00e9",
)
# values that are no string, as JSON text: what journalctl writes for binary and large fields,
# other JSON, and what is no JSON at all
NON_STRINGS = st.sampled_from(
    (
        "null",
        "[116, 111, 116, 97, 108, 32, 116, 105, 109, 101]",  # "total time" as bytes
        "[255, 254]",
        "[]",
        '{"nested": "total time"}',
        "1790062375127792",
        "-1",
        str(2**64),
        "1.5",
        "1e999",
        "true",
        "01",
        "nul",
        "[1,]",
        "1.",
        "-",
        "{",
        "]",
        "'x'",
        "",
    )
)
# messages of the characters JSON escapes, and a keyword
escapable = st.builds(
    lambda a, b: a + "total time" + b,
    *[st.text('"\\/\b\f\n\r\t\x00\x1f\x7f \u00e9\u2028\uffff\U0001f600x', max_size=12)] * 2,
)
keyed = st.builds(lambda m, k: m + k, bodies, st.sampled_from((" total time", " stop processing")))
SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f"} | {
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


class JsonText(str):
    """A value written as it is (not as a JSON string)."""

    __slots__ = ()


def _u(code: int, upper: bool) -> str:
    return f"\\u{code:04X}" if upper else f"\\u{code:04x}"


def json_string(text: str, styles: Sequence[int]) -> str:
    """`text` as a JSON string literal, each character by `styles` (which cycles): 0 raw where
    json allows it, 1 its short escape (as 0 where it has none), 2 \\uXXXX in upper case hex
    unless a letter, digit or space (which keeps keywords readable), 3 \\uxxxx; a character
    above U+FFFF as a surrogate pair."""
    out = ['"']
    for k, ch in enumerate(text):
        style, code = styles[k % len(styles)] if styles else 0, ord(ch)
        plain = ch not in '"\\' and code >= 0x20  # (a lone surrogate too: json takes it)
        if style == 1 and ch in SHORT_ESCAPES:
            out.append(SHORT_ESCAPES[ch])
        elif plain and (style in (0, 1) or (style == 2 and (ch == " " or ch.isalnum()))):
            out.append(ch)
        elif code > 0xFFFF:
            code -= 0x10000
            out += [_u(0xD800 + (code >> 10), style == 2), _u(0xDC00 + (code & 0x3FF), style == 2)]
        else:
            out.append(_u(code, style == 2))
    return "".join(out) + '"'


@st.composite
def json_entries(draw: st.DrawFn, *, usual: bool = False) -> bytes:
    """`journalctl -o json` lines. `usual`: the shape the compiled decode takes (one flat object
    of string fields, valid UTF-8, the time and PID decimal and in range); otherwise also off
    that shape in every way that matters: a field missing, duplicated or no string, an escaped
    key or number, a time or PID out of range, invalid UTF-8, trailing bytes, truncation."""
    # off the usual shape in exactly one way (so that no other hides it)
    fault = draw(st.integers(0, len(FAULTS) - 1)) if not usual and draw(st.booleans()) else -1
    fields: list[tuple[str, str]] = [
        ("__CURSOR", draw(st.sampled_from(CURSORS))),
        ("__REALTIME_TIMESTAMP", draw(st.sampled_from(BAD_TIMES if fault == 0 else GOOD_TIMES))),
        ("_PID", draw(st.sampled_from(BAD_PIDS if fault == 1 else GOOD_PIDS))),
        ("MESSAGE", draw(st.one_of(st.sampled_from(VERBATIM), slot_lines(), keyed, escapable))),
    ]
    values = st.one_of(COMMON_VALUES, st.text(max_size=40) if usual else any_text)
    fields += draw(st.lists(st.tuples(st.sampled_from(FIELDS), values), max_size=6))
    fields = draw(st.permutations(fields))
    at = draw(st.integers(0, len(fields) - 1))
    if fault == 2:
        del fields[at]
    elif fault == 3:  # json keeps the last of two; either may be the other value
        fields.insert(draw(st.integers(0, len(fields))), (fields[at][0], draw(any_text)))
    elif fault == 4:
        fields[at] = (fields[at][0], JsonText(draw(NON_STRINGS)))
    elif fault == 5:  # bytes no string may hold, in some other field ...
        fields.insert(at, (draw(st.sampled_from(FIELDS)), PAYLOAD))
    elif fault == 6:  # ... or in the message
        fields = [(k, PAYLOAD + v if k == "MESSAGE" else v) for k, v in fields]
    styles = draw(st.lists(st.integers(0, 3), max_size=4))
    ws = st.sampled_from(("", " ", "  ", "\t", "\r")) if not usual else st.sampled_from(("", " "))
    items = []
    for key, value in fields:
        if isinstance(value, JsonText):
            text = str(value)
        else:
            # the numbers are written plain in the usual shape (an escaped digit is handed back)
            plain = usual and key in ("__REALTIME_TIMESTAMP", "_PID")
            text = json_string(value, [] if plain else styles).replace(_u(0xE000, True), PAYLOAD)
        # fault 7: a key escaped (each on its own: an escaped copy of a field is that field)
        key_text = json_string(key, styles if fault == 7 and draw(st.booleans()) else [])
        items.append(f"{draw(ws)}{key_text}{draw(ws)}:{draw(ws)}{text}{draw(ws)}")
    line = ("{" + ",".join(items) + "}" + draw(ws)).encode("utf-8", "surrogatepass")
    if fault in (5, 6):
        line = line.replace(PAYLOAD.encode(), draw(st.sampled_from(FAULTS[5])))
    elif fault == 8:
        line = draw(st.sampled_from(FAULTS[8]))(line)
    return line.replace(b"\n", b" ")


PAYLOAD = "\ue000"  # (a character no other part uses: where the bytes of fault 5 and 6 go)
FAULTS: dict[int, Any] = {
    0: "a time that is no decimal in range",
    1: "a PID that is no decimal of 1 to 10 digits",
    2: "a field missing",
    3: "a field twice",
    4: "a value that is no string",
    5: (
        b"sl\xc3\x28t",  # invalid UTF-8
        b"\xed\xa0\x80",  # a surrogate, UTF-8 encoded (json takes it)
        b"\xf4\x90\x80\x80",  # beyond U+10FFFF
        b"\xc0\xaf",  # overlong
        b"\xff",
        b"\\x",
        b"\\ud800",
        b"\\udc00\\ud800",
        b"\\ud83d\\u0041",
        b"\\u12G4",
        b"\\u00",
        b"\\",
        b"\t",
        b"\x00",
        b"\x1f",
        b'"',
    ),
    6: "the same in the message",
    7: "an escaped key",
    8: (
        lambda line: line + b"x",
        lambda line: line + b"}",
        lambda line: line + b"{}",
        lambda line: line + b",",
        lambda line: line[:-1],
        lambda line: line[: len(line) // 2],
        lambda line: line[:1] + b"\x00" + line[1:],
        lambda line: line.replace(b"}", b",}"),
        lambda line: line.replace(b":", b"", 1),
        lambda line: line.replace(b",", b"", 1),
        lambda line: line.replace(b",", b",,", 1),
    ),
}


def _decoded(decoder: EntryDecoder, raw: bytes) -> LogLine | type[EntryError] | None:
    try:
        return decoder.decode(raw)
    except EntryError:
        return EntryError


def check_scan(data: bytes, since_us: int, max_line: int) -> Sequence[bytes | LogLine]:
    """`_speedups.scan(data)` finds what `find_lines` finds, each line raw or as the LogLine the
    decoder makes of it (left out when older than since_us), no line longer than max_line
    decoded; its items."""
    items, newlines, n_raw = _speedups.scan(data, KEYWORDS, NODE, since_us, LogLine, max_line)
    assert newlines == data.count(b"\n")
    assert n_raw == sum(type(item) is bytes for item in items)
    decoder, at = EntryDecoder(NODE), 0
    for raw in find_lines(data):
        if at < len(items) and items[at] == raw:  # handed back for EntryDecoder
            at += 1
            continue
        assert len(raw) <= max_line, f"scan decoded a line of {len(raw)} > {max_line} bytes"
        decoded = _decoded(decoder, raw)
        assert isinstance(decoded, LogLine), f"scan decoded {raw!r}, which the decoder rejects"
        if decoded.time_us < since_us:  # decoded and left out, as `since` says
            continue
        assert at < len(items), f"scan lost {raw!r}"
        assert items[at] == decoded, raw
        assert type(items[at]) is LogLine
        at += 1
    assert at == len(items), "scan found lines that find_lines does not"
    return items


@st.composite
def dump_lines(draw: st.DrawFn) -> bytes:
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return b'{"__REALTIME_TIMESTAMP": "1790062264127792", "MESSAGE": [116, 111]}'
    if shape == 1:
        return draw(st.binary(max_size=40)).replace(b"\n", b" ") + b"total time"
    if shape < 6:
        return draw(json_entries())
    return draw(short_lines())


SINCE = st.sampled_from((0, 1_790_062_264_000_000, -(2**70), 2**70))


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(dump_lines(), max_size=12),
    st.booleans(),
    SINCE,
    st.sampled_from((MAX_LINE, MAX_LINE, 120, 300, 0, -1)),
)
def test_scan_finds_the_reference_lines_and_decodes_only_as_the_decoder_does(
    raws: list[bytes], final_newline: bool, since_us: int, max_line: int
) -> None:
    data = b"\n".join(raws) + (b"\n" if final_newline and raws else b"")
    check_scan(data, since_us, max_line)


@settings(max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(json_entries(usual=True), min_size=1, max_size=5))
def test_scan_decodes_every_usual_journal_json_entry_itself(raws: list[bytes]) -> None:
    """Whatever the message (escapes, any Unicode but lone surrogates), field order and extra
    fields: decoded in C, to the decoder's LogLine."""
    keyed = [raw for raw in raws if find_lines(raw)]
    items = check_scan(b"\n".join(keyed), 0, MAX_LINE)
    assert all(type(item) is LogLine for item in items), items
    assert len(items) == len(keyed)


def test_scan_decodes_the_plain_lines_itself() -> None:
    raw = b"2026-09-22T07:31:04.127792+0000 node0 sm-llm[1234]: " + VERBATIM[0].encode()
    data = (
        raw + b"\nno keyword here\n" + raw + b"\n-- Boot 4f2a --\n2026-09-22 garbled total time\n"
    )
    items, newlines, n_raw = _speedups.scan(data, KEYWORDS, NODE, 0, LogLine, MAX_LINE)
    assert newlines == 5
    assert n_raw == 1
    assert items[1:] == [items[0], b"2026-09-22 garbled total time"]
    first, second = items[0], items[1]
    assert isinstance(first, LogLine) and isinstance(second, LogLine)
    assert first is not second and first.pid is second.pid  # one PID object, shared
    assert items[:1] == [EntryDecoder(NODE).decode(raw)]
    assert type(items[0]) is LogLine


@pytest.mark.parametrize("keywords", [KEYWORDS, (b"total time", b"eval time"), (b"launch",)])
def test_scan_keeps_a_common_slot_line_only_when_it_holds_one_of_the_keywords(
    keywords: tuple[bytes, ...],
) -> None:
    """After a common slot line, scan reads the next line first, not searching it: that line is
    kept without a search only where every common slot line holds a keyword (the parser's
    keywords do; `total time` alone does not hold a launch line)."""
    prefix = "2026-09-22T07:31:04.127792+0000 node0 sm-llm[1234]: "
    data = "".join(f"{prefix}{msg}\n" for msg in VERBATIM + VERBATIM[::-1]).encode()
    data += b"no keyword here\n" + f"{prefix}{VERBATIM[5]}".encode()  # (no newline at the end)
    items, newlines, n_raw = _speedups.scan(data, keywords, NODE, 0, LogLine, MAX_LINE)
    kept = [line for line in data.split(b"\n") if any(k in line for k in keywords)]
    assert (newlines, n_raw) == (data.count(b"\n"), 0)
    assert len(items) == len(kept) > 0
    decoder = EntryDecoder(NODE)
    assert list(items) == [decoder.decode(line) for line in kept]


def test_scan_reads_each_lines_date_where_it_changes() -> None:
    """Scan keeps the last date it read (a dump's lines are in order): a new day, a bad date
    between good ones and the date it had before each read as the decoder reads them."""
    stamps = (
        "2024-02-28T23:59:59.999999+0000",
        "2024-02-29T00:00:00.000001+0000",
        "2024-02-30T00:00:00.000001+0000",  # no such day: the decoder's to refuse
        "2024-02-29T01:00:00.000001+0000",
        "2023-02-29T01:00:00.000001+0000",  # no leap year
        "2024-02-29T25:00:00.000001+0000",  # the same day, a bad hour
        "2024-02-29T02:00:00.000001+0000",
        "2024-03-01T00:30:00.000001-0100",
        "2024-13-01T00:30:00.000001+0000",
        "2024-03-01T00:30:00.000001+0000",
    )
    data = b"".join(f"{t} node0 sm-llm[1234]: {VERBATIM[0]}\n".encode() for t in stamps)
    items = check_scan(data, 0, MAX_LINE)
    assert len(items) == len(stamps)
    raw = [type(item) is bytes for item in items]
    assert [i for i, left in enumerate(raw) if left] == [2, 4, 5, 8]  # (the bad ones)


def test_scan_hands_over_lines_it_decoded_all_of_as_one_lines_made_on_access() -> None:
    raw = b"2026-09-22T07:31:04.127792+0000 node0 sm-llm[1234]: " + VERBATIM[0].encode()
    data = bytearray(raw + b"\nno keyword here\n" + raw.replace(b"04.1", b"05.1") + b"\n")
    items, newlines, n_raw = _speedups.scan(bytes(data), KEYWORDS, NODE, 0, LogLine, MAX_LINE)
    del data  # (scan's own bytes object is all the Lines holds on to)
    assert isinstance(items, _speedups.Lines)
    assert (newlines, n_raw, len(items)) == (3, 0, 2)
    want = EntryDecoder(NODE).decode(raw)
    assert items[0] == items[-2] == want and items[0] is items[0]  # made once
    assert items[1].time_us == want.time_us + 1_000_000 and items[1:] == (items[1],)
    assert items == [want, items[1]] and items == (want, items[1]) and items != [want]
    assert items != 5 and repr(items) == "<Lines of 2>" and items[::-1] == (items[1], want)
    for bad in (2, -3):
        with pytest.raises(IndexError):
            items[bad]
    with pytest.raises(TypeError):
        items["0"]  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        hash(items)
    joined = _speedups.join([items, [want], (), items])
    assert type(joined) is _speedups.Lines and list(joined) == [*items, want, *items]
    assert _speedups.join([[want], (want,)]) == (want, want)  # no Lines: a tuple
    assert type(_speedups.join([[want]])) is tuple and _speedups.join([]) == ()
    assert join([items]) is items  # (a chunk's one Lines: handed on, not copied)
    assert join([items, items]) == [*items, *items]
    older, _, _ = _speedups.scan(raw + b"\n", KEYWORDS, NODE, want.time_us + 1, LogLine, MAX_LINE)
    assert type(older) is _speedups.Lines and len(older) == 0 and not older


JOURNAL_JSON = (
    b'{ "__CURSOR" : "s=8f2a;i=1f;b=4f2a;m=12ab;t=63a1b2c3d4e5f;x=9e", '
    b'"__REALTIME_TIMESTAMP" : "1790062375127792", "__MONOTONIC_TIMESTAMP" : "5127792", '
    b'"_BOOT_ID" : "4f2a", "_PID" : "4242", "_CMDLINE" : "llama-server --port 8080", '
    b'"MESSAGE" : "slot print_timing: id  0 | task 22576 |       total time =    6739.60 ms /  '
    b'2430 tokens" }'
)


def test_scan_decodes_journalctl_json_itself_and_leaves_older_entries_out() -> None:
    escaped = JOURNAL_JSON.replace(b"slot", b'\\"sl\\u00f6t\\"\\n\\ud83d\\ude00')
    data = JOURNAL_JSON + b"\n" + escaped + b"\n"
    items, newlines, n_raw = _speedups.scan(data, KEYWORDS, NODE, 0, LogLine, MAX_LINE)
    assert (newlines, n_raw) == (2, 0)
    decoder = EntryDecoder(NODE)
    assert items == [decoder.decode(JOURNAL_JSON), decoder.decode(escaped)]
    assert items[0] == LogLine(
        NODE,
        1_790_062_375_127_792,
        "s=8f2a;i=1f;b=4f2a;m=12ab;t=63a1b2c3d4e5f;x=9e",
        4242,
        VERBATIM[0],
    )
    assert isinstance(items[1], LogLine)
    assert items[1].message.startswith('"sl\u00f6t"\n\U0001f600 print_timing')
    assert _speedups.scan(data, KEYWORDS, NODE, 1_790_062_375_127_793, LogLine, MAX_LINE) == (
        [],
        2,
        0,
    )


@pytest.mark.parametrize(
    "raw",
    [
        JOURNAL_JSON.replace(b'"1790062375127792"', b'"%d"' % (MAX_TIME_US + 1)),
        JOURNAL_JSON.replace(b'"1790062375127792"', b'"9999999999999999999"'),
        JOURNAL_JSON.replace(b'"1790062375127792"', b"1790062375127792"),
        JOURNAL_JSON.replace(b'"1790062375127792"', b"1e999"),
        JOURNAL_JSON.replace(b'"4242"', b'"12345678901"'),
        JOURNAL_JSON.replace(b'"4242"', b"4242"),
        JOURNAL_JSON.replace(b'"MESSAGE" : "', b'"MESSAGE" : ["').replace(b'" }', b'"] }'),
        JOURNAL_JSON.replace(b"slot", b"\\ud800"),
        JOURNAL_JSON.replace(b"slot", b"\xff"),
        JOURNAL_JSON.replace(b'"_PID"', b'"\\u005fPID"'),
        JOURNAL_JSON.replace(b'" }', b'", "MESS\\u0041GE" : "x" }'),  # a second MESSAGE, escaped
        JOURNAL_JSON.replace(b'"_CMDLINE" : "llama-server --port 8080"', b'"_X" : {"a": "b"}'),
        JOURNAL_JSON.replace(b'"_CMDLINE"', b'"MESSAGE"'),
        JOURNAL_JSON + b" x",
    ],
)
def test_scan_hands_back_journal_json_off_the_usual_shape(raw: bytes) -> None:
    items, _, n_raw = _speedups.scan(raw, KEYWORDS, NODE, 0, LogLine, MAX_LINE)
    assert (items, n_raw) == ([raw], 1)


def test_scan_hands_back_every_line_longer_than_max_line() -> None:
    short = b"2026-09-22T07:31:04.127792+0000 node0 sm-llm[1234]: " + VERBATIM[0].encode()
    for raw in (short + b"\r", JOURNAL_JSON + b"\r"):  # (the CR counts: it is the line's)
        for max_line, decoded in ((len(raw), True), (len(raw) - 1, False), (-1, False)):
            items, _, n_raw = _speedups.scan(raw + b"\n", KEYWORDS, NODE, 0, LogLine, max_line)
            assert n_raw == (not decoded)
            assert items == ([EntryDecoder(NODE).decode(raw)] if decoded else [raw])


@pytest.mark.parametrize(
    "keywords",
    [(), (b"x",), (b"a\nb",), ("total time",), tuple(b"k%d" % i for i in range(65))],
)
def test_scan_refuses_keywords_it_cannot_search_for(keywords: tuple[bytes, ...]) -> None:
    with pytest.raises((ValueError, TypeError)):
        _speedups.scan(b"total time\n", keywords, NODE, 0, LogLine, MAX_LINE)


def test_scan_refuses_a_line_type_that_is_no_plain_tuple() -> None:
    with pytest.raises(TypeError):
        _speedups.scan(b"total time\n", KEYWORDS, NODE, 0, dict, MAX_LINE)  # type: ignore[arg-type]


@pytest.mark.parametrize("since_us, max_line", [(0.0, MAX_LINE), (0, "1"), (None, MAX_LINE)])
def test_scan_refuses_a_since_or_max_line_that_is_no_int(
    since_us: object, max_line: object
) -> None:
    with pytest.raises(TypeError):
        _speedups.scan(b"total time\n", KEYWORDS, NODE, since_us, LogLine, max_line)  # type: ignore[arg-type]


def test_scan_takes_ints_of_any_size_for_since_and_max_line() -> None:
    data = JOURNAL_JSON + b"\n"
    assert _speedups.scan(data, KEYWORDS, NODE, 2**80, LogLine, 2**80) == ([], 1, 0)
    items, _, n_raw = _speedups.scan(data, KEYWORDS, NODE, -(2**80), LogLine, -(2**80))
    assert (items, n_raw) == ([JOURNAL_JSON], 1)


@pytest.mark.parametrize(
    "ws, json_takes",
    [(b" \t\r ", True), (b"\x0c", False), (b"\x0b", False), (b"\xc2\xa0", False), (b"\x1c", False)],
)
def test_scan_takes_only_what_json_takes_as_whitespace(ws: bytes, json_takes: bool) -> None:
    """json's whitespace is space, tab, CR and LF, nothing else (str.isspace's others are not)."""
    raw = JOURNAL_JSON.replace(b", ", b"," + ws, 1)
    items, _, n_raw = _speedups.scan(raw, KEYWORDS, NODE, 0, LogLine, MAX_LINE)
    if json_takes:
        assert (items, n_raw) == ([EntryDecoder(NODE).decode(raw)], 0)
    else:
        assert (items, n_raw) == ([raw], 1)
        assert _decoded(EntryDecoder(NODE), raw) is EntryError


# -- scan: a long chunk, its halves read in two threads ------------------------------------------

# A chunk of SCAN_SPLIT bytes or more is cut at the newline after its middle and its halves are
# scanned in two threads, their lines joined. The chunks here are up to 3 MiB of a node's
# journal, with lines drawn as above placed where the cut falls.
MIB = 1 << 20
SPLIT = 512 << 10  # _speedups.c's SCAN_SPLIT
# what a server logs between its requests (no keyword in any)
NOISE = (
    "srv  update_slots: all slots are idle",
    "srv  log_server_r: request: GET /health 127.0.0.1 200",
    "srv  params_from_: Chat format: Content-only",
    "slot get_availabl: id  0 | task -1 | selected slot by LRU, t_last = 5",
    "srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200",
    "que    start_loop: processing new tasks",
)
QUOTED = 'the client says "stop" \\ ' + dumps.TOTAL  # a message with characters JSON escapes
DUMP_SPAN_S = 4000  # a long dump's seconds (at most)


def journal_line(form: str, t_us: int, msg: str, seq: int) -> bytes:
    return dumps.short(t_us, msg) if form == "short" else as_json(t_us, msg, seq)


@functools.cache
def long_dump(form: str, raw: bool) -> bytes:
    """3 MiB and more of a node's journal as `form` writes it (`short` or `json`): a request a
    second on two slots, its launch, total and release lines among lines of no keyword, and now
    and then one with characters JSON escapes; with `raw`, lines the compiled scan hands back
    as well (no journal line but a keyword in it, an identifier its decode does not take, an
    escaped key), which the decoder reads or names as errors."""
    out: list[bytes] = []
    size = i = 0
    while size <= 3 * MIB:
        t, s = dumps.T0 + i * SECOND, i % 2
        lines = [
            journal_line(form, t + k, msg, i * 20 + k)
            for k, msg in enumerate(
                (
                    *NOISE,
                    dumps.LAUNCH.format(s=s, t=i),
                    *NOISE,
                    (QUOTED if i % 7 == 0 else dumps.TOTAL).format(s=s, t=i, ms=2.5, n=100 + i),
                    dumps.RELEASE.format(s=s, t=i, n=100 + i),
                    *NOISE,
                )
            )
        ]
        if raw and i % 5 == 0:
            lines += [
                b"no journal line, but total time in it",
                dumps.short(t + 50, dumps.TOTAL.format(s=s, t=i, ms=1.0, n=3)).replace(
                    b" sm-llm[", b" sm+llm["
                ),
                JOURNAL_JSON.replace(b'"_PID"', b'"\\u005fPID"'),
            ]
        out += lines
        size += sum(map(len, lines)) + len(lines)
        i += 1
    assert i < DUMP_SPAN_S
    return b"\n".join(out) + b"\n"


def whole_lines(dump: bytes, start: int, size: int) -> bytes:
    """`size` bytes of whole lines: those of `dump` from `start` (a line's start) that fit, then a
    line of dots to make up the rest."""
    end = max(dump.rfind(b"\n", start, start + size) + 1, start)
    pad = size - (end - start)
    return dump[start:end] + (b"." * (pad - 1) + b"\n" if pad else b"")


def chunk_about(dump: bytes, middle: bytes, size: int, at: int, last: bytes = b"") -> bytes:
    """A chunk of `size` bytes: whole lines of `dump`, then `middle` (whole lines) with the chunk's
    middle byte at middle[at] (-1: on the newline just before it), so that scan cuts it after
    the line holding that byte; then the next lines of `dump`, and `last`."""
    head = whole_lines(dump, 0, size // 2 - at)
    tail_from = dump.rfind(b"\n", 0, len(head)) + 1
    data = head + middle + whole_lines(dump, tail_from, size - len(head) - len(middle) - len(last))
    data += last
    assert len(data) == size and len(head) + at == size // 2
    cut = data.index(b"\n", size // 2) + 1  # where scan cuts the chunk
    assert len(head) <= cut <= len(head) + len(middle)
    return data


def decoded_lines(data: bytes) -> list[LogLine]:
    """The LogLines the decoder makes of the keyword lines of `data` (all journal lines)."""
    decoder = EntryDecoder(NODE)
    return [line for raw in find_lines(data) if (line := decoder.decode(raw)) is not None]


# the same lines ended by CR LF, or with NULs in the lines of no keyword (scan frames by newlines
# alone: the line layer makes NULs line ends before it)
VARIANTS = {
    "": lambda data: data,
    "crlf": lambda data: data.replace(b"\n", b"\r\n"),
    "nul": lambda data: data.replace(b"all slots", b"all\0slots"),
}


@st.composite
def long_chunks(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A chunk of SCAN_SPLIT to 3 MiB (or a byte less) of a long dump, with lines drawn as above
    in the middle, its middle byte on one of them or the newline just before them (so the cut
    falls before, inside or after a line, keyword or not); its last line ended by a newline or
    not; and whether the compiled scan decodes every line of it. Lines it hands back are all
    through the chunk, or only among those in the middle (then in one half alone), or nowhere."""
    raw_dump, raw_middle = draw(st.booleans()), draw(st.booleans())
    form = draw(st.sampled_from(("short", "json")))
    dump = VARIANTS[draw(st.sampled_from(sorted(VARIANTS)))](long_dump(form, raw_dump))
    plain = st.builds(
        lambda t, msg: dumps.short(dumps.T0 + t, msg),
        st.integers(0, DUMP_SPAN_S * SECOND),
        st.sampled_from(VERBATIM),
    )
    drawn = dump_lines() if raw_middle else st.one_of(plain, json_entries(usual=True))
    middle = b"".join(line + b"\n" for line in draw(st.lists(drawn, min_size=1, max_size=6)))
    sizes = st.sampled_from((SPLIT - 1, SPLIT, SPLIT + 1, MIB, 3 * MIB))
    size = draw(st.one_of(sizes, st.integers(SPLIT, 3 * MIB)))
    at = draw(st.integers(-1, len(middle) - 1))
    last = b"" if draw(st.booleans()) else journal_line(form, dumps.T0, VERBATIM[0], 0)
    return chunk_about(dump, middle, size, at, last), not (raw_dump or raw_middle)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_chunks(), st.one_of(SINCE, st.integers(dumps.T0, dumps.T0 + DUMP_SPAN_S * SECOND)))
def test_scan_reads_a_long_chunk_in_two_halves_as_the_reference_reads_it_whole(
    chunk: tuple[bytes, bool], since_us: int
) -> None:
    """Every keyword line of the chunk, in order, the lines about the cut as well, decoded or
    handed back as in a short chunk (the older left out), and every newline counted."""
    data, clean = chunk
    items = check_scan(data, since_us, MAX_LINE)
    if clean:  # every line decoded in C: one Lines of both halves
        assert type(items) is _speedups.Lines


AT_THE_CUT = {
    "short": dumps.short(dumps.T0, VERBATIM[0]),
    "short_crlf": dumps.short(dumps.T0, VERBATIM[0]) + b"\r",
    "json": JOURNAL_JSON,
    "json_escaped": as_json(dumps.T0, QUOTED.format(s=0, t=1, ms=2.5, n=3), 1),
    "short_nul": dumps.short(dumps.T0, VERBATIM[0]).replace(b"id  ", b"id\0 "),
    "raw": b"no journal line, but total time in it",
    "json_raw": JOURNAL_JSON.replace(b'"_PID"', b'"\\u005fPID"'),
    "json_nul_raw": JOURNAL_JSON.replace(b"id  ", b"id\0 "),  # (no JSON: json refuses a NUL)
}


@pytest.mark.parametrize("name", sorted(AT_THE_CUT))
@pytest.mark.parametrize("where", ["before", "first byte", "inside", "newline"])
@pytest.mark.parametrize("size", [SPLIT, MIB])
def test_scan_reads_the_keyword_lines_on_both_sides_of_the_cut_of_a_long_chunk(
    name: str, where: str, size: int
) -> None:
    """A chunk of SCAN_SPLIT bytes or more, cut just before a keyword line (the middle byte on the
    newline before it) or just after it (the middle byte on its first byte, inside it or on its
    newline), the same line on the other side of the cut: both read as in a short chunk."""
    line = AT_THE_CUT[name]
    at = {"before": -1, "first byte": 0, "inside": len(line) // 2, "newline": len(line)}[where]
    data = chunk_about(long_dump("short", False), (line + b"\n") * 2, size, at)
    items = check_scan(data, 0, MAX_LINE)
    assert type(items) is (list if "raw" in name else _speedups.Lines)


@pytest.mark.parametrize("form", ["short", "json"])
@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("older_left_out", [False, True])
def test_a_line_handed_back_in_one_half_of_a_long_chunk_alone_hands_back_a_list(
    form: str, first: bool, older_left_out: bool
) -> None:
    """One line the compiled scan does not decode, in the first half of a long chunk or in the
    second, the other half all decoded: the chunk's lines come as a list, that line as bytes,
    the decoded ones older than since_us (the first three quarters) left out."""
    dump = long_dump(form, False)
    dump = dump[: dump.rfind(b"\n", 0, 2 * MIB) + 1]
    raw = b"no journal line, but total time in it\n"
    data = raw + dump if first else dump + raw
    decoded = decoded_lines(dump)
    since_us = decoded[len(decoded) * 3 // 4].time_us if older_left_out else 0
    items = check_scan(data, since_us, MAX_LINE)
    kept = [line for line in decoded if line.time_us >= since_us]
    assert items == ([raw[:-1], *kept] if first else [*kept, raw[:-1]])
    assert type(items) is list
    assert len(kept) < len(decoded) / 2 if older_left_out else kept == decoded


@pytest.mark.parametrize("form", ["short", "json"])
@pytest.mark.parametrize("max_line", [MAX_LINE, 2 * MIB])
def test_scan_reads_a_long_chunk_whole_when_no_newline_follows_its_middle(
    form: str, max_line: int
) -> None:
    """A chunk of SCAN_SPLIT bytes or more whose middle is in its last line, with no newline after
    it, is read as one part: the lines before, and that last line, decoded or handed back as it
    fits max_line."""
    dump = long_dump(form, False)
    head = dump[: dump.rfind(b"\n", 0, MIB // 2) + 1]
    last = journal_line(form, dumps.T0 + 7, VERBATIM[0] + " " + "x" * MIB, 7)
    items = check_scan(head + last, 0, max_line)
    assert len(items) == len(find_lines(head)) + 1
    assert (type(items[-1]) is LogLine) == (max_line > MAX_LINE)


def test_a_long_chunk_read_in_two_halves_is_one_lines_that_joins_and_feeds_as_its_log_lines() -> (
    None
):
    """The Lines of a chunk read in two threads: the lines of both halves in order, by index and
    by slice, joined with another, and fed (its common lines read from their bytes) to the same
    records as the decoder's LogLines; since_us leaves out the older lines, in both halves."""
    dump = long_dump("short", False)
    cut = dump.rfind(b"\n", 0, len(dump) // 2) + 1
    chunks = (dump[:cut], dump[cut:])  # 1.5 MiB each: both read in two halves
    want = [decoded_lines(chunk) for chunk in chunks]
    scanned = []
    for chunk in chunks:
        items, newlines, n_raw = _speedups.scan(chunk, KEYWORDS, NODE, 0, LogLine, MAX_LINE)
        assert isinstance(items, _speedups.Lines)
        assert (newlines, n_raw) == (chunk.count(b"\n"), 0)
        scanned.append(items)
    first, second = scanned
    joined = _speedups.join([first, second])
    # fed before any of its LogLines is made: the compiled feed reads the bytes
    assert _records(joined, fast=True) == _records(tuple(want[0] + want[1]), fast=False)
    n = len(want[0])
    assert len(first) == n and len(joined) == n + len(want[1])
    assert first[n // 2 - 3 : n // 2 + 3] == tuple(want[0][n // 2 - 3 : n // 2 + 3])
    assert first[-1] == want[0][-1] and first[-n] == want[0][0] and first[n - 1] is first[-1]
    assert first[::-97] == tuple(want[0][::-97])
    assert joined == want[0] + want[1] and second == want[1]
    # the lines of the chunk's last second alone: the first half's all left out
    since_us = want[0][-1].time_us - SECOND // 2
    newer, _, _ = _speedups.scan(chunks[0], KEYWORDS, NODE, since_us, LogLine, MAX_LINE)
    assert newer == [line for line in want[0] if line.time_us >= since_us]
    assert 0 < len(newer) < 5
