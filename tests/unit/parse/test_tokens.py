"""The tokenizer on its own: exact durations, and each kind of line to its Token.

(The parser's tests feed the same lines through the state machine; tests/unit/compiled/
test_speedups.py holds the compiled tokenizer to this one.)"""

from __future__ import annotations

import pytest

from exporter.base.records import SERVER_MILESTONES
from exporter.parse import tokens
from exporter.parse.tokens import (
    CANCEL,
    ERROR,
    EXIT,
    HEADER,
    INSTANCE,
    KEYWORDS,
    LAUNCH,
    LISTEN,
    MAX_DURATION_US,
    OTHER,
    PHASE,
    RELEASE,
    SLOTS,
    TOKEN_KINDS,
    TOTAL,
    UNIT,
    UNIT_GONE,
    UNIT_STARTING,
    UNIT_STOPPING,
    UNIT_UP,
    ParseError,
    classify,
    ms_to_us,
    tokenize,
)


@pytest.mark.parametrize(
    ("text", "us"),
    [
        ("0.00", 0),
        ("6739.60", 6_739_600),
        ("47390.06", 47_390_060),
        ("3209.839", 3_209_839),
        ("1.0005", 1_001),
        ("1.0004", 1_000),
        ("7", 7000),
    ],
)
def test_ms_to_us_is_exact(text: str, us: int) -> None:
    assert ms_to_us(text) == us


def test_ms_to_us_refuses_absurd() -> None:
    with pytest.raises(ParseError):
        ms_to_us(str(MAX_DURATION_US // 1000 + 1))


@pytest.mark.parametrize(
    ("msg", "token"),
    [
        ("slot print_timing: id  0 | task 22 |", (HEADER, 0, 22, None, None)),
        ("slot launch_slot_: id  2 | task 0 | processing task", (LAUNCH, 2, 0, None, None)),
        (
            "slot launch_slot_: id  2 | task 1 | processing task, is_child = 1",
            (LAUNCH, 2, 1, None, 1),
        ),
        (
            "slot      release: id  2 | task 0 | stop processing: n_tokens = 94",
            (RELEASE, 2, 0, None, None),
        ),
        (
            "INFO [ launch_slot_with_task] slot is processing task | id_slot=0 id_task=408",
            (LAUNCH, 0, 408, None, None),
        ),
        ("INFO [ update_slots] slot released | id_slot=0 id_task=408", (RELEASE, 0, 408, None, 1)),
        ("print_timings:       total time =    4535.45 ms", (TOTAL, None, None, 4_535_450, None)),
        ("load_model: initializing slots, n_slots = 3", (SLOTS, None, None, None, 3)),
        ("main: cleaning up before exit...", (EXIT, None, None, None, None)),
        ("W srv          stop: cancel task, id_task = 7", (CANCEL, None, 7, None, None)),
        ("E srv    send_error: task id = 8, error: too long", (ERROR, None, 8, None, None)),
        (
            "0.00.001.587 I main: server is listening on http://127.0.0.1:8080",
            (LISTEN, None, None, 1_587, None),
        ),
        (
            "srv  llama_server: initializing",
            (PHASE, None, None, None, SERVER_MILESTONES.index("initializing")),
        ),
        (
            "load_model: loading model 'm'",
            (PHASE, None, None, None, SERVER_MILESTONES.index("loading")),
        ),
        (
            "srv  llama_server: model loaded",
            (PHASE, None, None, None, SERVER_MILESTONES.index("loaded")),
        ),
        ("INFO [ main] model loaded | tid=1", (LISTEN, None, None, None, None)),
        (
            "Starting sm-llm.service - sm-llm llama-server...",
            (UNIT, None, None, None, UNIT_STARTING),
        ),
        ("Started sm-llm.service - sm-llm llama-server.", (UNIT, None, None, None, UNIT_UP)),
        (
            "Stopping sm-llm.service - sm-llm llama-server...",
            (UNIT, None, None, None, UNIT_STOPPING),
        ),
        ("sm-llm.service: Main process exited, code=killed", (UNIT, None, None, None, UNIT_GONE)),
        (
            "srv load: spawning server instance with name=m on port 42013",
            (INSTANCE, None, None, None, None),
        ),
        (
            "slot print_timing: id  0 | task -1 |       total time =  1.00 ms /  2 tokens",
            (OTHER, None, None, None, None),
        ),
    ],
)
def test_each_kind_of_line_is_its_token(msg: str, token: tuple[object, ...]) -> None:
    assert tokenize(msg) == token


@pytest.mark.parametrize(
    "msg",
    [
        "",
        "srv  log_server_r: request: GET /health 127.0.0.1 200",
        'request: {"prompt": "slot launch_slot_: id  0 | task 5 | processing task"}',
    ],
)
def test_a_line_of_no_kind_is_none_and_holds_no_keyword_or_quotes_one(msg: str) -> None:
    assert classify(msg) is None and tokenize(msg) is None


def test_every_line_a_kind_is_read_from_holds_a_keyword() -> None:
    """What a source may skip unread: a line classify names holds one of KEYWORDS."""
    for msg in (
        "slot print_timing: id  0 | task 22 |",
        "main: cleaning up before exit...",
        "srv load: instance name=m exited with status 0",
        "x.service: Deactivated successfully.",
        "Failed to start x.service.",
    ):
        assert classify(msg) is not None
        assert any(k.decode() in msg for k in KEYWORDS), msg


def test_the_kind_numbers_are_named_in_order() -> None:
    """TOKEN_KINDS names each kind number (the compiled tokenizer is held to its first seven)."""
    assert [getattr(tokens, name) for name in TOKEN_KINDS] == list(range(len(TOKEN_KINDS)))
