"""Pure parser: one node's journal lines in, request intervals and events out (all llama.cpp eras).

A `Parser` follows one node. It keeps the small context that multi-line timing blocks need
(era C's header, era A/B's prompt and eval lines before the total line), the stop lines that
may still be followed by a timing block, and the PID of the running llama-server. It never
reads a clock: time passes only through the journal times of the lines it is fed, or through
`flush(until_us)` when the caller knows the journal has nothing newer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from exporter.base.records import (
    CANCELLED,
    ERROR_REASON,
    MARK_LISTENING,
    MARK_STARTED,
    MARK_STARTING,
    SERVER_MARKS,
    UNTIMED,
    Event,
    EventKind,
    Interval,
    LogLine,
    Record,
)
from exporter.base.times import MAX_TIME_US, MIN_TIME_US
from exporter.compiled.switch import speedups

# A stop line is a cancel when no timing block for its task follows within this much journal time.
STOP_GRACE_US = 1_000_000
# Anything longer than a week or bigger than a billion tokens is a garbled line, not a request.
MAX_DURATION_US = 7 * 86_400 * 1_000_000
MAX_TOKENS = 1_000_000_000
# A node holds at most this many more requests in flight than it has slots (a launch whose end
# never came, on a slot id no server has, is then lost); `slots` is the configured count until
# the server logs its own `n_slots = N`.
DEFAULT_SLOTS = 4
SLOT_MARGIN = 2
MAX_SLOTS = 1024  # an n_slots beyond this is a garbled line
# A PID that logged before the newest one is still running until it says it exits or has
# logged nothing for PID_GONE_US (journal time): its late lines (a journal interleaves the old
# server's last ones with the new one's first) are its own until then. One that logs again
# later than that after the newest began is a second server under the unit: it is gone only
# after `gone_us` of silence (the daemon's max_request_seconds: a request may run that long
# without a line).
PID_GONE_US = 10_000_000
SECOND_SERVER_GONE_US = 600_000_000
MAX_SERVERS = 4  # older PIDs followed at once (the oldest is taken as gone beyond that)
KNOWN_PIDS = 16  # PIDs remembered as seen: one of them logging again is no restart

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
)
MAX_INSTANCES = 32  # model instances a router's parser follows at once
MAX_MODEL_NAME = 200  # characters of a model's name kept (it becomes a label value)
# Model names that begin with ":" are the exporter's own: `:PORT` for an instance whose spawn line
# was not read, and OTHER_MODELS for a node's models beyond the accounting's cap. A real name
# never does (see _model_name), so none clashes with them.
OTHER_MODELS = ":other"
SPAWNED = 64  # model names a router's parser remembers as started (a second start: a restart)
MARKS = 64  # cancel and error lines remembered per server until their task's release decides

_TOTAL = re.compile(r"total time\s*=\s*(\S+)\s*ms(?:\s*/\s*(\S+)\s+tokens)?")
_PROMPT = re.compile(r"prompt eval time\s*=\s*(\S+)\s*ms\s*/\s*(\S+)\s+tokens")
_EVAL = re.compile(r"eval time\s*=\s*(\S+)\s*ms\s*/\s*(\S+)\s+(?:tokens|runs)")
# `slot print_timing: id  0 | task 22576 | ...` (eras C and D), and era B's ids in its
# key=value tail (`id_slot=0 id_task=408`, early 2024 `slot_id=0 task_id=408`) or its JSON
# log format (`"id_slot":0,"id_task":408`).
_N_SLOTS = re.compile(r"\bn_slots\s*=\s*(\S+?),?(?:\s|$)")
_SLOT_TASK = re.compile(r"\bid\s+(-?\d+) \| task (-?\d+) \|")
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
UNIT_STOPPING, UNIT_UP, UNIT_GONE, UNIT_STARTING = 0, 1, 2, 3  # (a UNIT token's count)
# the log prefix of era D builds: elapsed `M.SS.mmm.uuu L ` or wall-clock `Y-M-D H:M:S.mmm L `
_ELAPSED = re.compile(r"(\d{1,9})\.(\d\d)\.(\d{3})\.(\d{3}) [A-Z] ")
_WALL = re.compile(r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{3}) [A-Z] ")
# router mode (tools/server/server-models.cpp): `LOG("[%5d] %s", port, line)` for an instance's
# line, `spawning server instance with name=%s on port %d`, `instance name=%s exited with
# status %d`
_ROUTED = re.compile(r"\[ *(\d{1,5})\] (.*)", re.DOTALL)
_SPAWN = "spawning server instance with name="
_INSTANCE_EXIT = " exited with status "
_SLOT_TASK_B = re.compile(
    r"\b(?:id_slot|slot_id)\"?[=:]\s*(-?\d+)[ ,]\s*\"?(?:id_task|task_id)\"?[=:]\s*(-?\d+)"
)


class ParseError(ValueError):
    """A line that looks like a timing line but does not parse; `total` for a total line (it
    ends the block it belongs to)."""

    def __init__(self, why: str, *, total: bool = False) -> None:
        super().__init__(why)
        self.total = total


# What `tokenize` makes of a line: (kind, slot, task, microseconds, count), where kind is one of
# these; slot and task where the line names them; microseconds and count for the timing lines.
OTHER, HEADER, PROMPT, EVAL, TOTAL, LAUNCH, RELEASE, SLOTS, EXIT = range(9)  # (PROMPT, EVAL adj.)
# (the compiled tokenizer makes none of these: cancel and error lines, the server's `listening
# on`, systemd's lines for the unit, whose count is 1 for running and 0 for stopped)
CANCEL, ERROR, LISTEN, UNIT, INSTANCE, PHASE = range(9, 15)
# the start-up lines' marks (a PHASE token's count: its index in SERVER_MARKS; LISTEN and SLOTS
# lines are marks too): a PHASE, LISTEN or SLOTS token's microseconds are its line's clock
Token = tuple[int, int | None, int | None, int | None, int | None]


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


@dataclass(slots=True)
class _Block:
    """What the lines before a total line said about the request they belong to."""

    slot: int | None = None
    task: int | None = None
    prompt_us: int | None = None
    prompt_tokens: int | None = None
    generation_us: int | None = None
    generated_tokens: int | None = None

    def matches(self, slot: int | None, task: int | None) -> bool:
        return (self.task is None or task is None or self.task == task) and (
            self.slot is None or slot is None or self.slot == slot
        )


_NO_BLOCK = _Block()  # the block before any of its lines came (shared; never changed)
_STARTED, _LOST, _ABORTED = EventKind.STARTED, EventKind.LOST, EventKind.ABORTED
_new = tuple.__new__


def _copy_block(b: _Block) -> _Block:
    if b is _NO_BLOCK:
        return b
    return _Block(b.slot, b.task, b.prompt_us, b.prompt_tokens, b.generation_us, b.generated_tokens)


@dataclass(slots=True)
class _Server:
    """The context of a llama-server PID that is not the one logging now but may still log: an
    old server's last lines interleaved with the new one's, or two servers under one unit."""

    block: _Block
    pending_stops: dict[tuple[int, int], int]
    last_timed: dict[int, int]
    started: dict[tuple[int, int], int]
    n_slots: int
    since_us: int  # journal time it last was the one logging
    second: bool = False  # it logged well after the newest began: a second server
    marks: dict[int, str] = field(default_factory=dict)
    children: dict[tuple[int, int], None] = field(default_factory=dict)

    def copy(self) -> _Server:
        return _Server(
            _copy_block(self.block),
            dict(self.pending_stops),
            dict(self.last_timed),
            dict(self.started),
            self.n_slots,
            self.since_us,
            self.second,
            dict(self.marks),
            dict(self.children),
        )


@dataclass(slots=True)
class Parser:
    """Turns one node's lines into `Interval`s and `Event`s; see the module docstring."""

    node: str
    pid: int = 0  # the llama-server PID seen last, 0 before the first recognised line
    block: _Block = field(default_factory=lambda: _NO_BLOCK)
    pending_stops: dict[tuple[int, int], int] = field(default_factory=dict)  # (slot, task) -> t
    last_timed: dict[int, int] = field(default_factory=dict)  # slot -> task of its last block
    started: dict[tuple[int, int], int] = field(default_factory=dict)  # launched, not yet ended
    # task -> the reason its release without timing will have: a cancel or error line's (the
    # cancel line may come after the release: both wait STOP_GRACE_US for each other)
    marks: dict[int, str] = field(default_factory=dict)
    children: dict[tuple[int, int], None] = field(default_factory=dict)  # n_cmpl children
    # the node's llama-server runs (1, from its start-up lines and systemd's, or a request
    # line after a stop) or not (0), -1 before the journal says
    up: int = -1
    model: str = ""  # the model instance it follows, for a router's instances (not saved)
    instances: dict[int, Parser] = field(default_factory=dict)  # router mode: by port
    # router mode: the model names this router started (the last SPAWNED), each with the status
    # its instance last exited with ("" if none yet): a second start of one is a restart
    spawned: dict[str, str] = field(default_factory=dict)
    slots: int = DEFAULT_SLOTS  # the configured slot count, until the server logs its own
    n_slots: int = 0  # the slot count the server logged (`n_slots = N`), 0 before
    others: dict[int, _Server] = field(default_factory=dict)  # older PIDs that may still log
    newest_pid: int = 0  # the PID that started last (never taken as gone for its silence)
    newest_since_us: int = 0  # when its first line came
    second: bool = False  # the current PID is a second server (see _Server)
    last_us: int = 0  # while others log too: the journal time of the current PID's last line
    seen: dict[int, None] = field(default_factory=dict)  # the last KNOWN_PIDS PIDs, in order
    gone_us: int = SECOND_SERVER_GONE_US  # (configured, not saved)
    # Journal times beyond this do not make time pass (stops decided, PIDs taken as gone): the
    # caller's now, set before each batch (a line stamped years ahead decides nothing early);
    # records keep their own times.
    horizon_us: int = MAX_TIME_US

    @property
    def max_in_flight(self) -> int:
        """How many requests in flight the server can hold (with a margin): more are lost."""
        return (self.n_slots or self.slots) + SLOT_MARGIN

    def feed(self, line: LogLine) -> list[Record]:
        """Parse one line; returns what it completes (often nothing)."""
        return self.feed_all((line,))

    def feed_all(self, lines: Iterable[LogLine]) -> list[Record]:
        """Parse lines in order; returns what they complete, in order. (One loop for a whole
        batch: this is the hot path of every source.) Nothing a line holds raises out of it: a
        line that makes the parser fail unexpectedly is that line's parse error, with the
        parser's state as it was before it.

        Where the compiled module is built, its `feed` runs this same state machine over the
        common era C/D lines of the running server and leaves every other line (and every line
        while a stop waits for its timing block) to the Python loop, `_feed`."""
        todo = cast(Sequence[LogLine], lines) if type(lines) in _SEQUENCES else tuple(lines)
        mark = self._mark()
        try:
            return self._feed_fast(todo)
        except Exception:  # a defect, not the input's fault: find the line, skip it, go on
            self._rollback(mark)
            return self._feed_isolated(todo)

    def _feed_fast(self, todo: Sequence[LogLine]) -> list[Record]:
        out: list[Record] = []
        fast = _fast_feed
        if fast is None:
            self._feed(todo, out, _fast_tokenize)
            return out
        i, n = 0, len(todo)
        while i < n:
            if not self.pending_stops and not self.others and not self.children and self.up:
                i = fast(self, todo, i, out, FEED_TYPES, self.max_in_flight)
                if i == n:
                    break
            self._feed((todo[i],), out, _fast_tokenize)
            i += 1
        return out

    def _feed_isolated(self, todo: Sequence[LogLine]) -> list[Record]:
        """One line at a time, each rolled back and counted as a parse error if it fails."""
        out: list[Record] = []
        for line in todo:
            mark, part = self._mark(), list[Record]()
            try:
                self._feed((line,), part, None)
            except Exception as e:
                self._rollback(mark)
                part = [self._error(line, f"internal error ({type(e).__name__}: {str(e)[:80]})")]
            out += part
        return out

    def _mark(self) -> tuple[Any, ...]:
        return (
            self.pid,
            self._current(self.last_us).copy(),
            {pid: s.copy() for pid, s in self.others.items()},
            dict(self.seen),
            self.newest_pid,
            self.newest_since_us,
            self.last_us,
            self.up,
            {port: (p.model, p.state()) for port, p in self.instances.items()},
            dict(self.spawned),
        )

    def _rollback(self, mark: tuple[Any, ...]) -> None:
        self.pid, current, self.others, self.seen, *newest, instances, self.spawned = mark
        self.newest_pid, self.newest_since_us, self.last_us, self.up = newest
        self._take(current)
        self.instances = {port: self._instance(model, s) for port, (model, s) in instances.items()}

    def feed_reference(self, lines: Iterable[LogLine]) -> list[Record]:
        """`feed_all` in pure Python: the reference the compiled `feed` is held to."""
        out: list[Record] = []
        self._feed(lines, out, None)
        return out

    def _feed(
        self,
        lines: Iterable[LogLine],
        out: list[Record],
        fast: Callable[[str], Token | None] | None = None,
    ) -> None:
        for line in lines:
            if not MIN_TIME_US <= line.time_us <= MAX_TIME_US:  # (sources keep to it: rare)
                out.append(self._error(line, "journal time out of range"))
                continue
            now = line.time_us if line.time_us <= self.horizon_us else self.horizon_us
            if self.pending_stops:
                self._expire(now, out)
            if self.others:
                self._retire(now, line.pid, out)
                if line.pid == self.pid:
                    self.last_us = now
                    if self.pid != self.newest_pid and now - self.newest_since_us > PID_GONE_US:
                        self.second = True
            msg = line.message
            if msg[:1] == "[" and self._routed(line, out):
                continue
            try:
                token = fast(msg) if fast is not None else None
                if token is None:
                    token = tokenize(msg)
                    if token is None:
                        continue
            except ValueError as e:  # a ParseError, or int() refusing a number of 5,000 digits
                self._same_server(line, out)
                if getattr(e, "total", False):
                    self.block = _NO_BLOCK
                why = str(e) if isinstance(e, ParseError) else "a number too long to be one"
                out.append(self._error(line, why))
                continue
            kind, slot, task, us, count = token
            if kind >= CANCEL:  # (rare: cancel and error lines, the server's state)
                self._rare(line, kind, task, us, count, out)
                continue
            if line.pid != self.pid and line.pid:
                self._same_server(line, out)
            if not self.up and (kind in (LAUNCH, TOTAL)):  # (it runs after all)
                self._state(1, line, out)
            # the kinds by how often they come: two component lines a request, then the rest
            if kind in (PROMPT, EVAL):  # (a component line: the hottest branch)
                block = self.block
                if block is _NO_BLOCK or not (
                    (block.task is None or task is None or block.task == task)
                    and (block.slot is None or slot is None or block.slot == slot)
                ):
                    block = self.block = _Block()  # _NO_BLOCK itself is never changed
                if slot is not None:
                    block.slot = slot
                    block.task = task
                if kind == PROMPT:
                    block.prompt_us = us
                    block.prompt_tokens = count
                else:
                    block.generation_us = us
                    block.generated_tokens = count
            elif kind == TOTAL:
                out.append(self._total(line, slot, task, us, count))
            elif kind == LAUNCH:
                assert slot is not None and task is not None
                if self.pending_stops:
                    self._cancel_stops_of(slot, out)
                started = self.started  # (a restart replaces it: never keep it across lines)
                if started:
                    self._launch_on(slot, task, line.time_us, out)
                started[(slot, task)] = line.time_us
                if count:  # an n_cmpl child: its block repeats the parent's prompt figures
                    children = self.children
                    children[(slot, task)] = None
                    if len(children) > self.max_in_flight:
                        del children[next(iter(children))]
                out.append(
                    _new(
                        Event,
                        (self.node, line.time_us, _STARTED, line.pid, slot, task, "", self.model),
                    )
                )
            elif kind == RELEASE:
                # A stop is a cancel only for a request whose launch was seen and whose timing
                # block has not come (a stop after its own block, or of a request launched
                # before the journal was read, is none).
                assert slot is not None and task is not None
                if (slot, task) in self.started and self.last_timed.get(slot) != task:
                    self.pending_stops[(slot, task)] = line.time_us
                    if count:  # (era B logs no cancel line: a release without timing is one)
                        self._note(task, CANCELLED)
            elif kind == HEADER:
                self.block = _Block(slot=slot, task=task)  # era C: the block follows
            elif kind == SLOTS:
                assert count is not None
                self.n_slots = count
                out.append(Event(self.node, line.time_us, EventKind.SLOTS, line.pid, count))
                out.append(self._mark_event(line, SERVER_MARKS[2], us))
                if self.up != 1:
                    self._state(1, line, out)
            elif kind == EXIT:
                last = not self.others  # (another server may go on logging)
                self._exited(now, out)
                if last:
                    self._state(0, line, out)

    def _rare(
        self,
        line: LogLine,
        kind: int,
        task: int | None,
        us: int | None,
        count: int | None,
        out: list[Record],
    ) -> None:
        """A cancel or error line (it marks its task), the server's `listening on`, or one of
        systemd's lines for the unit (from PID 1: they never switch the server)."""
        if kind == UNIT:
            if line.pid in (0, 1):
                if count in (UNIT_STARTING, UNIT_UP):
                    mark = MARK_STARTING if count == UNIT_STARTING else MARK_STARTED
                    out.append(self._mark_event(line, mark, None))
                if count == UNIT_STARTING:  # (not running yet, nor stopped: a failure says)
                    self.up = -1
                    return
                self._state(1 if count == UNIT_UP else 0, line, out)
                if count == UNIT_GONE:
                    self._all_gone(min(line.time_us, self.horizon_us), out)
            return
        if kind == INSTANCE:
            if not self.model:  # (a router's line; an instance's own are no instances')
                if line.pid != self.pid and line.pid:  # (the router's own line)
                    self._same_server(line, out)
                self._instance_line(line, out)
            return
        if line.pid != self.pid and line.pid:
            self._same_server(line, out)
        if kind in (LISTEN, PHASE):
            assert count is not None or kind == LISTEN
            mark = MARK_LISTENING if kind == LISTEN else SERVER_MARKS[cast(int, count)]
            out.append(self._mark_event(line, mark, us))
            if self.up != 1:
                self._state(1, line, out)
        elif task is not None:
            self._note(task, ERROR_REASON if kind == ERROR else CANCELLED)

    def _instance(self, model: str, state: dict[str, Any] | None = None) -> Parser:
        p = Parser(self.node) if state is None else Parser.from_state(self.node, state)
        p.model, p.slots, p.gone_us, p.horizon_us = model, self.slots, self.gone_us, self.horizon_us
        return p

    def _routed(self, line: LogLine, out: list[Record]) -> bool:
        """A router's line of one of its instances (`[ PORT] ...`): that instance's parser's."""
        m = _ROUTED.match(line.message)
        if m is None or self.model:  # (an instance's own lines are never routed again)
            return False
        port = int(m.group(1))
        sub = self.instances.get(port)
        if sub is None:
            if len(self.instances) >= MAX_INSTANCES:
                self._instance_gone(
                    next(iter(self.instances)), min(line.time_us, self.horizon_us), out
                )
            sub = self.instances[port] = self._instance(f":{port}")
        sub.horizon_us, sub.slots, sub.gone_us = self.horizon_us, self.slots, self.gone_us
        part: list[Record] = []
        sub._feed((line._replace(message=m.group(2)),), part, _fast_tokenize)
        for rec in part:
            if type(rec) is Event:
                if rec.kind is EventKind.SERVER_UP or rec.kind is EventKind.SERVER_DOWN:
                    continue  # (the router's own state is the node's)
                if rec.kind is EventKind.SLOTS:  # the node's slots: all its instances'
                    rec = rec._replace(slot=sum(p.n_slots for p in self.instances.values()))
            out.append(rec)
        return True

    def _instance_line(self, line: LogLine, out: list[Record]) -> None:
        """The router spawned an instance (its port's lines are that model's from here on; a
        model's second start is a restart of that instance only) or one exited (what it held
        is aborted)."""
        spawn, gone = _spawned(line.message), _exited_instance(line.message)
        now = min(line.time_us, self.horizon_us)
        if spawn is not None:
            name, port = spawn
            for p in [p for p, sub in self.instances.items() if p == port or sub.model == name]:
                self._instance_gone(p, now, out)
            while len(self.instances) >= MAX_INSTANCES:
                self._instance_gone(next(iter(self.instances)), now, out)
            self.instances[port] = self._instance(name)
            status = self.spawned.get(name)
            if status is not None:
                out.append(
                    Event(
                        self.node,
                        line.time_us,
                        EventKind.RESTART,
                        line.pid,
                        detail=f"model instance {name} started again"
                        + (f" (it exited with status {status})" if status else ""),
                        model=name,
                    )
                )
            self._spawned_as(name, "")
        elif gone is not None:
            name, status = gone
            for p in [p for p, sub in self.instances.items() if sub.model == name]:
                self._instance_gone(p, now, out)
            self._spawned_as(name, status)
        else:
            return
        # the node's slots: its instances' that run
        slots = sum(p.n_slots for p in self.instances.values())
        out.append(Event(self.node, line.time_us, EventKind.SLOTS, line.pid, slots))

    def _spawned_as(self, name: str, status: str) -> None:
        """Remember that the router started model `name` (its last exit status, if any)."""
        self.spawned.pop(name, None)
        self.spawned[name] = status
        if len(self.spawned) > SPAWNED:
            del self.spawned[next(iter(self.spawned))]

    def _instance_gone(self, port: int, now: int, out: list[Record]) -> None:
        sub = self.instances.pop(port)
        sub._gone(sub.pid, sub._current(now), now, out)
        for pid, server in sub.others.items():
            sub._gone(pid, server, now, out)

    def _note(self, task: int, reason: str) -> None:
        """What a release of `task` without timing will be (an error stays one)."""
        marks = self.marks
        if marks.get(task) != ERROR_REASON:
            marks[task] = reason
            if len(marks) > MARKS:
                del marks[next(iter(marks))]

    def _state(self, up: int, line: LogLine, out: list[Record]) -> None:
        if self.up != up:
            self.up = up
            kind = EventKind.SERVER_UP if up else EventKind.SERVER_DOWN
            out.append(Event(self.node, line.time_us, kind, line.pid))

    def flush(self, until_us: int) -> list[Record]:
        """The journal holds nothing older than `until_us` unread: decide stops that have waited."""
        out: list[Record] = []
        if self.pending_stops:
            self._expire(until_us, out)
        if self.others:
            self._retire(until_us, 0, out)
        for sub in self.instances.values():
            out += sub.flush(until_us)
        return out

    # -- what each kind of line does --------------------------------------------------------------

    def _same_server(self, line: LogLine, out: list[Record]) -> None:
        """A line of PID `line.pid`: switch to its context. A PID not seen before is a restart;
        the one logging until then may still log (see `_Server`)."""
        pid = line.pid
        if not pid or pid == self.pid:
            return
        now = min(line.time_us, self.horizon_us)
        before, known = self.pid, pid in self.others
        if before:
            self._switch_to(pid, now)
        else:  # what came before with no PID was this server's
            self.pid, self.last_us = pid, now
        if known and now - self.newest_since_us > PID_GONE_US:  # (as in _feed)
            self.second = True
        if not known and pid not in self.seen:  # a server not seen before
            self.spawned.clear()  # (a new router's first start of a model is no restart)
            if before:
                out.append(
                    Event(
                        self.node,
                        line.time_us,
                        EventKind.RESTART,
                        pid,
                        detail=f"llama-server PID {before} -> {pid}",
                    )
                )
            self.newest_pid, self.newest_since_us = pid, now
        self.seen.pop(pid, None)
        self.seen[pid] = None
        if len(self.seen) > KNOWN_PIDS:
            del self.seen[next(iter(self.seen))]
        while len(self.others) > MAX_SERVERS:
            oldest = next(iter(self.others))
            self._gone(oldest, self.others.pop(oldest), now, out)

    def _switch_to(self, pid: int, now_us: int) -> None:
        """Keep the current PID's context among the others (as of `now_us`) and take up `pid`'s
        (a fresh one for a PID not among them, 0 included)."""
        if self.pid:
            self.others[self.pid] = self._current(now_us)
        self._take(self.others.pop(pid, None))
        self.pid, self.last_us = pid, now_us

    def _current(self, now_us: int) -> _Server:
        return _Server(
            self.block,
            self.pending_stops,
            self.last_timed,
            self.started,
            self.n_slots,
            now_us,
            self.second,
            self.marks,
            self.children,
        )

    def _take(self, server: _Server | None) -> None:
        """Make `server`'s context the current one (a fresh one for None)."""
        if server is None:
            self.block, self.pending_stops, self.last_timed, self.started = _NO_BLOCK, {}, {}, {}
            self.n_slots, self.second, self.marks, self.children = 0, False, {}, {}
        else:
            self.block, self.pending_stops = server.block, server.pending_stops
            self.last_timed, self.started = server.last_timed, server.started
            self.n_slots, self.second = server.n_slots, server.second
            self.marks, self.children = server.marks, server.children

    def _total(
        self, line: LogLine, slot: int | None, task: int | None, us: int | None, tokens: int | None
    ) -> Interval:
        assert us is not None
        block = self.block
        if block is not _NO_BLOCK:
            self.block = _NO_BLOCK
            if not block.matches(slot, task):
                block = _NO_BLOCK
            if slot is None:
                slot = block.slot
            if task is None:
                task = block.task
            if (
                tokens is None
                and block.prompt_tokens is not None
                and block.generated_tokens is not None
            ):
                tokens = block.prompt_tokens + block.generated_tokens
        prompt_tokens, prompt_us = block.prompt_tokens, block.prompt_us
        if slot is not None and task is not None:
            if self.pending_stops:
                self.pending_stops.pop((slot, task), None)
            if self.marks:
                self.marks.pop(task, None)
            if self.children and self.children.pop((slot, task), 0) is None:
                # an n_cmpl child: its own completion and generated tokens, not the prompt
                # it shares with its parent (which the parent counts)
                prompt_tokens = prompt_us = None
                if block.generated_tokens is not None:
                    tokens = block.generated_tokens
            self.started.pop((slot, task), None)
            last_timed = self.last_timed
            last_timed[slot] = task
            if len(last_timed) > self.max_in_flight:  # (slot ids no server has)
                del last_timed[next(s for s in last_timed if s != slot)]
        # tuple.__new__ is what the NamedTuple's own __new__ calls, without its Python frame
        return _new(
            Interval,
            (
                self.node,
                line.time_us - us,  # start
                line.time_us,  # end
                tokens,
                prompt_tokens,
                block.generated_tokens,
                prompt_us,
                block.generation_us,
                slot,
                task,
                line.pid,
                "",
                self.model,
            ),
        )

    # -- starts, stops, restarts ----------------------------------------------------------------

    def _cancel_stops_of(self, slot: int, out: list[Record]) -> None:
        """A new launch on `slot`: its released requests that got no timing block are decided."""
        for key in [k for k in self.pending_stops if k[0] == slot]:
            self._untimed(self._current(0), self.pid, key, self.pending_stops.pop(key), out)

    def _expire(self, now_us: int, out: list[Record]) -> None:
        for key, t in list(self.pending_stops.items()):
            if now_us > t + STOP_GRACE_US:
                del self.pending_stops[key]
                self._untimed(self._current(0), self.pid, key, t, out)

    def _untimed(
        self, server: _Server, pid: int, key: tuple[int, int], t: int, out: list[Record]
    ) -> None:
        """A request of `server` released at `t` with no timing block: an occupancy from its
        launch to its release, with the reason its cancel or error line gave, else `untimed`
        (embeddings, rerank)."""
        launched = server.started.pop(key, None)
        reason = server.marks.pop(key[1], UNTIMED) if server.marks else UNTIMED
        if server.children:
            server.children.pop(key, None)
        if launched is None:  # (never: a release waits only for what launched)
            return
        start = launched if launched <= t else t
        out.append(
            _new(
                Interval,
                (
                    self.node,
                    start,
                    t,
                    None,
                    None,
                    None,
                    None,
                    None,
                    key[0],
                    key[1],
                    pid,
                    reason,
                    self.model,
                ),
            )
        )

    def _launch_on(self, slot: int, task: int, time_us: int, out: list[Record]) -> None:
        """Before a launch of (slot, task): a request still on that slot was lost (its end
        never came), and so is the oldest when the node would hold more than it can."""
        started = self.started
        for key in [k for k in started if k[0] == slot and k[1] != task]:
            out.append(self._lost(key, started.pop(key), time_us, "a new task on its slot"))
        if len(started) >= self.max_in_flight and (slot, task) not in started:
            key = next(iter(started))
            why = f"more requests in flight than the server's {self.n_slots or self.slots} slots"
            out.append(self._lost(key, started.pop(key), time_us, why))

    def _lost(self, key: tuple[int, int], since_us: int, time_us: int, why: str) -> Event:
        self.pending_stops.pop(key, None)
        self.children.pop(key, None)
        self.marks.pop(key[1], None)
        return Event(
            self.node,
            time_us,
            _LOST,
            self.pid,
            key[0],
            key[1],
            f"{why} (launched {since_us})",
            self.model,
        )

    def _retire(self, now_us: int, logging: int, out: list[Record]) -> None:
        """Decide the older PIDs' waiting stops at journal time `now_us`, and take those that
        have logged nothing for PID_GONE_US as gone (`logging`: the PID logging now). An older
        PID's line was its own; after it the newest PID is the one logging again."""
        if self.pid != self.newest_pid and self.newest_pid in self.others and logging != self.pid:
            self._switch_to(self.newest_pid, self.last_us)
        for pid, server in list(self.others.items()):
            for key, t in list(server.pending_stops.items()):
                if now_us > t + STOP_GRACE_US:
                    del server.pending_stops[key]
                    self._untimed(server, pid, key, t, out)
            gone_us = self.gone_us if server.second else PID_GONE_US
            if pid not in (logging, self.newest_pid) and now_us - server.since_us > gone_us:
                del self.others[pid]
                self._gone(pid, server, now_us, out)

    def _exited(self, now_us: int, out: list[Record]) -> None:
        """The server logging says it exits: what it held will not end. The one that logged
        before it, if any, is the one logging again."""
        self._gone(self.pid, self._current(now_us), now_us, out)
        if self.others:
            pid, server = self.others.popitem()
            self._take(server)
            self.pid = self.newest_pid = pid
            self.newest_since_us = now_us
        else:
            self._take(None)
        self.last_us = now_us

    def _all_gone(self, now_us: int, out: list[Record]) -> None:
        """systemd says the unit's process has gone (killed, exited, failed): every server's
        requests in flight end here, aborted. (A new PID later is a restart.)"""
        self._gone(self.pid, self._current(now_us), now_us, out)
        for pid, server in self.others.items():
            self._gone(pid, server, now_us, out)
        self.others.clear()
        self._take(None)
        for port in list(self.instances):
            self._instance_gone(port, now_us, out)
        self.spawned.clear()

    def _gone(self, pid: int, server: _Server, now_us: int, out: list[Record]) -> None:
        """PID `pid` has exited: its waiting releases are decided, its other requests aborted."""
        for key, t in server.pending_stops.items():
            self._untimed(server, pid, key, t, out)
        for slot, task in server.started:
            out.append(
                Event(
                    self.node,
                    now_us,
                    _ABORTED,
                    pid,
                    slot,
                    task,
                    f"llama-server {pid} exited",
                    self.model,
                )
            )

    def _mark_event(self, line: LogLine, mark: str, clock: int | None) -> Event:
        return Event(
            self.node, line.time_us, EventKind.PHASE, line.pid, None, clock, mark, self.model
        )

    def _error(self, line: LogLine, why: str) -> Event:
        return Event(
            self.node,
            line.time_us,
            EventKind.PARSE_ERROR,
            line.pid,
            detail=f"{why}: {str(line.message)[:200]!r}",
        )

    # -- checkpoint -------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything needed to resume mid-block, as JSON-ready values."""
        return {
            "pid": self.pid,
            **_context_state(self._current(0)),
            "n_slots": self.n_slots,
            "up": self.up,
            "newest_pid": self.newest_pid,
            "newest_since_us": self.newest_since_us,
            "second": self.second,
            "last_us": self.last_us,
            "others": [
                [
                    pid,
                    s.since_us,
                    _context_state(s),
                    s.n_slots,
                    s.second,
                ]
                for pid, s in self.others.items()
            ],
            "seen": list(self.seen),
            "instances": [[port, p.model, p.state()] for port, p in self.instances.items()],
            "spawned": [[name, status] for name, status in self.spawned.items()],
        }

    @classmethod
    def from_state(cls, node: str, state: dict[str, Any]) -> Parser:
        """The parser `state()` saved (the configured `slots` and `gone_us` are the caller's
        to set). Raises KeyError, TypeError or ValueError on a state that does not fit."""
        p = cls(node, pid=_int(state["pid"]))
        server = _context_from(state, 0, 0, False)
        p._take(server)
        p.up = _int(state.get("up", -1))
        if p.up not in (-1, 0, 1):
            raise ValueError(f"a server state of {p.up}")
        p.n_slots = _int(state.get("n_slots", 0))
        p.newest_pid = _int(state.get("newest_pid", p.pid))
        p.last_us = _int(state.get("last_us", 0))
        p.newest_since_us = _int(state.get("newest_since_us", 0))
        p.second = bool(state.get("second", False))
        for pid, since_us, context, n_slots, second in state.get("others", []):
            p.others[_int(pid)] = _context_from(
                context, _int(n_slots), _int(since_us), bool(second)
            )
        p.seen = dict.fromkeys(_int(pid) for pid in state.get("seen", [p.pid] if p.pid else []))
        for port, model, sub in state.get("instances", [])[:MAX_INSTANCES]:
            p.instances[_int(port)] = p._instance(str(model), sub)
        # (a checkpoint from before: the instances that run were started)
        spawned = state.get("spawned", [[sub.model, ""] for sub in p.instances.values()])
        for name, status in spawned[-SPAWNED:]:
            p.spawned[str(name)] = str(status)
        return p


