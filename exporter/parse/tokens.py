"""The tokenizer: what one journal line says on its own, as a Token.

`classify` sorts a line by cheap substring tests; `tokenize` reads what the parser needs from
it: (kind, slot, task, microseconds, count). Neither keeps any state: a line's meaning in
context (which request, which server) is the parser's. `tokenize` is the reference of the
compiled `_speedups.tokenize`, which gives the same Token for the common era C and D slot lines
and None for anything else. A source may skip unread every line that holds none of KEYWORDS.
The shapes it reads: docs/design.md, "Line shapes by llama.cpp era".
"""

from __future__ import annotations

import re
from collections.abc import Callable

from exporter.base.records import (
    MILESTONE_INITIALIZING,
    MILESTONE_LOADED,
    MILESTONE_LOADING,
    SERVER_MILESTONES,
)
from exporter.base.times import SECOND
from exporter.parse.prefix import clock

# Anything longer than a week or bigger than a billion tokens is a garbled line, not a request.
MAX_DURATION_US = 7 * 86_400 * SECOND
MAX_TOKENS = 1_000_000_000
MAX_SLOTS = 1024  # an n_slots beyond this is a garbled line

# Every line `Parser.feed` can use contains one of these; a source may skip the others unread.
KEYWORDS = (
    b"total time",
    b"eval time",
    b"print_timing",
    b"launch_slot_",
    b"stop processing",
    b"slot released",
    b"slot is processing task",
    b"n_slots",
    b"cleaning up before exit",
    b"cancel task",
    b"send_error",
    b"listening on",
    b"initializing",  # (start-up lines: `llama_server: initializing ...`)
    b"loading model",
    b"model loaded",
    # systemd's own lines for the unit (`journalctl -u` shows them, from PID 1)
    b"Starting ",
    b"Started ",
    b"Stopping ",
    b"Stopped ",
    b"Deactivated successfully",
    b"Failed with result",
    b"Main process exited",
    b"Failed to start",
    # router mode: an instance's output comes `[ PORT] `-prefixed; the router names them
    b"spawning server instance",
    b"exited with status",
    # the server's sleep (`--sleep-idle-seconds`) and the router's queue (parse.extras; the
    # draft acceptance and n_gen lines are `print_timing` lines)
    b"sleeping state",
    b"queued at position",
    b"joined the queue",
    b"waiting until model",
)

_TOTAL = re.compile(r"total time\s*=\s*(\S+)\s*ms(?:\s*/\s*(\S+)\s+tokens)?")
_PROMPT = re.compile(r"prompt eval time\s*=\s*(\S+)\s*ms\s*/\s*(\S+)\s+tokens")
_EVAL = re.compile(r"eval time\s*=\s*(\S+)\s*ms\s*/\s*(\S+)\s+(?:tokens|runs)")
# `slot print_timing: id  0 | task 22576 | ...` (eras C and D), and era B's ids in its
# key=value tail (`id_slot=0 id_task=408`, early 2024 `slot_id=0 task_id=408`) or its JSON
# log format (`"id_slot":0,"id_task":408`).
_N_SLOTS = re.compile(r"\bn_slots\s*=\s*(\S+?),?(?:\s|$)")
_SLOT_TASK = re.compile(r"\bid\s+(-?\d+) \| task (-?\d+) \|")
_SLOT_TASK_B = re.compile(
    r"\b(?:id_slot|slot_id)\"?[=:]\s*(-?\d+)[ ,]\s*\"?(?:id_task|task_id)\"?[=:]\s*(-?\d+)"
)
# Eras C and D: the slot prefix opens the line (after the log prefix: an elapsed or wall-clock
# stamp and a level letter). A line quoting one elsewhere (a request body at debug verbosity)
# is no request.
_SLOT_LINE = re.compile(r"[-0-9.: A-Z]*slot +[a-z_]+: +id +(-?\d+) \| task (-?\d+) \|")
_IS_CHILD = re.compile(r"is_child = (\d+)")
_CANCEL_TASK = re.compile(r"\bcancel task, id_task = (\d+)")
_SEND_ERROR = re.compile(r"\bsend_error: task id = (\d+)")
# systemd's lines for the unit: it runs after `Started`, and not after these; after all but
# `Stopping` its process has gone (what it held in flight was aborted)
_UNIT_DOWN = ("Stopping ", "Stopped ", "Failed to start ")
_UNIT_DOWN_IN = (": Deactivated successfully", ": Failed with result ", ": Main process exited")
_UNIT_LINES = ("Started ", "Starting ", *_UNIT_DOWN)
# the words of the lines parse.extras reads: the server's sleep (its `srv` lines; the queue's
# `que start_loop: entering sleeping state` just before is not read), a timing block's draft
# acceptance line, a long generation's n_gen line, the router's queue lines
SLEEP_WORD, WAKE_WORD = "server is entering sleeping state", "server is exiting sleeping state"
DRAFT_WORD, DECODE_WORD = "draft acceptance = ", "n_gen = "
QUEUED_WORD, JOINED_WORD, WAITING_WORD = (
    " queued at position ",
    " joined the queue, ",
    "waiting until model name=",
)
UNIT_STOPPING, UNIT_UP, UNIT_GONE, UNIT_STARTING = 0, 1, 2, 3  # (a UNIT token's count)


