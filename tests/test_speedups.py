"""The compiled fast paths give exactly what their pure-Python references give, or hand back.

`_speedups.tokenize(msg)` must be None or equal to `parse.tokenize(msg)` (and None wherever the
reference raises), and `_speedups.scan` must find the same lines as `relevant_lines`, decoding
a line only to the LogLine that `LineDecoder` makes of it. Hypothesis builds the lines from the
verbatim llama.cpp shapes with every perturbation that changes how the reference reads them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from exporter import parse
from exporter.logline import LogLine, Record
from exporter.parse import ParseError, Parser, Token, tokenize
from exporter.sources import file as file_source
from exporter.sources.dump import DumpLineError, LineDecoder
from exporter.sources.file import relevant_lines

from conftest import IN_CI

if importlib.util.find_spec("exporter._speedups") is None:  # pragma: no cover
    if IN_CI:
        pytest.fail("exporter._speedups is not built; `make test` builds it (needs gcc)")
    pytest.skip("_speedups not built (not CI; make test installs gcc)", allow_module_level=True)

from exporter import _speedups

NODE = "node0"

# -- the pieces lines are made of ----------------------------------------------------------------

PREFIXES = ("", "50.10.605.993 I ", "0.00.001.002 W ", "I ", "x ", "srv ", "id 3 | task 4 | ")
NAMES = ("print_timing", "launch_slot_", "release", "releases", "launch_slot", "print_timings")
WHAT = ("prompt eval time", "eval time", "total time", "graphs reused", "n_decoded", "")
UNITS = ("tokens", "runs", "token", "tokens (  3.07 ms per token)")
TAILS = (
    "",
    " (    3.07 ms per token,   325.30 tokens per second)",
    " processing task",
    " processing task, is_child = 0",
    " stop processing: n_past = 505, truncated = 0",
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
    st.sampled_from(("604800000.00", "604800000.0005", "604800000.0004", "1.2.3", "NaN", "-5.00")),
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
        f"{draw(pick(PREFIXES, 4))}slot{draw(sp)}{name}:"
        f" id{draw(sp)}{draw(num)} | task {draw(num)} |"
    )
    what = draw(pick(WHAT, 3)) if name == "print_timing" or not good else ""
    if not what:
        return head + draw(pick(TAILS, 6))
    timing = (
        f"{draw(sp)}{what}{draw(sp)}={draw(sp)}"
        f"{draw(good_durations if good else durations)}{draw(sp)}ms"
        f"{draw(sp)}/{draw(sp)}{draw(num)}{draw(sp)}{draw(pick(UNITS, 1))}"
    )
    return head + timing + draw(pick(TAILS, 2))


messages = st.one_of(
    slot_lines(), st.text(max_size=80), st.text("slot |taskid0123 .:=/", max_size=60)
)

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


def reference(msg: str) -> Token | type[ParseError] | None:
    try:
        return tokenize(msg)
    except ParseError:
        return ParseError


# -- tokenize ------------------------------------------------------------------------------------


@pytest.mark.parametrize("msg", VERBATIM)
def test_the_compiled_tokenizer_reads_every_verbatim_era_c_and_d_line(msg: str) -> None:
    got = _speedups.tokenize(msg)
    assert got is not None, "the fast path handed a common line back"
    assert got == tokenize(msg)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
@example("slot print_timing: id  0 | task 1 |\t")  # whitespace the reference strips
@example("slot print_timing: id  0 | task 1 | total time = 1.00ms / 2 tokens")
@example("slot print_timing: id  0 | task 1 | total time = 604800000.0005 ms / 2 tokens")
@example("slot      release: id  0 | task 1 | launch_slot_ processing task")
def test_the_compiled_tokenizer_agrees_with_the_reference_or_hands_back(msg: str) -> None:
    got = _speedups.tokenize(msg)
    want = reference(msg)
    if got is not None:
        assert want is not ParseError, f"the reference rejects {msg!r}, the fast path gave {got}"
        assert got == want


@settings(max_examples=300, deadline=None)
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
    with _compiled(fast):
        p = Parser(NODE)
        return [*p.feed_all(lines), *p.flush(2**62)]


@contextlib.contextmanager
def _compiled(on: bool) -> Iterator[None]:
    """The parser with its compiled paths (`tokenize` and `feed`) on, or both off."""
    saved = parse._fast_tokenize, parse._fast_feed
    if not on:
        parse._fast_tokenize = parse._fast_feed = None
    try:
        yield
    finally:
        parse._fast_tokenize, parse._fast_feed = saved


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
}
steps = st.tuples(
    st.sampled_from(sorted(STEP_LINES)),
    st.integers(0, 2),  # slot
    st.integers(0, 3),  # task
    st.integers(1, 2000),  # a number (tokens, ms)
    st.sampled_from((4242, 4242, 4242, 4242, 0, 5151)),  # pid: mostly one server
    st.sampled_from((1000, 1000, 200_000, 900_000, 1_500_000)),  # microseconds since the last
)


LAUNCH_STOP = [("launch", 0, 1, 5, 4242, 1000), ("release", 0, 1, 5, 4242, 1000)]


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
    for on in (True, False):
        with _compiled(on):
            p, got, at = Parser(NODE), [], 0
            for cut in [*cuts, len(lines)]:  # the same lines in batches cut anywhere
                got += p.feed_all(tuple(lines[at : at + cut]))
                at += cut
                if resume:  # from a checkpoint between batches
                    p = Parser.from_state(NODE, json.loads(json.dumps(p.state())))
            got += p.feed_all(tuple(lines[at:]))
            results.append((got, p.state(), p.flush(2**62)))
    assert results[0] == results[1]


def test_the_compiled_feed_runs_whole_requests_and_hands_back_a_stop_to_decide() -> None:
    t, pid = 1_790_000_000_000_000, 4242
    msgs = [STEP_LINES[w].format(s=0, t=7, n=100) for w in ("launch", "prompt", "eval", "total")]
    lines = tuple(LogLine(NODE, t + k, "", pid, m) for k, m in enumerate(msgs))
    p, out = Parser(NODE, pid=pid), list[object]()
    assert _speedups.feed(p, lines, 0, out, parse._FEED_TYPES, parse.MAX_STARTED) == 4
    assert [type(r).__name__ for r in out] == ["Event", "Interval"]
    assert out == Parser(NODE, pid=pid).feed_all(lines)  # (and Python agrees)
    # a stop of a launched request before its timing block: Python adds the pending stop
    stop = LogLine(NODE, t + 9, "", pid, STEP_LINES["release"].format(s=0, t=8, n=0))
    launch = LogLine(NODE, t + 8, "", pid, STEP_LINES["launch"].format(s=0, t=8, n=0))
    assert _speedups.feed(p, (launch, stop), 0, out, parse._FEED_TYPES, parse.MAX_STARTED) == 1
    # another server's line is Python's to restart on
    other = LogLine(NODE, t + 10, "", pid + 1, msgs[0])
    assert _speedups.feed(p, (other,), 0, [], parse._FEED_TYPES, parse.MAX_STARTED) == 0


def test_the_compiled_feed_refuses_record_types_it_cannot_build() -> None:
    types = (dict, *parse._FEED_TYPES[1:])
    with pytest.raises(TypeError, match="NamedTuple"):
        _speedups.feed(Parser(NODE), (), 0, [], types, 1)


# -- scan ----------------------------------------------------------------------------------------

KEYWORDS = file_source._KEYWORDS
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
        "2026-09-22T07:31:04+2400",
        "2026-09-22T07:31:04.+0000",
        "2026-09-22T07:31:04+05",
        "2026-09-22 07:31:04+0000",
    )
)
idents = st.sampled_from(
    ("sm-llm[1234]", "sm-llm", "llama-server[7]", "a:b[1]", "x[]", "sm llm[1]", "kernel", "s[1]x")
)
bodies = st.one_of(
    st.sampled_from(VERBATIM),
    st.sampled_from(("all slots are idle", "GET /health 200", "slot released id_slot=0 id_task=1")),
    st.text(max_size=40),
)


@st.composite
def dump_lines(draw: st.DrawFn) -> bytes:
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return b'{"__REALTIME_TIMESTAMP": "1790062264127792", "MESSAGE": [116, 111]}'
    if shape == 1:
        return draw(st.binary(max_size=40)).replace(b"\n", b" ") + b"total time"
    sep = draw(st.sampled_from((" ", ": ", ":", "\t")))
    host = draw(st.sampled_from(("node0", "n", "")))
    text = f"{draw(stamps)} {host} {draw(idents)}{sep}{draw(bodies)}"
    raw = text.encode("utf-8", "surrogatepass").replace(b"\n", b" ")
    return raw + draw(st.sampled_from((b"", b"\r", b"\xff\xfe")))


def _decoded(raw: bytes) -> LogLine | type[DumpLineError] | None:
    try:
        return LineDecoder(NODE).decode(raw)
    except DumpLineError:
        return DumpLineError


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(dump_lines(), max_size=12), st.booleans(), st.sampled_from((0, 1_790_062_264_000_000))
)
def test_scan_finds_the_reference_lines_and_decodes_only_as_the_decoder_does(
    raws: list[bytes], final_newline: bool, since_us: int
) -> None:
    data = b"\n".join(raws) + (b"\n" if final_newline and raws else b"")
    items, newlines, n_raw = _speedups.scan(data, KEYWORDS, NODE, since_us, LogLine)
    assert newlines == data.count(b"\n")
    assert n_raw == sum(type(item) is bytes for item in items)
    at = 0
    for raw in relevant_lines(data):
        if at < len(items) and items[at] == raw:  # handed back for LineDecoder
            at += 1
            continue
        decoded = _decoded(raw)
        assert isinstance(decoded, LogLine), f"scan decoded {raw!r}, which the decoder rejects"
        if decoded.time_us < since_us:  # decoded and left out, as `since` says
            continue
        assert at < len(items) and items[at] == decoded, raw
        assert type(items[at]) is LogLine
        at += 1
    assert at == len(items), "scan found lines that relevant_lines does not"


def test_scan_decodes_the_plain_lines_itself() -> None:
    raw = b"2026-09-22T07:31:04.127792+0000 node0 sm-llm[1234]: " + VERBATIM[0].encode()
    data = (
        raw + b"\nno keyword here\n" + raw + b"\n-- Boot 4f2a --\n2026-09-22 garbled total time\n"
    )
    items, newlines, n_raw = _speedups.scan(data, KEYWORDS, NODE, 0, LogLine)
    assert newlines == 5
    assert n_raw == 1
    assert items[1:] == [items[0], b"2026-09-22 garbled total time"]
    first, second = items[0], items[1]
    assert isinstance(first, LogLine) and isinstance(second, LogLine)
    assert first is not second and first.pid is second.pid  # one PID object, shared
    items = items[:1]
    assert items == [LineDecoder(NODE).decode(raw)]
    assert type(items[0]) is LogLine


@pytest.mark.parametrize(
    "keywords",
    [(), (b"x",), (b"a\nb",), ("total time",), tuple(b"k%d" % i for i in range(65))],
)
def test_scan_refuses_keywords_it_cannot_search_for(keywords: tuple[bytes, ...]) -> None:
    with pytest.raises((ValueError, TypeError)):
        _speedups.scan(b"total time\n", keywords, NODE, 0, LogLine)


def test_scan_refuses_a_line_type_that_is_no_plain_tuple() -> None:
    with pytest.raises(TypeError):
        _speedups.scan(b"total time\n", KEYWORDS, NODE, 0, dict)  # type: ignore[arg-type]