def _context_state(s: _Server) -> dict[str, Any]:
    b = s.block
    return {
        "block": [
            b.slot,
            b.task,
            b.prompt_us,
            b.prompt_tokens,
            b.generation_us,
            b.generated_tokens,
        ],
        "pending_stops": [[slot, t, at] for (slot, t), at in s.pending_stops.items()],
        "last_timed": [[slot, t] for slot, t in s.last_timed.items()],
        "started": [[slot, t, at] for (slot, t), at in s.started.items()],
        "marks": [[t, reason] for t, reason in s.marks.items()],
        "children": [[slot, t] for slot, t in s.children],
    }


def _context_from(state: dict[str, Any], n_slots: int, since_us: int, second: bool) -> _Server:
    fields = [None if v is None else _int(v) for v in state["block"]]
    if len(fields) != 6:
        raise ValueError(f"a parser block of {len(fields)} fields")
    block = _Block(*fields) if any(v is not None for v in fields) else _NO_BLOCK
    marks = {_int(t): str(reason) for t, reason in state.get("marks", [])}
    if not set(marks.values()) <= {CANCELLED, ERROR_REASON}:
        raise ValueError("a parser mark that is no reason")
    return _Server(
        block,
        {(_int(s), _int(t)): _int(at) for s, t, at in state["pending_stops"]},
        {_int(s): _int(t) for s, t in state["last_timed"]},
        {(_int(s), _int(t)): _int(at) for s, t, at in state.get("started", [])},
        n_slots,
        since_us,
        second,
        marks,
        {(_int(s), _int(t)): None for s, t in state.get("children", [])},
    )