class ParseError(ValueError):
    """A line that looks like a timing line but does not parse; `total` for a total line (it
    ends the block it belongs to)."""

    def __init__(self, why: str, *, total: bool = False) -> None:
        super().__init__(why)
        self.total = total


# What `tokenize` makes of a line: (kind, slot, task, microseconds, count), where kind is one of
# these; slot and task where the line names them; microseconds and count for the timing lines.
# The compiled tokenizer makes the first seven (TOKEN_KINDS names them, in number order).
OTHER, HEADER, PROMPT, EVAL, TOTAL, LAUNCH, RELEASE, SLOTS, EXIT = range(9)
# (cancel and error lines, the server's `listening on`, systemd's lines for the unit, a router's
# spawn or exit line, a start-up line; the lines parse.extras reads: the server going to sleep
# or waking, a draft acceptance line, an n_gen line, a router's queue line)
CANCEL, ERROR, LISTEN, UNIT, INSTANCE, PHASE = range(9, 15)
SLEEP, DRAFT, DECODE, QUEUE = range(15, 19)
TOKEN_KINDS = (
    *("OTHER", "HEADER", "PROMPT", "EVAL", "TOTAL", "LAUNCH", "RELEASE", "SLOTS", "EXIT"),
    *("CANCEL", "ERROR", "LISTEN", "UNIT", "INSTANCE", "PHASE"),
    *("SLEEP", "DRAFT", "DECODE", "QUEUE"),
)
TOKEN_FIELDS = ("kind", "slot", "task", "us", "count")  # (a Token's items, in order)
# A start-up line is a milestone: a PHASE token's count is its index in SERVER_MILESTONES (LISTEN
# and SLOTS lines are milestones too), and a PHASE, LISTEN, SLOTS or SLEEP token's microseconds
# are its line's own clock (its log prefix). A SLEEP token's count is 1 going to sleep, 0 waking.
# DRAFT and DECODE tokens name their slot and task; parse.extras reads their figures.
Token = tuple[int, int | None, int | None, int | None, int | None]
_NOTHING: Token = (OTHER, None, None, None, None)  # (a line of a kind that says nothing)


def ms_to_us(text: str) -> int:
    """`6739.60` (ms, as logged) -> 6739600 microseconds, exactly; ParseError if garbled."""
    whole, dot, frac = text.partition(".")
    if not (whole.isascii() and whole.isdigit()) or (
        dot and not (frac.isascii() and frac.isdigit())
    ):
        raise ParseError(f"not a duration: {text!r}")
    us = int(whole) * 1000 + int((frac + "000")[:3])
    if len(frac) > 3 and frac[3] >= "5":  # finer than a microsecond: round half up
        us += 1
    if us > MAX_DURATION_US:
        raise ParseError(f"absurd duration: {text} ms")
    return us


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_TOKENS:
        raise ParseError(f"not a token count: {text!r}")
    return int(text)


def tokenize(msg: str) -> Token | None:
    """What one message says, without context: None for a line the parser does not use, a
    Token, or ParseError for a timing line that does not parse. Pure; the reference for the
    compiled `_speedups.tokenize`, which gives the same Token for the common shapes of eras C
    and D and None for anything else."""
    kind = classify(msg)
    if kind is None:
        return None
    return _READERS[kind](msg)


