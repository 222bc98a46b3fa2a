"""The parser on llama-server's other lines: sleep, draft acceptance, n_gen, the router's queue.

The lines are b11434's, verbatim (tests/testdata/llama-server/README.md lists where each was
seen); each is read through the parser as a source hands it over, a batch at a time.
"""

from __future__ import annotations

import pytest

from exporter.base.records import (
    MILESTONE_WAKING,
    Draft,
    Event,
    EventKind,
    Interval,
    LogLine,
    Record,
)
from exporter.parse import extras
from exporter.parse.parser import Parser
from exporter.parse.tokens import KEYWORDS, ParseError, tokenize

T0 = 1_790_000_000_000_000
SLOT = "0.01.234.567 I slot print_timing: id  1 | task 7 | "
BLOCK = (
    SLOT + "prompt eval time =       1.70 ms /    36 tokens (    0.05 ms per token, 21213.91 "
    "tokens per second)",
    SLOT + "       eval time =      19.43 ms /    32 tokens (    0.61 ms per token,  1646.94 "
    "tokens per second)",
    SLOT + "      total time =      21.13 ms /    68 tokens",
    SLOT + "   graphs reused =         31",
)
DRAFT = SLOT + "draft acceptance = 0.00758 (    1 accepted /   132 generated), mean len =  1.02"
DECODE = SLOT + "n_gen =    300, tg =  836.86 t/s, tg_3s =  790.10 t/s"
LAUNCH = "0.01.200.000 I slot launch_slot_: id  1 | task 7 | processing task, is_child = 0"
SLEEP = "0.05.000.001 I srv  handle_sleep: server is entering sleeping state"
QUE_SLEEP = "0.05.000.000 I que    start_loop: entering sleeping state"
WAKE = "0.09.000.000 I srv  handle_sleep: server is exiting sleeping state"
RELOAD = (
    "0.09.000.100 I srv    load_model: loading model 'model.gguf'",
    "0.09.030.000 I srv    load_model: initializing, n_slots = 3, n_ctx_slot = 512, kv_unified "
    "= 'false'",
)
QUEUED = "0.00.100.000 I srv          join: request for name=tiny-b queued at position 2"
JOINED = "0.00.100.100 I srv          join: request for name=tiny-b joined the queue, 2 waiting"
WAITING = "0.00.100.200 I srv  ensure_model: waiting until model name=tiny-b is fully loaded..."


def run(*batches: list[str], model: str = "") -> list[Record]:
    """The records of `batches` of lines (each line 1 ms after the one before)."""
    p, out, t = Parser("n0"), list[Record](), T0
    for batch in batches:
        lines = []
        for msg in batch:
            t += 1000
            lines.append(LogLine("n0", t, "", 4242, msg))
        out += p.feed_all(tuple(lines))
    return out


def events(recs: list[Record], kind: EventKind) -> list[Event]:
    return [r for r in recs if type(r) is Event and r.kind is kind]


def test_every_new_line_holds_a_keyword_a_source_keeps() -> None:
    for msg in (DRAFT, DECODE, SLEEP, WAKE, QUEUED, JOINED, WAITING):
        assert any(k.decode() in msg for k in KEYWORDS), msg


@pytest.mark.parametrize("split", [4, 3, 0], ids=["same batch", "next batch", "alone"])
def test_a_draft_line_counts_under_its_request_whatever_batch_it_comes_in(split: int) -> None:
    lines = [LAUNCH, *BLOCK, DRAFT]
    recs = run(lines[: split + 1], lines[split + 1 :]) if split else run(lines[-1:])
    drafts = [r for r in recs if type(r) is Draft]
    assert len(drafts) == 1
    d = drafts[0]
    assert (d.slot, d.task, d.accepted, d.drafted) == (1, 7, 1, 132)
    # the request's own tokens (its kind's), when its block was read before
    assert d.tokens == (None if split == 0 else 68)
    assert [r.tokens for r in recs if type(r) is Interval] == ([] if split == 0 else [68])