def _int(value: Any) -> int:
    """An int the checkpoint saved (a line may give any); ValueError when it is no int."""
    if type(value) is not int:
        raise ValueError(f"{str(value)[:40]} is not a saved parser value")
    return value


def tokenize(msg: str) -> Token | None:
    """What one message says, without context: None for a line the parser does not use, a
    Token, or ParseError for a timing line that does not parse. Pure; the reference for the
    compiled `_speedups.tokenize`, which gives the same Token for the common shapes of eras C
    and D and None for anything else."""
    kind = classify(msg)
    if kind is None:
        return None
    if kind in ("total", "component"):
        slot, task = _ids(msg)
        if task is not None and task < 0:  # `task -1` lines are not requests (docs/design.md)
            return (OTHER, None, None, None, None)
    if kind == "total":
        m = _TOTAL.search(msg)
        if m is None:
            raise ParseError("a total time line without `= N ms`", total=True)
        try:
            us = ms_to_us(m.group(1))
            tokens = _count(m.group(2)) if m.group(2) is not None else None
        except ParseError as e:
            raise ParseError(str(e), total=True) from None
        return (TOTAL, slot, task, us, tokens)
    if kind == "exit":  # `main: cleaning up before exit...`
        return (EXIT, None, None, None, None)
    if kind in {"cancel", "error"}:
        m = (_CANCEL_TASK if kind == "cancel" else _SEND_ERROR).search(msg)
        if m is None or len(m.group(1)) > 18:
            return (OTHER, None, None, None, None)
        return (CANCEL if kind == "cancel" else ERROR, None, int(m.group(1)), None, None)
    if kind == "listen":
        return (LISTEN, None, None, clock(msg), None)
    if kind in _PHASE_KINDS:
        if kind == "loaded" and any(s in msg for s in _ERA_B_READY):
            return (LISTEN, None, None, clock(msg), None)  # (its HTTP server listened before)
        return (PHASE, None, None, clock(msg), _PHASE_KINDS[kind])
    if kind == "unit":
        if msg.startswith("Starting "):
            return (UNIT, None, None, None, UNIT_STARTING)
        if not _unit_down(msg):
            return (UNIT, None, None, None, UNIT_UP)
        return (UNIT, None, None, None, UNIT_STOPPING if msg.startswith("Stopping ") else UNIT_GONE)
    if kind == "instance":
        return (INSTANCE, None, None, None, None)
    if kind == "slots":  # `load_model: initializing slots, n_slots = 3`
        m = _N_SLOTS.search(msg)
        if m is None:
            return (OTHER, None, None, None, None)
        text = m.group(1)
        if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= MAX_SLOTS:
            raise ParseError(f"not a slot count: {text!r}")
        return (SLOTS, None, None, clock(msg), int(text))
    if kind == "component":
        m = _PROMPT.search(msg)
        if m is not None:
            return (PROMPT, slot, task, ms_to_us(m.group(1)), _count(m.group(2)))
        m = _EVAL.search(msg)
        if m is None:
            raise ParseError("an eval time line without `= N ms / N tokens`")
        return (EVAL, slot, task, ms_to_us(m.group(1)), _count(m.group(2)))
    if kind == "slot":
        m = _SLOT_TASK.search(msg)
        if m is None:
            return (OTHER, None, None, None, None)
        slot, task, rest = int(m.group(1)), int(m.group(2)), msg[m.end() :]
        if task < 0:
            return (OTHER, None, None, None, None)
        if "print_timing" in msg and not rest.strip():
            return (HEADER, slot, task, None, None)
        if "launch_slot_" in msg and "processing task" in rest:
            child = _IS_CHILD.search(rest)
            is_child = child is not None and child.group(1).strip("0") != ""
            return (LAUNCH, slot, task, None, 1 if is_child else None)
        if "release" in msg and "stop processing" in rest:
            return (RELEASE, slot, task, None, None)
        return (OTHER, None, None, None, None)
    m = _SLOT_TASK_B.search(msg)  # era B start or stop (it logs no cancel line: count 1)
    if m is None or int(m.group(2)) < 0:
        return (OTHER, None, None, None, None)
    if "slot is processing task" in msg:
        return (LAUNCH, int(m.group(1)), int(m.group(2)), None, None)
    return (RELEASE, int(m.group(1)), int(m.group(2)), None, 1)