def _total(msg: str) -> Token:
    """A total time line: it ends a timed request."""
    slot, task = _ids(msg)
    if task is not None and task < 0:  # `task -1` lines are no requests (docs/design.md)
        return _NOTHING
    m = _TOTAL.search(msg)
    if m is None:
        raise ParseError("a total time line without `= N ms`", total=True)
    try:
        us = ms_to_us(m.group(1))
        tokens = _count(m.group(2)) if m.group(2) is not None else None
    except ParseError as e:
        raise ParseError(str(e), total=True) from None
    return (TOTAL, slot, task, us, tokens)


def _component(msg: str) -> Token:
    """A prompt eval or eval time line of a timing block."""
    slot, task = _ids(msg)
    if task is not None and task < 0:
        return _NOTHING
    m = _PROMPT.search(msg)
    if m is not None:
        return (PROMPT, slot, task, ms_to_us(m.group(1)), _count(m.group(2)))
    m = _EVAL.search(msg)
    if m is None:
        raise ParseError("an eval time line without `= N ms / N tokens`")
    return (EVAL, slot, task, ms_to_us(m.group(1)), _count(m.group(2)))


def _slot(msg: str) -> Token:
    """An era C/D slot line: a timing block's header, a launch or a release."""
    m = _SLOT_TASK.search(msg)
    if m is None:
        return _NOTHING
    slot, task, rest = int(m.group(1)), int(m.group(2)), msg[m.end() :]
    if task < 0:
        return _NOTHING
    if "print_timing" in msg and not rest.strip():
        return (HEADER, slot, task, None, None)
    if "launch_slot_" in msg and "processing task" in rest:
        child = _IS_CHILD.search(rest)
        is_child = child is not None and child.group(1).strip("0") != ""
        return (LAUNCH, slot, task, None, 1 if is_child else None)
    if "release" in msg and "stop processing" in rest:
        return (RELEASE, slot, task, None, None)
    return _NOTHING


def _slot_b(msg: str) -> Token:
    """An era B start or stop (it logs no cancel line: a stop's count is 1)."""
    m = _SLOT_TASK_B.search(msg)
    if m is None or int(m.group(2)) < 0:
        return _NOTHING
    if "slot is processing task" in msg:
        return (LAUNCH, int(m.group(1)), int(m.group(2)), None, None)
    return (RELEASE, int(m.group(1)), int(m.group(2)), None, 1)


def _slots(msg: str) -> Token:
    """`load_model: initializing slots, n_slots = 3`."""
    m = _N_SLOTS.search(msg)
    if m is None:
        return _NOTHING
    text = m.group(1)
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= MAX_SLOTS:
        raise ParseError(f"not a slot count: {text!r}")
    return (SLOTS, None, None, clock(msg), int(text))


def _cancel(msg: str) -> Token:
    m = _CANCEL_TASK.search(msg)
    if m is None or len(m.group(1)) > 18:
        return _NOTHING
    return (CANCEL, None, int(m.group(1)), None, None)


def _error(msg: str) -> Token:
    m = _SEND_ERROR.search(msg)
    if m is None or len(m.group(1)) > 18:
        return _NOTHING
    return (ERROR, None, int(m.group(1)), None, None)


def _listen(msg: str) -> Token:
    return (LISTEN, None, None, clock(msg), None)


# Era B (2024) logged `HTTP server listening` before loading the model: its `model loaded`
# (`INFO [ main] model loaded | ...`, or JSON's `"msg":"model loaded"`) is when it serves
_ERA_B_READY = ("] model loaded", '"msg":"model loaded"')


def _phase(milestone: str) -> Callable[[str], Token]:
    """A reader of the start-up lines of one of the server's milestones (a PHASE token's count:
    its index in SERVER_MILESTONES)."""
    index = SERVER_MILESTONES.index(milestone)

    def read(msg: str) -> Token:
        return (PHASE, None, None, clock(msg), index)

    return read


_loaded_phase = _phase(MILESTONE_LOADED)


def _loaded(msg: str) -> Token:
    """`model loaded`: a start-up milestone, or era B's `listening on`."""
    if any(s in msg for s in _ERA_B_READY):
        return (LISTEN, None, None, clock(msg), None)  # (its HTTP server listened before)
    return _loaded_phase(msg)


def _unit(msg: str) -> Token:
    """One of systemd's lines for the unit: starting, up, stopping or gone (the count)."""
    if msg.startswith("Starting "):
        return (UNIT, None, None, None, UNIT_STARTING)
    if not _unit_down(msg):
        return (UNIT, None, None, None, UNIT_UP)
    return (UNIT, None, None, None, UNIT_STOPPING if msg.startswith("Stopping ") else UNIT_GONE)


