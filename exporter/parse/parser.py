"""The parser's state machine: one node's journal lines in, request intervals and events out.

A `Parser` follows one node (docs/design.md, "Data flow"). It keeps the small context that
multi-line timing blocks need (era C's header, era A/B's prompt and eval lines before the total
line), the releases that may still be followed by a timing block, and the PID of the running
llama-server with the context of any older one still logging (parse.context). What one line
says on its own is parse.tokens'. It never reads a clock: time passes only through the journal
times of the lines it is fed, or through `flush(until_us)` when the caller knows the journal has
nothing newer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from exporter.base.records import (
    CANCELLED,
    ERROR_REASON,
    I_MODEL,
    I_REASON,
    I_SLOT,
    I_TASK,
    I_TOKENS,
    MILESTONE_LISTENING,
    MILESTONE_SLOTS,
    MILESTONE_STARTED,
    MILESTONE_STARTING,
    MILESTONE_WAKING,
    SERVER_MILESTONES,
    UNTIMED,
    Draft,
    Event,
    EventKind,
    Interval,
    LogLine,
    Record,
)
from exporter.base.times import MAX_TIME_US, MIN_TIME_US, SECOND
from exporter.compiled.switch import WHOLE_LINES, speedups
from exporter.parse import extras
from exporter.parse.context import NO_BLOCK, Block, ServerContext
from exporter.parse.contract import FEED_TYPES
from exporter.parse.router import read_exit, read_routed, read_spawn
from exporter.parse.tokens import (
    CANCEL,
    DECODE,
    DRAFT,
    ERROR,
    EVAL,
    EXIT,
    HEADER,
    INSTANCE,
    LAUNCH,
    LISTEN,
    PHASE,
    PROMPT,
    QUEUE,
    RELEASE,
    SLEEP,
    SLOTS,
    TOTAL,
    UNIT,
    UNIT_GONE,
    UNIT_STARTING,
    UNIT_UP,
    ParseError,
    Token,
    tokenize,
)

# A stop line is a cancel when no timing block for its task follows within this much journal time.
STOP_GRACE_US = SECOND
# A node holds at most this many more requests in flight than it has slots (a launch whose end
# never came, on a slot id no server has, is then lost); `slots` is the configured count until
# the server logs its own `n_slots = N`.
DEFAULT_SLOTS = 4
SLOT_MARGIN = 2
# A PID that logged before the newest one is still running until it says it exits or has
# logged nothing for PID_GONE_US (journal time): its late lines (a journal interleaves the old
# server's last ones with the new one's first) are its own until then. One that logs again
# later than that after the newest began is a second server under the unit: it is gone only
# after `gone_us` of silence (the daemon's max_request_seconds: a request may run that long
# without a line; this default is the config's).
PID_GONE_US = 10 * SECOND
SECOND_SERVER_GONE_US = 600 * SECOND
MAX_SERVERS = 4  # older PIDs followed at once (the oldest is taken as gone beyond that)
KNOWN_PIDS = 16  # PIDs remembered as seen: one of them logging again is no restart
MAX_INSTANCES = 32  # model instances a router's parser follows at once
SPAWNED = 64  # model names a router's parser remembers as started (a second start: a restart)
MAX_TASK_REASONS = 64  # cancel and error lines remembered per server until their task ends
# A draft acceptance line follows its request's timing block: the request is looked for among
# the last RECENT_TOTALS timed requests (its block may end one batch and the draft line begin
# the next: the parser keeps them across batches).
RECENT_TOTALS = 8

_STARTED, _LOST, _ABORTED = EventKind.STARTED, EventKind.LOST, EventKind.ABORTED
_new = tuple.__new__
_fast_tokenize = None if speedups is None else speedups.tokenize
_fast_feed = None if speedups is None else speedups.feed


@dataclass(slots=True)
class Parser:
    """Turns one node's lines into `Interval`s and `Event`s; see the module docstring."""

    node: str
    pid: int = 0  # the llama-server PID seen last, 0 before the first recognised line
    block: Block = field(default_factory=lambda: NO_BLOCK)
    pending_stops: dict[tuple[int, int], int] = field(default_factory=dict)  # (slot, task) -> t
    last_timed: dict[int, int] = field(default_factory=dict)  # slot -> task of its last block
    started: dict[tuple[int, int], int] = field(default_factory=dict)  # launched, not yet ended
    # task -> the reason its release without timing will have: a cancel or error line's (the
    # cancel line may come after the release: both wait STOP_GRACE_US for each other)
    task_reasons: dict[int, str] = field(default_factory=dict)
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
    others: dict[int, ServerContext] = field(default_factory=dict)  # older PIDs that may still log
    newest_pid: int = 0  # the PID that started last (never taken as gone for its silence)
    newest_since_us: int = 0  # when its first line came
    second: bool = False  # the current PID is a second server (see ServerContext)
    last_us: int = 0  # while others log too: the journal time of the current PID's last line
    seen: dict[int, None] = field(default_factory=dict)  # the last KNOWN_PIDS PIDs, in order
    # (slot, task) -> tokens of the timed requests the last batch ended with
    recent_totals: dict[tuple[int, int], int | None] = field(default_factory=dict)
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
        # (a Lines as it is: the compiled `feed` reads its common lines from their bytes)
        todo = cast(Sequence[LogLine], lines) if type(lines) in WHOLE_LINES else tuple(lines)
        out: list[Record] = []
        self._feed_fast(todo, out)
        self._remember_totals(out)
        return out

    def _remember_totals(self, out: list[Record]) -> None:
        """Keep the last RECENT_TOTALS timed requests (a draft line may follow one): the same
        however the lines came in batches. (Once a batch: a loop from its end, nothing more.)"""
        found: list[tuple[tuple[int, int], int | None]] = []
        keys: set[tuple[int, int]] = set()
        model = self.model
        for rec in reversed(out):
            if (
                type(rec) is Interval
                and not rec[I_REASON]
                and rec[I_MODEL] == model
                and rec[I_SLOT] is not None
                and rec[I_TASK] is not None
            ):
                key = (rec[I_SLOT], rec[I_TASK])
                if key not in keys:
                    keys.add(key)
                    found.append((key, rec[I_TOKENS]))
                    if len(keys) == RECENT_TOTALS:
                        break
        if not found:
            return
        totals = self.recent_totals
        for key, tokens in reversed(found):  # (oldest first: the newest ends last)
            totals.pop(key, None)
            totals[key] = tokens
        while len(totals) > RECENT_TOTALS:
            del totals[next(iter(totals))]

    def _timed_newest_first(
        self, out: list[Record]
    ) -> Iterator[tuple[tuple[int, int], int | None]]:
        """((slot, task), tokens) of this parser's timed requests, newest first: those in
        `out`, then those remembered from before."""
        for rec in reversed(out):
            if (
                type(rec) is Interval
                and not rec[I_REASON]
                and rec[I_MODEL] == self.model
                and rec[I_SLOT] is not None
                and rec[I_TASK] is not None
            ):
                yield (rec[I_SLOT], rec[I_TASK]), rec[I_TOKENS]
        yield from reversed(self.recent_totals.items())

    def _feed_fast(self, todo: Sequence[LogLine], out: list[Record]) -> None:
        """`todo` through the compiled `feed` while it takes the lines, the others through
        `_feed`. The way back from a defect is taken only before the first line `_feed` reads
        (the compiled `feed` raises only before it changes anything, so a batch it reads whole
        costs no copy of the state): on a failure the state goes back there, and from there on
        each line is fed alone (`_feed_isolated`)."""
        fast = _fast_feed
        i, n = 0, len(todo)
        savepoint: tuple[tuple[Any, ...], int, int] | None = None  # (state, at, len(out))
        try:
            if fast is None:
                savepoint = (self._savepoint(), 0, 0)
                self._feed(todo, out, _fast_tokenize)
                return
            while i < n:
                if not self.pending_stops and not self.others and not self.children and self.up:
                    i = fast(self, todo, i, out, FEED_TYPES, self.max_in_flight)
                    if i == n:
                        break
                if savepoint is None:
                    savepoint = (self._savepoint(), i, len(out))
                self._feed((todo[i],), out, _fast_tokenize)
                i += 1
        except Exception:  # a defect, not the input's fault: find the line, skip it, go on
            at = i  # (the compiled feed failed, having changed nothing)
            if savepoint is not None:
                state, at, kept = savepoint
                self._rollback(state)
                del out[kept:]
            out += self._feed_isolated(todo[at:])

    def _feed_isolated(self, todo: Sequence[LogLine]) -> list[Record]:
        """One line at a time, each rolled back and counted as a parse error if it fails."""
        out: list[Record] = []
        for line in todo:
            savepoint, part = self._savepoint(), list[Record]()
            try:
                self._feed((line,), part, None)
            except Exception as e:
                self._rollback(savepoint)
                part = [self._error(line, f"internal error ({type(e).__name__}: {str(e)[:80]})")]
            out += part
        return out

    def _savepoint(self) -> tuple[Any, ...]:
        """The parser's state as it is, for `_rollback` (its own copy: feeding changes nothing
        of it)."""
        return (
            self.pid,
            self._current(self.last_us).copy(),
            {pid: s.copy() for pid, s in self.others.items()},
            dict(self.seen),
            self.newest_pid,
            self.newest_since_us,
            self.last_us,
            self.up,
            {port: (p, p._savepoint()) for port, p in self.instances.items()},
            dict(self.spawned),
        )

    def _rollback(self, savepoint: tuple[Any, ...]) -> None:
        """Back to the state `_savepoint` took."""
        self.pid, current, self.others, self.seen, *newest, instances, self.spawned = savepoint
        self.newest_pid, self.newest_since_us, self.last_us, self.up = newest
        self._take(current)
        self.instances = {port: p for port, (p, _) in instances.items()}
        for p, its_savepoint in instances.values():
            p._rollback(its_savepoint)

    def feed_reference(self, lines: Iterable[LogLine]) -> list[Record]:
        """`feed_all` in pure Python: the reference the compiled `feed` is held to."""
        out: list[Record] = []
        self._feed(lines, out, None)
        self._remember_totals(out)
        return out

    # The hot loop, and the Python reference of the compiled `feed`: its common branches stay
    # inline, in the order the compiled state machine takes them (a call each would cost the
    # pure path a frame per line).
    def _feed(  # noqa: C901
        self,
        lines: Iterable[LogLine],
        out: list[Record],
        fast: Callable[[str], Token | None] | None = None,
    ) -> None:
        """Each line in turn through the state machine; `fast` a tokenizer tried first."""
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
                self._unreadable(line, e, out)
                continue
            kind, slot, task, us, count = token
            if kind >= CANCEL:  # (rare: cancel and error lines, the server's state)
                self._rare(line, kind, slot, task, us, count, out)
                continue
            if line.pid != self.pid and line.pid:
                self._same_server(line, out)
            if not self.up and (kind in (LAUNCH, TOTAL)):  # (it runs after all)
                self._state(1, line, out)
            # the kinds by how often they come: two component lines a request, then the rest
            if kind in (PROMPT, EVAL):  # (a component line: the hottest branch)
                block = self.block
                if block is NO_BLOCK or not (
                    (block.task is None or task is None or block.task == task)
                    and (block.slot is None or slot is None or block.slot == slot)
                ):
                    block = self.block = Block()  # NO_BLOCK itself is never changed
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
                        (
                            self.node,
                            line.time_us,
                            _STARTED,
                            line.pid,
                            slot,
                            task,
                            "",
                            self.model,
                            None,
                        ),
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
                        self._note_reason(task, CANCELLED)
            elif kind == HEADER:
                self.block = Block(slot=slot, task=task)  # era C: the block follows
            elif kind == SLOTS:
                self._slots(line, us, cast(int, count), out)
            elif kind == EXIT:
                last = not self.others  # (another server may go on logging)
                self._exited(now, out)
                if last:
                    self._state(0, line, out)

    def _unreadable(self, line: LogLine, e: ValueError, out: list[Record]) -> None:
        """A line that looks like one the parser reads but does not parse: its parse error (a
        total line ends the block it belonged to)."""
        self._same_server(line, out)
        if getattr(e, "total", False):
            self.block = NO_BLOCK
        why = str(e) if isinstance(e, ParseError) else "a number too long to be one"
        out.append(self._error(line, why))

    def _slots(self, line: LogLine, clock: int | None, n_slots: int, out: list[Record]) -> None:
        """`n_slots = N`: the server's slot count, and a start-up milestone."""
        self.n_slots = n_slots
        out.append(Event(self.node, line.time_us, EventKind.SLOTS, line.pid, n_slots))
        out.append(self._milestone_event(line, MILESTONE_SLOTS, clock))
        if self.up != 1:
            self._state(1, line, out)

    def _rare(  # noqa: C901 (one branch a kind of line)
        self,
        line: LogLine,
        kind: int,
        slot: int | None,
        task: int | None,
        us: int | None,
        count: int | None,
        out: list[Record],
    ) -> None:
        """A cancel or error line (it notes its task's reason), a start-up milestone, a router's
        spawn or exit line, one of systemd's lines for the unit, or a line parse.extras reads."""
        if kind == UNIT:
            if line.pid in (0, 1):
                self._unit_line(line, cast(int, count), out)
            return
        if kind == INSTANCE:
            if not self.model:  # (a router's line; an instance's own are no instances')
                if line.pid != self.pid and line.pid:  # (the router's own line)
                    self._same_server(line, out)
                self._instance_line(line, out)
            return
        if kind == QUEUE:  # (a router's own line)
            self._queue(line, out)
            return
        if line.pid != self.pid and line.pid:
            self._same_server(line, out)
        if kind == SLEEP:
            self._sleep(line, bool(count), us, out)
        elif kind in (DRAFT, DECODE):
            assert slot is not None and task is not None
            try:
                self._slot_figure(line, kind, slot, task, out)
            except ParseError as e:
                self._unreadable(line, e, out)
        elif kind in (LISTEN, PHASE):
            assert count is not None or kind == LISTEN
            milestone = (
                MILESTONE_LISTENING if kind == LISTEN else SERVER_MILESTONES[cast(int, count)]
            )
            out.append(self._milestone_event(line, milestone, us))
            if self.up != 1:
                self._state(1, line, out)
        elif task is not None:
            self._note_reason(task, ERROR_REASON if kind == ERROR else CANCELLED)

    def _slot_figure(
        self, line: LogLine, kind: int, slot: int, task: int, out: list[Record]
    ) -> None:
        """A draft acceptance line (a Draft of the timed request it follows) or an n_gen line
        (a DECODE event of the request in flight)."""
        if kind == DRAFT:
            accepted, drafted = extras.draft(line.message)
            tokens = self._tokens_of(slot, task, out)
            draft = (self.node, line.time_us, line.pid, slot, task, tokens, drafted, accepted)
            out.append(Draft(*draft, self.model))
            return
        speed = extras.decode_speed(line.message)
        out.append(
            Event(
                self.node,
                line.time_us,
                EventKind.DECODE,
                line.pid,
                slot,
                task,
                model=self.model,
                value=speed,
            )
        )

    def _tokens_of(self, slot: int, task: int, out: list[Record]) -> int | None:
        """The tokens the timed request (slot, task) counted, if it is one of the last
        RECENT_TOTALS: the request a draft line follows."""
        seen: set[tuple[int, int]] = set()
        for key, tokens in self._timed_newest_first(out):
            if key == (slot, task):
                return tokens
            seen.add(key)
            if len(seen) == RECENT_TOTALS:
                break
        return None

    def _sleep(self, line: LogLine, asleep: bool, clock: int | None, out: list[Record]) -> None:
        """The server goes to sleep (it unloads its model) or wakes (a start-up of the wake
        kind begins: the reload's lines are its milestones)."""
        kind = EventKind.SLEEP if asleep else EventKind.WAKE
        out.append(Event(self.node, line.time_us, kind, line.pid, model=self.model))
        if not asleep:
            out.append(self._milestone_event(line, MILESTONE_WAKING, clock))
        if self.up != 1:
            self._state(1, line, out)

    def _queue(self, line: LogLine, out: list[Record]) -> None:
        """A router's queue line: a request queued for a model instance, or waiting for one to
        load."""
        found = extras.queue(line.message)
        if found is None or self.model:  # (an instance queues nothing)
            return
        what, model, position = found
        kind = EventKind.LOAD_WAIT if what == extras.WAITING else EventKind.QUEUED
        out.append(Event(self.node, line.time_us, kind, line.pid, model=model, value=position))

    def _unit_line(self, line: LogLine, state: int, out: list[Record]) -> None:
        """systemd's line for the unit (from PID 1: it never switches the server): starting,
        up, stopping or gone (`state`, a UNIT token's count)."""
        if state in (UNIT_STARTING, UNIT_UP):
            milestone = MILESTONE_STARTING if state == UNIT_STARTING else MILESTONE_STARTED
            out.append(self._milestone_event(line, milestone, None))
        if state == UNIT_STARTING:  # (not running yet, nor stopped: a failure says)
            self.up = -1
            return
        self._state(1 if state == UNIT_UP else 0, line, out)
        if state == UNIT_GONE:
            self._all_gone(min(line.time_us, self.horizon_us), out)

    def _instance(self, model: str) -> Parser:
        p = Parser(self.node)
        p.model, p.slots, p.gone_us, p.horizon_us = model, self.slots, self.gone_us, self.horizon_us
        return p

    def _routed(self, line: LogLine, out: list[Record]) -> bool:
        """A router's line of one of its instances (`[ PORT] ...`): that instance's parser's."""
        found = read_routed(line.message)
        if found is None or self.model:  # (an instance's own lines are never routed again)
            return False
        port, message = found
        sub = self.instances.get(port)
        if sub is None:
            if len(self.instances) >= MAX_INSTANCES:
                self._instance_gone(
                    next(iter(self.instances)), min(line.time_us, self.horizon_us), out
                )
            sub = self.instances[port] = self._instance(f":{port}")
        sub.horizon_us, sub.slots, sub.gone_us = self.horizon_us, self.slots, self.gone_us
        part: list[Record] = []
        sub._feed((line._replace(message=message),), part, _fast_tokenize)
        sub._remember_totals(part)
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
        spawn, gone = read_spawn(line.message), read_exit(line.message)
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

    def _note_reason(self, task: int, reason: str) -> None:
        """What a release of `task` without timing will be (an error stays one)."""
        reasons = self.task_reasons
        if reasons.get(task) != ERROR_REASON:
            reasons[task] = reason
            if len(reasons) > MAX_TASK_REASONS:
                del reasons[next(iter(reasons))]

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
        the one logging until then may still log (see `ServerContext`)."""
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

    def _current(self, now_us: int) -> ServerContext:
        return ServerContext(
            self.block,
            self.pending_stops,
            self.last_timed,
            self.started,
            self.n_slots,
            now_us,
            self.second,
            self.task_reasons,
            self.children,
        )

    def _take(self, server: ServerContext | None) -> None:
        """Make `server`'s context the current one (a fresh one for None)."""
        if server is None:
            self.block, self.pending_stops, self.last_timed, self.started = NO_BLOCK, {}, {}, {}
            self.n_slots, self.second, self.task_reasons, self.children = 0, False, {}, {}
        else:
            self.block, self.pending_stops = server.block, server.pending_stops
            self.last_timed, self.started = server.last_timed, server.started
            self.n_slots, self.second = server.n_slots, server.second
            self.task_reasons, self.children = server.task_reasons, server.children

    def _total(
        self, line: LogLine, slot: int | None, task: int | None, us: int | None, tokens: int | None
    ) -> Interval:
        assert us is not None
        block = self.block
        if block is not NO_BLOCK:
            self.block = NO_BLOCK
            if not block.matches(slot, task):
                block = NO_BLOCK
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
            if self.task_reasons:
                self.task_reasons.pop(task, None)
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
        # (the items in the order of Interval's fields)
        return _new(
            Interval,
            (
                self.node,
                line.time_us - us,  # start_us
                line.time_us,  # end_us
                tokens,
                prompt_tokens,
                block.generated_tokens,
                prompt_us,
                block.generation_us,
                slot,
                task,
                line.pid,
                "",  # reason: a timed request
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
        self, server: ServerContext, pid: int, key: tuple[int, int], t: int, out: list[Record]
    ) -> None:
        """A request of `server` released at `t` with no timing block: an occupancy from its
        launch to its release, with the reason its cancel or error line gave, else `untimed`
        (embeddings, rerank)."""
        launched = server.started.pop(key, None)
        reason = server.task_reasons.pop(key[1], UNTIMED) if server.task_reasons else UNTIMED
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
                    start,  # start_us
                    t,  # end_us
                    None,  # tokens, prompt and generated tokens, prompt and generation time
                    None,
                    None,
                    None,
                    None,
                    key[0],  # slot
                    key[1],  # task
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
        self.task_reasons.pop(key[1], None)
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

    def _gone(self, pid: int, server: ServerContext, now_us: int, out: list[Record]) -> None:
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

    def _milestone_event(self, line: LogLine, milestone: str, clock: int | None) -> Event:
        """A start-up milestone (a PHASE event: the line's own clock in `task`)."""
        return Event(
            self.node, line.time_us, EventKind.PHASE, line.pid, None, clock, milestone, self.model
        )

    def _error(self, line: LogLine, why: str) -> Event:
        return Event(
            self.node,
            line.time_us,
            EventKind.PARSE_ERROR,
            line.pid,
            detail=f"{why}: {str(line.message)[:200]!r}",
        )