_fast_tokenize = None if speedups is None else speedups.tokenize
_fast_feed = None if speedups is None else speedups.feed
# What feed_all takes as it is: a tuple, or the line layer's Lines (compiled `feed` reads its
# common lines from their bytes, never making their LogLines).
_SEQUENCES: tuple[type, ...] = (tuple,) if speedups is None else (tuple, speedups.Lines)
# what the compiled feed makes records of (it builds the NamedTuples as their __new__ would)
FEED_TYPES = (Interval, _STARTED, "", Event, _Block, _NO_BLOCK)


def classify(msg: str) -> str | None:
    """Which kind of line this may be, by cheap substring tests; None for the rest (every line
    it names holds one of KEYWORDS: what a source may skip unread)."""
    if " | task " in msg and _SLOT_LINE.match(msg) is None:
        return None  # (an era C/D shape quoted, not opening the line: no request)
    if "time" in msg:
        if "total time" in msg:
            return "total"
        if "eval time" in msg:
            return "component"
    if " | task " in msg:
        if "print_timing" in msg or "launch_slot_" in msg or "stop processing" in msg:
            return "slot"
    elif "slot is processing task" in msg or "slot released" in msg:
        return "slot_b"
    if "n_slots" in msg:
        return "slots"
    if "cleaning up before exit" in msg:
        return "exit"
    if "cancel task" in msg:
        return "cancel"
    if "send_error" in msg:
        return "error"
    if "listening on" in msg:
        return "listen"
    if "model loaded" in msg:
        return "loaded"
    if "loading model" in msg:
        return "loading"
    if ": initializing" in msg:
        return "initializing"
    if "spawning server instance" in msg or "exited with status" in msg:
        return "instance"
    if msg.startswith(_UNIT_LINES) or any(s in msg for s in _UNIT_DOWN_IN):
        return "unit"
    return None