def test_a_draft_line_of_another_request_gets_no_tokens() -> None:
    other = DRAFT.replace("task 7", "task 8")
    recs = run([LAUNCH, *BLOCK, other])
    (d,) = [r for r in recs if type(r) is Draft]
    assert (d.task, d.tokens) == (8, None)


def test_an_n_gen_line_is_the_speed_of_its_request_in_flight() -> None:
    recs = run([LAUNCH, DECODE])
    (ev,) = events(recs, EventKind.DECODE)
    assert (ev.slot, ev.task, ev.value) == (1, 7, 79010)  # hundredths of a token per second
    assert not [r for r in recs if type(r) is Interval]


def test_sleep_and_wake_and_the_reload_as_a_wake_start_up() -> None:
    recs = run([QUE_SLEEP, SLEEP], [WAKE, *RELOAD])
    assert [e.time_us for e in events(recs, EventKind.SLEEP)] == [T0 + 2000]
    assert [e.time_us for e in events(recs, EventKind.WAKE)] == [T0 + 3000]
    phases = [(e.detail, e.task) for e in events(recs, EventKind.PHASE)]
    # the wake-up's milestones, each with its line's own clock (the log prefix)
    assert phases == [
        (MILESTONE_WAKING, 9_000_000),
        ("loading", 9_000_100),
        ("slots", 9_030_000),
    ]


def test_the_routers_queue_lines() -> None:
    recs = run([QUEUED, JOINED, WAITING])
    queued = [(e.model, e.value) for e in events(recs, EventKind.QUEUED)]
    assert queued == [("tiny-b", 2), ("tiny-b", None)]
    assert [e.model for e in events(recs, EventKind.LOAD_WAIT)] == ["tiny-b"]


def test_an_instances_own_queue_like_line_is_no_routers() -> None:
    recs = run(["[42013] " + QUEUED])
    assert not events(recs, EventKind.QUEUED)


@pytest.mark.parametrize(
    "msg",
    [
        SLOT + "draft acceptance = 0.5 (    9 accepted /     3 generated), mean len =  1.02",
        SLOT + "draft acceptance = 0.5 (    x accepted /     3 generated), mean len =  1.02",
        SLOT + "n_gen =    300, tg =  836.86 t/s, tg_3s =  nan t/s",
        SLOT + "n_gen =    300, tg =  836.86 t/s, tg_3s = 99999999999999.00 t/s",
    ],
)
def test_a_figure_that_does_not_read_is_a_parse_error_naming_the_line(msg: str) -> None:
    recs = run([LAUNCH, msg])
    (err,) = events(recs, EventKind.PARSE_ERROR)
    assert "print_timing" in err.detail
    assert not [r for r in recs if type(r) is Draft]
    assert not events(recs, EventKind.DECODE)


@pytest.mark.parametrize(
    "msg",
    [
        "srv          join: request for name= queued at position 2",
        "srv          join: request for name=x queued at position two",
        "srv  ensure_model: waiting until model name=x is loaded",
        "srv          join: request for name=x joined the queue, many waiting",
    ],
)
def test_a_queue_line_of_another_shape_says_nothing(msg: str) -> None:
    assert extras.queue(msg) is None
    assert not [r for r in run([msg]) if type(r) is Event and r.kind is not EventKind.SERVER_UP]


def test_a_model_name_from_a_queue_line_is_bounded_and_cannot_pose_as_the_exporters() -> None:
    found = extras.queue("srv join: request for name=:other queued at position 1")
    assert found == (extras.QUEUED, "_:other", 1)
    found = extras.queue("srv join: request for name=" + "m" * 5000 + " queued at position 1")
    assert found is not None and len(found[1]) == 200


def test_the_tokenizer_sorts_the_new_lines() -> None:
    kinds = {msg: tokenize(msg) for msg in (DRAFT, DECODE, SLEEP, WAKE, QUEUED)}
    assert all(t is not None for t in kinds.values())
    assert tokenize(QUE_SLEEP) is None
    with pytest.raises(ParseError):
        extras.draft(SLOT + "draft acceptance = 1 (bad)")
