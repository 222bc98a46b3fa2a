"""The values that cross module boundaries: a journal line in, intervals and events out.

Times are integer microseconds since the epoch, UTC. Durations logged in milliseconds with
two decimals convert to microseconds exactly. LogLine, Interval and Event are made once per
journal line on the ingest path, so they are typed NamedTuples: immutable like frozen
dataclasses, at a third of the cost to build.

Hot loops and the compiled modules read and build them as tuples: each field's position has a
name here (`I_END_US` is `Interval.end_us`'s: the record's letter and the field's name), and
`exporter.compiled.switch` hands every `_fields` to the compiled modules at import, which refuse
a layout they were not built for.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple


class LogLine(NamedTuple):
    """One journal entry of a node, as a source read it."""

    node: str
    time_us: int  # journal realtime of the entry
    cursor: str  # journal cursor, or "" where the source has none (short-iso text)
    pid: int  # 0 when unknown
    message: str


# LogLine's field positions
L_NODE: Final = 0
L_TIME_US: Final = 1
L_CURSOR: Final = 2
L_PID: Final = 3
L_MESSAGE: Final = 4


# What a slot occupancy without a timing block was (Interval.reason; "" for a timed request):
# a cancel line or an old build's release, an error line, neither (embeddings, rerank), or a
# new task on its slot before its end was logged (counted only: its end is unknown).
CANCELLED, ERROR_REASON, UNTIMED, LOST_REASON = "cancelled", "error", "untimed", "lost"
REASONS = (CANCELLED, ERROR_REASON, UNTIMED, LOST_REASON)


class Interval(NamedTuple):
    """One slot occupancy: busy on `node` during [start_us, end_us]. A timed request (its
    timing block gave the end and the duration) has no `reason`; one released without timing
    spans its launch line to its release line, and `reason` says what it was (REASONS)."""

    node: str
    start_us: int
    end_us: int
    tokens: int | None = None  # total line tokens, or prompt + generated
    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    prompt_us: int | None = None  # prompt-eval time from the block
    generation_us: int | None = None  # eval time from the block
    slot: int | None = None
    task: int | None = None
    pid: int = 0
    reason: str = ""  # "" for a timed request
    model: str = ""  # the model instance that served it, in router mode

    @property
    def duration_us(self) -> int:
        return self.end_us - self.start_us


# Interval's field positions
I_NODE: Final = 0
I_START_US: Final = 1
I_END_US: Final = 2
I_TOKENS: Final = 3
I_PROMPT_TOKENS: Final = 4
I_GENERATED_TOKENS: Final = 5
I_PROMPT_US: Final = 6
I_GENERATION_US: Final = 7
I_SLOT: Final = 8
I_TASK: Final = 9
I_PID: Final = 10
I_REASON: Final = 11
I_MODEL: Final = 12


class EventKind(enum.Enum):
    STARTED = "started"  # a slot launched a task
    RESTART = "restart"  # a new llama-server PID on the node
    LOST = "lost"  # a launched task whose end never came (a new task took its slot)
    ABORTED = "aborted"  # a task in flight when its llama-server exited
    PARSE_ERROR = "parse_error"  # a line that looks like timing but does not parse
    SLOTS = "slots"  # the server said how many slots it has (in `slot`)
    SERVER_UP = "server_up"  # the node's llama-server runs (start-up lines, systemd's)
    SERVER_DOWN = "server_down"  # it stopped, exited or failed
    # a start-up line (which milestone: `detail`, one of MILESTONES; the line's own clock, its
    # log prefix in microseconds, in `task`: None without one)
    PHASE = "phase"
    SLEEP = "sleep"  # the server went to sleep (`--sleep-idle-seconds`: it unloaded its model)
    WAKE = "wake"  # it woke up (a reload follows: a start-up of the wake kind)
    # the router queued a request for a model instance (`model`; `value` its position in the
    # queue, None when it joined a request already queued for that model)
    QUEUED = "queued"
    LOAD_WAIT = "load_wait"  # a request waits until the router's instance of `model` is loaded
    # a request in flight (`slot`, `task`) decodes at `value` hundredths of a token per second
    # (its last 3 s, as the server logs it every 3 s of a long generation)
    DECODE = "decode"


# The start-up milestones a PHASE event names: systemd starting the unit, then the server's
# start-up lines in the order it logs them (`llama_server: initializing`, `load_model: loading
# model`, `initializing, n_slots = N`, `model loaded`, `listening on`).
MILESTONE_STARTING, MILESTONE_STARTED = "starting", "started"
MILESTONE_INITIALIZING, MILESTONE_LOADING, MILESTONE_SLOTS = "initializing", "loading", "slots"
MILESTONE_LOADED, MILESTONE_LISTENING = "loaded", "listening"
SERVER_MILESTONES = (
    MILESTONE_INITIALIZING,
    MILESTONE_LOADING,
    MILESTONE_SLOTS,
    MILESTONE_LOADED,
    MILESTONE_LISTENING,
)
# A sleeping server's wake-up opens a start-up of its own: `exiting sleeping state`, then the
# reload's `loading model` and `n_slots = N` (after which it serves: it logs no `listening on`).
MILESTONE_WAKING = "waking"
MILESTONES = (MILESTONE_STARTING, MILESTONE_STARTED, *SERVER_MILESTONES, MILESTONE_WAKING)


class Event(NamedTuple):
    """Something the parser saw that is not a finished request."""

    node: str
    time_us: int
    kind: EventKind
    pid: int = 0
    slot: int | None = None
    task: int | None = None
    detail: str = ""
    model: str = ""  # the model instance it happened in, in router mode
    value: int | None = None  # a figure the line gave (see the kinds that have one)


# Event's field positions
E_NODE: Final = 0
E_TIME_US: Final = 1
E_KIND: Final = 2
E_PID: Final = 3
E_SLOT: Final = 4
E_TASK: Final = 5
E_DETAIL: Final = 6
E_MODEL: Final = 7
E_VALUE: Final = 8


class Draft(NamedTuple):
    """A timed request's speculative decoding: of the `drafted` tokens the draft model
    proposed, the target model accepted `accepted` (the line after the request's timing
    block). `tokens` is what its Interval counted (its kind's), None when the block was not
    seen."""

    node: str
    time_us: int
    pid: int
    slot: int
    task: int
    tokens: int | None
    drafted: int
    accepted: int
    model: str = ""


Record = Interval | Event | Draft
# Each record's field names by its name, as exporter.compiled.switch hands them to the compiled
# modules (which refuse any other; they leave a Draft to the Python code)
RECORD_FIELDS = {"LogLine": LogLine._fields, "Interval": Interval._fields, "Event": Event._fields}


@dataclass(frozen=True, slots=True)
class Batch:
    """What a source hands over: the lines that may matter, and where it stands after them.

    A source may leave out lines that cannot carry a request (see `parse.tokens.KEYWORDS`), but
    counts them in `entries` and reports the journal time of the newest entry it read."""

    node: str
    lines: Sequence[LogLine] = ()  # a tuple, or the line layer's Lines (see sources/lines.py)
    entries: int = 0  # journal entries read in this batch, relevant or not
    newest_us: int | None = None  # journal time of the newest entry read
    position: str = ""  # where to resume after this batch ("" if unchanged)
    up: bool = True  # the journal is being followed
    caught_up: bool = False  # everything the journal held has been read
    reconnected: bool = False  # the source had to start over (counts a reconnect)
    gap: bool = False  # it could not continue from the saved position
    error: str = ""  # why it is down, for logs
    errors: tuple[str, ...] = ()  # lines that may have mattered but could not be read