_UNIT_LINES = ("Started ", "Starting ", *_UNIT_DOWN)
# Era B (2024) logged `HTTP server listening` before loading the model: its `model loaded`
# (`INFO [ main] model loaded | ...`, or JSON's `"msg":"model loaded"`) is when it serves
_ERA_B_READY = ("] model loaded", '"msg":"model loaded"')
_PHASE_KINDS = {"initializing": 0, "loading": 1, "loaded": 3}  # (their index in SERVER_MARKS)
MAX_CLOCK_US = 2**53  # (a prefix beyond it is garbled: no clock)


def clock(msg: str) -> int | None:
    """The line's own time from its log prefix, in microseconds: since the server's log began
    (elapsed), or of the wall clock's local time taken as UTC (only differences count); None
    without a prefix."""
    m = _ELAPSED.match(msg)
    if m is not None:
        minutes, secs, ms, us = (int(g) for g in m.groups())
        value = ((minutes * 60 + secs) * 1000 + ms) * 1000 + us
        return value if value < MAX_CLOCK_US else None
    m = _WALL.match(msg)
    if m is None:
        return None
    y, mo, d, h, mi, sec, ms = (int(g) for g in m.groups())
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and sec < 61):
        return None
    days = _days(y, mo, d)
    return (((days * 24 + h) * 60 + mi) * 60 + sec) * 1_000_000 + ms * 1000