def _exit(msg: str) -> Token:
    """`main: cleaning up before exit...`"""
    return (EXIT, None, None, None, None)


def _instance(msg: str) -> Token:
    """A router's spawn or exit line (the parser reads its names: parse.router)."""
    return (INSTANCE, None, None, None, None)


def _sleep(msg: str) -> Token:
    """`server is entering sleeping state` (count 1) or `... exiting ...` (count 0)."""
    return (SLEEP, None, None, clock(msg), 1 if SLEEP_WORD in msg else 0)


def _queue(msg: str) -> Token:
    """A router's queue line (the parser reads it: parse.extras)."""
    return (QUEUE, None, None, None, None)


def _slot_figure(kind: int) -> Callable[[str], Token]:
    """A reader of a slot line whose figures parse.extras reads (its slot and task here)."""

    def read(msg: str) -> Token:
        m = _SLOT_TASK.search(msg)
        if m is None or int(m.group(2)) < 0:
            return _NOTHING
        return (kind, int(m.group(1)), int(m.group(2)), None, None)

    return read


_READERS: dict[str, Callable[[str], Token]] = {
    "total": _total,
    "component": _component,
    "slot": _slot,
    "slot_b": _slot_b,
    "slots": _slots,
    "exit": _exit,
    "cancel": _cancel,
    "error": _error,
    "listen": _listen,
    "loaded": _loaded,
    "loading": _phase(MILESTONE_LOADING),
    "initializing": _phase(MILESTONE_INITIALIZING),
    "instance": _instance,
    "unit": _unit,
    "sleep": _sleep,
    "draft": _slot_figure(DRAFT),
    "decode": _slot_figure(DECODE),
    "queue": _queue,
}


def classify(msg: str) -> str | None:
    """Which kind of line this may be (a key of _READERS), by cheap substring tests; None for
    the rest (every line it names holds one of KEYWORDS: what a source may skip unread)."""
    if " | task " in msg:
        if _SLOT_LINE.match(msg) is None:
            return None  # (an era C/D shape quoted, not opening the line: no request)
        if "time" in msg:
            if "total time" in msg:
                return "total"
            if "eval time" in msg:
                return "component"
        if "print_timing" in msg:
            return _timing_kind(msg)
        if "launch_slot_" in msg or "stop processing" in msg:
            return "slot"
        return _other_kind(msg)
    if "time" in msg:
        if "total time" in msg:
            return "total"
        if "eval time" in msg:
            return "component"
    if "slot is processing task" in msg or "slot released" in msg:
        return "slot_b"
    return _other_kind(msg)


def _timing_kind(msg: str) -> str:
    """A `print_timing` slot line with no time in it: a draft acceptance line, an n_gen line,
    or a timing block's header (the slot reader tells)."""
    if DRAFT_WORD in msg:
        return "draft"
    if DECODE_WORD in msg:
        return "decode"
    return "slot"


# The other kinds, by a word their lines hold, in the order they are tried
_BY_WORD = (
    ("n_slots", "slots"),
    ("cleaning up before exit", "exit"),
    ("cancel task", "cancel"),
    ("send_error", "error"),
    ("listening on", "listen"),
    ("model loaded", "loaded"),
    ("loading model", "loading"),
    (": initializing", "initializing"),
    ("spawning server instance", "instance"),
    ("exited with status", "instance"),
    (SLEEP_WORD, "sleep"),
    (WAKE_WORD, "sleep"),
    (QUEUED_WORD, "queue"),
    (JOINED_WORD, "queue"),
    (WAITING_WORD, "queue"),
)


def _other_kind(msg: str) -> str | None:
    for word, kind in _BY_WORD:
        if word in msg:
            return kind
    if msg.startswith(_UNIT_LINES) or any(s in msg for s in _UNIT_DOWN_IN):
        return "unit"
    return None


def _unit_down(msg: str) -> bool:
    """Is this one of systemd's lines saying the unit stops, stopped or failed?"""
    return msg.startswith(_UNIT_DOWN) or any(s in msg for s in _UNIT_DOWN_IN)


def _ids(msg: str) -> tuple[int | None, int | None]:
    """The slot and task a timing line names: era C/D's prefix, era B's key=value tail."""
    if " | task " in msg:
        m = _SLOT_TASK.search(msg)
    elif "task" in msg:
        m = _SLOT_TASK_B.search(msg)
    else:
        return None, None
    if m is None:
        return None, None
    return int(m.group(1)), int(m.group(2))
