"""No input raises, and the compiled and pure paths agree on all of it.

Arbitrary bytes (long lines, NULs, invalid UTF-8, JSON of every shape: huge and negative
numbers, nested values, 1e999) go through `_speedups.scan` and through the pure line path
(`find_lines` and `EntryDecoder.decode`): nothing raises but the decoder's own EntryError, and
scan finds the same lines and decodes a line only to the decoder's LogLine. Arbitrary LogLines
(times and PIDs of any size, era C/D lines and any text) go through `Parser.feed_all`, through
`_speedups.feed` itself (which `feed_all` would forgive an exception) and through
`Parser.feed_reference`: nothing raises, the same records, the same parser state.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from types import ModuleType

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from exporter.base.records import LogLine, Record
from exporter.base.times import MAX_TIME_US
from exporter.checkpoint.codec import parser_of, parser_state
from exporter.compiled import switch
from exporter.parse.contract import FEED_TYPES
from exporter.parse.parser import Parser
from exporter.sources.entries import EntryDecoder, EntryError
from exporter.sources.lines import KEYWORDS, MAX_LINE, find_lines

from support.tools import require_compiled

NODE = "node0"
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def switched_off() -> bool:
    """Are the compiled paths switched off (the test command's second, pure-Python run)?"""
    return switch.speedups is None and os.environ.get(switch.ENV, "") not in ("", "0")


def compiled() -> ModuleType:
    """The compiled module (the tests ask for it only where it is not switched off)."""
    require_compiled(switch.speedups, "_speedups")
    assert switch.speedups is not None
    return switch.speedups


# -- bytes ---------------------------------------------------------------------------------------

TIMING = b"slot print_timing: id  0 | task 22576 |       total time =    6739.60 ms /  2430 tokens"
NUMBERS = (
    b'"1790062375127792"',
    b'"9999999999999999999"',
    b'"18446744073709551616"',
    b'"-1"',
    b'"%d"' % (MAX_TIME_US + 1),
    b"1790062375127792",
    b"9999999999999999999",
    b"-1",
    b"18446744073709551616",
    b"1e999",
    b"-1e999",
    b"NaN",
    b"Infinity",
    b"1.5",
    b"0" * 5000,
    b'"' + b"9" * 5000 + b'"',
    b"true",
    b"null",
    b"[]",
    b"[116, 111]",
    b"[256]",
    b"[-1]",
    b"[1e999]",
    b'["x"]',
    b'{"a": {"b": "c"}}',
    b"[" * 200 + b"]" * 200,
    b"[" * 100_000,
    b'"\\ud800"',
    b'"\\u00"',
    b'"\\x"',
    b'"a\x00b"',
    b'"\xff"',
    b'"\xed\xa0\x80"',
)
KEYS = (b'"__REALTIME_TIMESTAMP"', b'"_PID"', b'"SYSLOG_PID"', b'"__CURSOR"', b'"MESSAGE"')
PIECES = (
    b"{",
    b"}",
    b",",
    b":",
    b" ",
    b"\r",
    b"\x00",
    b"\xff",
    b"\xc3",
    b"\\",
    b'"',
    b"-- Boot 4f2a --",
    b"2026-09-22T07:31:04.127792+0000 node0 sm-llm[1234]: ",
    b"9999-12-31T23:59:60.999999-2359 n x[99999999999999999999]: ",
    b"1970-01-01T00:00:00+2359 n x: ",
    TIMING,
    b"total time",
    b"eval time",
    b"launch_slot_",
    b"stop processing",
    b'"MESSAGE":[',
    b'"MESSAGE" : [',
)


@st.composite
def json_objects(draw: st.DrawFn) -> bytes:
    """Objects of the journal's keys (and others) with values of every kind, some torn."""
    items = []
    for _ in range(draw(st.integers(0, 6))):
        key = draw(st.one_of(st.sampled_from(KEYS), st.binary(max_size=6).map(json_bytes)))
        value = draw(
            st.one_of(
                st.sampled_from(NUMBERS),
                st.just(b'"' + TIMING + b'"'),
                st.binary(max_size=12).map(json_bytes),
            )
        )
        items.append(key + draw(st.sampled_from((b":", b" : ", b": "))) + value)
    line = b"{" + b", ".join(items) + b"}"
    cut = draw(st.integers(0, len(line)))
    return line if draw(st.booleans()) else line[:cut] + draw(st.binary(max_size=4))


def json_bytes(b: bytes) -> bytes:
    return b'"' + b.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


@st.composite
def chunks(draw: st.DrawFn) -> bytes:
    """Bytes made of arbitrary bytes, journal-ish pieces and JSON, cut into lines anywhere."""
    parts = draw(
        st.lists(
            st.one_of(
                st.binary(max_size=30),
                st.sampled_from(PIECES),
                json_objects(),
                st.just(b"\n"),
                st.sampled_from(PIECES).map(lambda p: p * 40),  # long lines
            ),
            max_size=24,
        )
    )
    return b"".join(parts)


def _decode(decoder: EntryDecoder, raw: bytes) -> LogLine | EntryError | None:
    try:
        return decoder.decode(raw)  # EntryError or nothing: anything else fails the test
    except EntryError as e:
        return e


@settings(FUZZ, max_examples=1500)
@given(chunks(), st.sampled_from((MAX_LINE, MAX_LINE, 64, 200, 0)), st.sampled_from((0, 2**63)))
@example(b"{" + b'"a":' * 50_000 + b"\n", MAX_LINE, 0)
@example(b'{"MESSAGE":[' * 1000 + b"\n" + TIMING * 20_000, MAX_LINE, 0)  # a line of 1.7 MB
@example(b"\x00" * 100 + b"total time\x00\n", MAX_LINE, 0)
def test_no_bytes_raise_and_scan_agrees_with_the_pure_path(
    data: bytes, max_line: int, since_us: int
) -> None:
    decoder = EntryDecoder(NODE)
    want = [(raw, _decode(decoder, raw)) for raw in find_lines(data)]  # the pure path
    if switched_off():
        return  # (the pure path not raising is all there is to check)
    speedups = compiled()
    items, newlines, n_raw = speedups.scan(data, KEYWORDS, NODE, since_us, LogLine, max_line)
    assert newlines == data.count(b"\n")
    assert n_raw == sum(type(item) is bytes for item in items)
    at = 0
    for raw, decoded in want:
        if at < len(items) and items[at] == raw:  # handed back
            at += 1
            continue
        assert len(raw) <= max_line, "scan decoded a line longer than max_line"
        assert isinstance(decoded, LogLine), f"scan decoded {raw!r}; the decoder: {decoded!r}"
        if decoded.time_us < since_us:
            continue
        assert at < len(items) and items[at] == decoded, raw
        at += 1
    assert at == len(items), "scan found lines that find_lines does not"


# -- lines ---------------------------------------------------------------------------------------

EXTREMES = (
    -1,
    0,
    MAX_TIME_US,
    MAX_TIME_US + 1,
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    2**64,
    9_999_999_999_999_999_999,
    10**40,
)
ERA_CD = (
    "slot launch_slot_: id  {s} | task {t} | processing task",
    "slot print_timing: id  {s} | task {t} | ",
    "prompt eval time =    1171.24 ms /   {n} tokens (    3.07 ms per token,   325.30 tokens per second)",
    "       eval time =    3364.22 ms /   {n} tokens (   27.13 ms per token,    36.86 tokens per second)",
    "      total time =    {n}.80 ms /  {n} tokens",
    "slot print_timing: id  {s} | task {t} | prompt eval time =  1171.24 ms /  {n} tokens",
    "slot print_timing: id  {s} | task {t} |        eval time =  3364.22 ms /  {n} tokens",
    "50.10.605.993 I slot print_timing: id  {s} | task {t} |       total time =  {n}.60 ms /  {n} tokens",
    "slot print_timing: id  {s} | task {t} |       total time = 604800000.01 ms / 1 tokens",
    "slot print_timing: id  {s} | task {t} |    graphs reused = {n}",
    "slot print_timing: id  {s} | task {t} | draft acceptance = 0.5 (  {n} accepted /  {n} "
    "generated), mean len =  1.02",
    "slot print_timing: id  {s} | task {t} | n_gen =    {n}, tg =  36.86 t/s, tg_3s =  {n}.02 t/s",
    "srv  handle_sleep: server is entering sleeping state",
    "srv  handle_sleep: server is exiting sleeping state",
    "srv          join: request for name=m{s} queued at position {n}",
    "srv          join: request for name=m{s} joined the queue, {n} waiting",
    "srv  ensure_model: waiting until model name=m{s} is fully loaded...",
    "slot      release: id  {s} | task {t} | stop processing: n_past = {n}, truncated = 0",
    "slot released id_slot={s} id_task={t} n_ctx_slot=8192",
    "srv          stop: cancel task, id_task = {t}",
    "slot print_timing: id  {s} | task -1 |       total time =  {n}.60 ms /  {n} tokens",
)
real_times = st.integers(1_790_000_000_000_000, 1_790_000_100_000_000)
times = st.one_of(real_times, real_times, real_times, st.sampled_from(EXTREMES), st.integers())
pids = st.one_of(
    st.sampled_from((4242, 4242, 4242, 0, 5151)), st.sampled_from(EXTREMES), st.integers()
)
numbers = st.one_of(st.integers(0, 3), st.integers(0, 10**30))
era_lines = st.builds(
    lambda shape, s, t, n: shape.format(s=s, t=t, n=n),
    st.sampled_from(ERA_CD),
    numbers,
    numbers,
    numbers,
)
messages = st.one_of(
    era_lines, era_lines, st.text(st.characters(blacklist_categories=()), max_size=60)
)
log_lines = st.builds(LogLine, st.just(NODE), times, st.just(""), pids, messages)


def _sorted_by_time(lines: list[LogLine], ordered: bool) -> list[LogLine]:
    return sorted(lines, key=lambda line: line.time_us) if ordered else lines


@settings(FUZZ, max_examples=800)
@given(st.lists(log_lines, max_size=40), st.booleans(), st.lists(st.integers(1, 40), max_size=4))
@example([LogLine(NODE, 2**64, "", 4242, ERA_CD[4].format(s=0, t=1, n=5))], False, [])
@example([LogLine(NODE, -(2**63), "", 4242, ERA_CD[7].format(s=0, t=1, n=5))], False, [])
@example([LogLine(NODE, 5, "", 2**64, ERA_CD[7].format(s=0, t=1, n=5))], False, [])
def test_no_line_raises_and_the_compiled_feed_leaves_what_the_python_loop_leaves(
    lines: list[LogLine], ordered: bool, cuts: list[int]
) -> None:
    todo = _sorted_by_time(lines, ordered)
    results = []
    for run in ("feed_all", "feed", "reference"):
        if run == "feed" and switched_off():
            continue
        p, got, at = Parser(NODE), list[Record](), 0
        for cut in [*cuts, len(todo)]:  # in batches, resumed from a checkpoint between them
            batch = tuple(todo[at : at + cut])
            at += cut
            p = _feed_and_resume(run, p, batch, got)
        results.append((got, parser_state(p), p.flush(2**80)))
    assert all(r == results[-1] for r in results)


def _feed_and_resume(run: str, p: Parser, batch: Sequence[LogLine], got: list[Record]) -> Parser:
    """One batch through `run` (feed_all, the bare compiled feed, or the reference), its
    records added to `got`; the parser resumed from its checkpointed state after it."""
    if run == "feed_all":
        got += p.feed_all(batch)
    elif run == "reference":
        got += p.feed_reference(batch)
    else:
        got += _compiled_feed(p, batch)
    return parser_of(NODE, json.loads(json.dumps(parser_state(p))))


def _compiled_feed(p: Parser, lines: Sequence[LogLine]) -> list[Record]:
    """`feed_all`'s loop with the compiled `feed` called bare: an exception it raises fails the
    test (feed_all would catch it and feed the lines again one at a time)."""
    speedups, out, i = compiled(), list[Record](), 0
    while i < len(lines):
        if not p.pending_stops and not p.others:  # (as feed_all calls it)
            i = speedups.feed(p, lines, i, out, FEED_TYPES, p.max_in_flight)
            if i == len(lines):
                break
        p._feed((lines[i],), out)  # (into the batch's records, as feed_all's loop does)
        i += 1
    p._remember_totals(out)
    return out


# -- lines read from bytes -----------------------------------------------------------------------


def _journal_text(line: LogLine, form: int) -> bytes:
    """`line` as journalctl prints it: short-iso-precise (0), or -o json ASCII-escaped (1) or
    not (2)."""
    if form == 0:
        stamp = datetime.fromtimestamp(line.time_us // 1_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        head = f"{stamp}.{line.time_us % 1_000_000:06d}+0000 h sm-llm[{line.pid}]: "
        return (head + line.message).encode("utf-8", "surrogatepass")
    entry = {
        "__CURSOR": f"s=a;i={line.time_us:x}",
        "__REALTIME_TIMESTAMP": str(line.time_us),
        "_PID": str(line.pid),
        "MESSAGE": line.message,
    }
    return json.dumps(entry, ensure_ascii=form == 1).encode("utf-8", "surrogatepass")


@settings(FUZZ, max_examples=600)
@given(
    st.lists(
        st.builds(
            LogLine,
            st.just(NODE),
            real_times,
            st.just(""),
            st.sampled_from((4242, 4242, 4242, 0, 5151)),
            messages.filter(lambda m: "\n" not in m and "\r" not in m),
        ),
        max_size=40,
    ),
    st.lists(st.integers(0, 2), min_size=40, max_size=40),
    st.booleans(),
    st.lists(st.integers(1, 40), max_size=4),
)
def test_lines_read_from_bytes_feed_as_their_log_lines_do(
    lines: list[LogLine], forms: list[int], ordered: bool, cuts: list[int]
) -> None:
    """The compiled scan hands its lines over as one `Lines`, whose common lines the compiled
    `feed` reads from their bytes: the same records and parser state as the Python loop on the
    LogLines they are made into, however the lines are cut into batches (or joined)."""
    if switched_off():
        return
    speedups = compiled()
    todo = _sorted_by_time(lines, ordered)
    texts = [_journal_text(x, forms[i]) + b"\n" for i, x in enumerate(todo)]
    batches, at = [], 0
    for cut in [*cuts, len(texts)]:
        batches.append(texts[at : at + cut])
        at += cut

    def read(texts: list[bytes], joined: bool) -> Sequence[LogLine] | None:
        """The batch as scan hands it over (None when a line is left to the decoder); when
        `joined`, scanned in two halves and joined."""
        halves = [texts[: len(texts) // 2], texts[len(texts) // 2 :]] if joined else [texts]
        parts = []
        for half in halves:
            items, _, n_raw = speedups.scan(b"".join(half), KEYWORDS, NODE, 0, LogLine, MAX_LINE)
            if n_raw:
                return None
            assert type(items) is speedups.Lines
            parts.append(items)
        whole: Sequence[LogLine] = parts[0] if len(parts) == 1 else speedups.join(parts)
        return whole

    results = []
    for run in ("feed_all", "feed", "reference"):
        p, got = Parser(NODE), list[Record]()
        for k, texts_k in enumerate(batches):
            batch = read(texts_k, joined=k % 2 == 1)
            if batch is None:
                return  # (a line the decoder must judge: no Lines to test)
            if run == "reference":
                made = tuple(batch)
                assert made == tuple(batch[i] for i in range(-len(made), 0)) == batch[:]
                batch = made
            p = _feed_and_resume(run, p, batch, got)
        results.append((got, parser_state(p), p.flush(2**80)))
    assert all(r == results[-1] for r in results)