def _days(y: int, m: int, d: int) -> int:
    """Days from 1970-01-01 to the date (proleptic Gregorian; a day past a month's end runs on
    into the next, as only differences count)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _model_name(text: str) -> str:
    """A model's name as the router logged it, fit to be a label value (bounded, UTF-8). One
    that begins with ":" after any "_" takes one more "_" in front: names beginning with ":" are
    the exporter's own (and two names stay two)."""
    name = text[:MAX_MODEL_NAME].encode("utf-8", "replace").decode("utf-8")
    return "_" + name if name.lstrip("_").startswith(":") else name


def _spawned(msg: str) -> tuple[str, int] | None:
    """`... spawning server instance with name=NAME on port PORT` -> (NAME, PORT). (In time
    linear in the line: a request path may quote these words any number of times.)"""
    at = msg.find(_SPAWN)
    if at < 0:
        return None
    name, sep, port = msg[at + len(_SPAWN) :].rpartition(" on port ")
    if not sep or not (port.isascii() and port.isdigit()) or len(port) > 5:
        return None
    return _model_name(name), int(port)


def _exited_instance(msg: str) -> tuple[str, str] | None:
    """`... instance name=NAME exited with status N` -> (NAME, N), in linear time."""
    head, sep, status = msg.rpartition(_INSTANCE_EXIT)
    at = head.find("instance name=")
    digits = status[1:] if status[:1] == "-" else status
    if not sep or at < 0 or not (digits.isascii() and digits.isdigit()) or len(digits) > 10:
        return None
    return _model_name(head[at + len("instance name=") :]), status


def _unit_down(msg: str) -> bool:
    return msg.startswith(_UNIT_DOWN) or any(s in msg for s in _UNIT_DOWN_IN)


def _ids(msg: str) -> tuple[int | None, int | None]:
    if " | task " in msg:
        m = _SLOT_TASK.search(msg)
    elif "task" in msg:
        m = _SLOT_TASK_B.search(msg)
    else:
        return None, None
    if m is None:
        return None, None
    return int(m.group(1)), int(m.group(2))
