"""A node's `journalctl`, emulated behind asyncssh's own SSH server: the faults the tests inject.

`FakeNode` runs the commands the SSH source sends (`parse_command`: -u, -o json, --no-pager,
--all, -n N, --cursor, --after-cursor, --since @S, --until @S, --follow, --no-tail,
--output-fields=..., --grep PATTERN, --directory DIR) over a `Journal`:
- `ListJournal`, which a test grows: its items are served whatever their times, entries filtered
  as journalctl filters them (-u, --since, --until, --grep; --output-fields keeps those fields
  and the four journalctl always prints) and raw lines (garbage) sent wherever they stand in a
  follow stream, whatever the filters;
- or any journal whose entries come due by the clock (`due_us`; a `ListJournal`'s never wait).
A probe (`-n N`, no --follow) prints the newest N entries under the filters; a follow stream
prints what is there (the last 10 without --no-tail), then what comes. Entries are printed as
journalctl prints them (`render`): compact UTF-8 JSON, nothing escaped that JSON does not
require (U+2028 neither).

A node's switches (set on its loop; `FakeServer.set` does that for a test):
- `old`: systemd 219: --output-fields and --grep refused (exit 1, "unrecognized option"), its
  JSON pretty-spaced as it printed it;
- `drop_budget`: the connection is dropped that many bytes into the follow stream;
- `hold_budget`: that many bytes are sent, then nothing until `released` reaches the hold's
  number (`Stats.holds`);
- `fail_next`: the next follow stream sends what it has, then exits 1 with this on stderr.
`Stats` counts the commands, probes and streams, and per follow stream the bytes sent, the bytes
the same entries take unfiltered, and the `total time` entries sent; a command the fake cannot
run (an unknown option: a bug in the source or the fake) is refused as journalctl refuses it and
kept in `Stats.refused`.

`FakeServer` is what a test drives: one node over a ListJournal on its own event loop in a
thread, behind a `Relay` (a TCP relay that can stop passing bytes: a node that hangs, which the
client's keepalive must notice). `Keys` are the host and client key pairs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import asyncssh

from support.tools import now_us

SECOND = 1_000_000
ALWAYS = ("__CURSOR", "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_BOOT_ID")
OLD_REFUSAL = "unrecognized option '{}'"  # what systemd 219 says of --output-fields, --grep
TAIL = 10  # what --follow shows of the past without --no-tail


# -- the command ----------------------------------------------------------------------------------


class Refused(Exception):
    """What journalctl says on stderr before it exits 1."""


@dataclass
class Query:
    """A journalctl command line, parsed."""

    unit: str = ""
    n: int | None = None
    cursor: str = ""
    after_cursor: str = ""
    since_us: int | None = None
    until_us: int | None = None
    follow: bool = False
    no_tail: bool = False
    fields: tuple[str, ...] | None = None
    grep: re.Pattern[str] | None = None
    directory: str = ""
    new_option: str = ""  # the first option given that systemd 219 lacks


def grep_pattern(pattern: str) -> re.Pattern[str]:
    """journalctl's --grep: case-insensitive unless the pattern has an upper-case letter."""
    return re.compile(pattern, 0 if any(c.isupper() for c in pattern) else re.IGNORECASE)


def parse_command(command: str) -> Query:  # noqa: C901 (one option after another, as journalctl reads them)
    """The options of `journalctl ...`; Refused for anything this journalctl does not know."""
    argv = shlex.split(command)
    if not argv or argv[0] != "journalctl":
        raise Refused(f"only journalctl here, not {argv[:1]}")
    q = Query()
    args = iter(argv[1:])
    for a in args:

        def arg(option: str = a) -> str:
            value = next(args, None)
            if value is None:
                raise Refused(f"option '{option}' requires an argument")
            return value

        if a in ("--no-pager", "--all"):
            continue
        if a == "--no-tail":
            q.no_tail = True
        elif a == "-u":
            q.unit = arg()
        elif a == "-o":
            if (output := arg()) != "json":
                raise Refused(f"output {output!r} not emulated")
        elif a == "--directory":
            q.directory = arg()
        elif a == "-n":
            q.n = _number(arg())
        elif a == "--cursor":
            q.cursor = arg()
        elif a == "--after-cursor":
            q.after_cursor = arg()
        elif a in ("--since", "--until"):
            when = arg()
            if not when.startswith("@"):
                raise Refused(f"time {when!r} not emulated (only @SECONDS)")
            us = _number(when[1:]) * SECOND
            if a == "--since":
                q.since_us = us
            else:
                q.until_us = us
        elif a == "--follow":
            q.follow = True
        elif a.startswith("--output-fields="):
            q.fields = tuple(a.partition("=")[2].split(","))
            q.new_option = q.new_option or a
        elif a == "--grep":
            q.grep = grep_pattern(arg())
            q.new_option = q.new_option or a
        else:
            raise Refused(f"unrecognized option '{a}'")
    return q


def _number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise Refused(f"not a number: {text!r}") from None


# -- what is printed --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One line of a journal as served: an entry (a journald record, filtered as journalctl
    filters), or a raw line sent wherever it stands in a follow stream, whatever the filters."""

    entry: Mapping[str, Any] | None = None
    raw: bytes = b""


def render(record: Mapping[str, Any], old: bool = False) -> bytes:
    """One entry as `journalctl -o json` prints it, newline included: compact, as systemd does
    from 246 on, or pretty-spaced as systemd 219 did; UTF-8, only what JSON requires escaped."""
    if old:
        pairs = ", ".join(
            f"{json.dumps(k)} : {json.dumps(v, ensure_ascii=False)}" for k, v in record.items()
        )
        return b"{ " + pairs.encode() + b" }\n"
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def message_text(value: object) -> str:
    if isinstance(value, list):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else ""


def in_range(q: Query, item: Item) -> bool:
    """Is `item` among what a command with `q` reads: the unit's entries, from --since to
    --until (before --grep and --output-fields)? Raw lines: in a follow stream only."""
    e = item.entry
    if e is None:
        return q.follow
    if q.unit and e.get("_SYSTEMD_UNIT") != q.unit:
        return False
    t = int(e["__REALTIME_TIMESTAMP"])
    return (q.since_us is None or t >= q.since_us) and (q.until_us is None or t <= q.until_us)


def shows(q: Query, item: Item) -> bool:
    """Does a command with `q` print `item`?"""
    if not in_range(q, item):
        return False
    e = item.entry
    return e is None or q.grep is None or q.grep.search(message_text(e.get("MESSAGE"))) is not None


def line(q: Query, item: Item, old: bool = False) -> bytes:
    """What a command with `q` prints for `item` (one it shows)."""
    if item.entry is None:
        return item.raw + b"\n"
    record = item.entry
    if q.fields is not None:
        keep = {*q.fields, *ALWAYS}
        record = {k: v for k, v in record.items() if k in keep}
    return render(record, old)


def selected(q: Query, items: Iterable[Item]) -> list[Item]:
    """The items a command with `q` prints, in order."""
    return [it for it in items if shows(q, it)]


# -- the journals -------------------------------------------------------------------------------


class Journal(Protocol):
    def find(self, cursor: str) -> int:
        """The index of the entry with `cursor`, or where it would be; Refused for a cursor
        this journal cannot parse."""
        ...

    def read(self, start: int, now_us: int) -> Sequence[Item]:
        """The items from index `start` on that the journal holds at `now_us`."""
        ...

    def due_us(self, index: int) -> int | None:
        """When the item at `index` comes; None: when someone appends it."""
        ...


class ListJournal:
    """The items a test appends, in order, served whatever their times."""

    def __init__(self) -> None:
        self.items: list[Item] = []

    def find(self, cursor: str) -> int:
        for i, it in enumerate(self.items):
            if it.entry is not None and it.entry.get("__CURSOR") == cursor:
                return i
        return len(self.items)  # a cursor not found: the end (good enough here)

    def read(self, start: int, now_us: int) -> Sequence[Item]:
        return self.items[start:]

    def due_us(self, index: int) -> int | None:
        return None


# -- the node ------------------------------------------------------------------------------------


@dataclass
class Stats:
    """What a node was asked and sent."""

    commands: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # commands it could not run
    probes: int = 0  # -n N without --follow
    streams: int = 0  # --follow
    followers: int = 0  # follow streams open now
    sent: int = 0  # bytes written to follow streams
    full: int = 0  # bytes the same entries would have taken without the filters
    requests: int = 0  # `total time` entries sent to follow streams
    drops: int = 0
    holds: int = 0
    failures: int = 0

    def counts(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if isinstance(v, int)}


class FakeNode:
    """One node's journalctl over SSH: `handle` is asyncssh's process factory (`listen`)."""

    def __init__(self, journal: Journal, *, old: bool = False) -> None:
        self.journal = journal
        self.stats = Stats()
        # switches: read and changed on the node's event loop only; `poke` after a change
        self.old = old
        self.drop_budget: int | None = None
        self.hold_budget: int | None = None
        self.released = 0
        self.fail_next = ""
        self.acceptor: asyncssh.SSHAcceptor | None = None
        self._changed = asyncio.Event()

    async def listen(self, keys: Keys, authorized: asyncssh.SSHAuthorizedKeys) -> int:
        """Serve on a port of 127.0.0.1 the kernel picks; that port."""
        self.acceptor = await asyncssh.listen(
            "127.0.0.1",
            0,
            server_host_keys=[keys.host],
            authorized_client_keys=authorized,
            process_factory=self.handle,
            encoding=None,
            allow_scp=False,
        )
        port: int = self.acceptor.sockets[0].getsockname()[1]
        return port

    def poke(self) -> None:
        """The journal or a switch changed: follow streams look again."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def _changes(self, changed: asyncio.Event, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout)

    async def handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command or ""
        self.stats.commands.append(command)
        try:
            try:
                q = parse_command(command)
                if q.new_option and self.old:
                    process.stderr.write(
                        f"journalctl: {OLD_REFUSAL.format(q.new_option)}\n".encode()
                    )
                    process.exit(1)
                elif q.follow:
                    await self._follow(process, q)
                else:
                    self._print(process, q)
            except Refused as refused:
                self.stats.refused.append(command)
                process.stderr.write(f"journalctl: {refused}\n".encode())
                process.exit(1)
        except (OSError, asyncssh.Error):
            pass  # the client went away
        except Exception as e:  # a bug in the fake: make it loud
            process.stderr.write(f"fake journalctl: {e!r}\n".encode())
            process.exit(99)
            raise

    def _start(self, q: Query) -> int:
        if q.cursor:
            return self.journal.find(q.cursor)
        if q.after_cursor:
            return self.journal.find(q.after_cursor) + 1
        return 0

    def _print(self, process: asyncssh.SSHServerProcess[bytes], q: Query) -> None:
        """A command without --follow: what there is (the newest N with -n N), then exit 0."""
        items = selected(q, self.journal.read(self._start(q), now_us()))
        if q.n is not None:
            self.stats.probes += 1
            items = items[len(items) - q.n :] if q.n else []
        process.stdout.write(b"".join(line(q, it, self.old) for it in items))
        process.exit(0)

    async def _follow(self, process: asyncssh.SSHServerProcess[bytes], q: Query) -> None:
        stats = self.stats
        stats.streams += 1
        stats.followers += 1
        try:
            position = self._start(q)
            if not q.no_tail:
                there = self.journal.read(position, now_us())
                tail = [i for i, it in enumerate(there, position) if shows(q, it)][-TAIL:]
                position = tail[0] if tail else position + len(there)
            while not process.is_closing():
                changed = self._changed
                items = self.journal.read(position, now_us())
                position += len(items)
                data = self._stream(q, items)
                if data and not await self._send(process, data):
                    return
                if self.fail_next:
                    message, self.fail_next = self.fail_next, ""
                    stats.failures += 1
                    process.stderr.write(message.encode() + b"\n")
                    process.exit(1)
                    return
                due = self.journal.due_us(position)
                if due is None:
                    await self._changes(changed, 0.2)
                else:  # a journal of the clock: nothing changes it but time
                    await asyncio.sleep(max(due - now_us(), 1000) / SECOND)
        finally:
            stats.followers -= 1

    def _stream(self, q: Query, items: Sequence[Item]) -> bytes:
        """What a follow stream sends of `items`, counted."""
        stats = self.stats
        out: list[bytes] = []
        for it in items:
            if not in_range(q, it):
                continue
            full = b""
            if shows(q, it):
                sent = line(q, it, self.old)
                out.append(sent)
                stats.sent += len(sent)
                if it.entry is not None and "total time" in message_text(it.entry.get("MESSAGE")):
                    stats.requests += 1
                if q.fields is None:
                    full = sent
            if not full:
                full = render(it.entry, self.old) if it.entry is not None else it.raw + b"\n"
            stats.full += len(full)
        return b"".join(out)

    async def _send(self, process: asyncssh.SSHServerProcess[bytes], data: bytes) -> bool:
        """Write `data`, or as much of it as the drop budget allows, then drop the connection
        (False); or as much as the hold budget allows, the rest once the hold is released."""
        hold = self.hold_budget
        if hold is not None and hold <= len(data):
            self.hold_budget = None
            process.stdout.write(data[:hold])
            await process.stdout.drain()
            self.stats.holds += 1
            mine = self.stats.holds
            while self.released < mine and not process.is_closing():
                await self._changes(self._changed, 0.2)
            data = data[hold:]
        elif hold is not None:
            self.hold_budget = hold - len(data)
        budget = self.drop_budget
        if budget is not None and budget <= len(data):
            self.drop_budget = None
            process.stdout.write(data[:budget])
            await process.stdout.drain()
            self.stats.drops += 1
            process.get_extra_info("connection").abort()
            return False
        if budget is not None:
            self.drop_budget = budget - len(data)
        process.stdout.write(data)
        await process.stdout.drain()
        return True


# -- keys ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Keys:
    """The nodes' host key and the one client key they authorise (ed25519)."""

    host: asyncssh.SSHKey
    client: asyncssh.SSHKey

    @classmethod
    def generate(cls) -> Keys:
        return cls(
            asyncssh.generate_private_key("ssh-ed25519"),
            asyncssh.generate_private_key("ssh-ed25519"),
        )

    @classmethod
    def read(cls, directory: Path) -> Keys:
        """As `write` left them."""
        return cls(
            asyncssh.read_private_key(directory / "host_key"),
            asyncssh.read_private_key(directory / "client_key"),
        )

    def write(self, directory: Path) -> None:
        self.host.write_private_key(directory / "host_key")
        self.client_key_file(directory / "client_key")

    def authorized(self) -> asyncssh.SSHAuthorizedKeys:
        return asyncssh.import_authorized_keys(self.client.export_public_key("openssh").decode())

    def client_key_file(self, path: Path) -> Path:
        self.client.write_private_key(path)
        path.chmod(0o600)
        return path

    def known_hosts(self, path: Path, ports: Iterable[int]) -> Path:
        """A known_hosts file with the host key for `[127.0.0.1]:PORT` of each port."""
        key = " ".join(self.host.export_public_key("openssh").decode().split()[:2])
        path.write_text("".join(f"[127.0.0.1]:{port} {key}\n" for port in ports))
        return path


# -- a node that hangs ----------------------------------------------------------------------------


class Relay:
    """A TCP relay on 127.0.0.1 in front of a server's port that can stop passing bytes
    (`stall`: it reads nothing and writes nothing, on every connection, new ones too) and pass
    them again (`flow`, which drops the connections that hung)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def stall(self) -> None:
        self._flowing.clear()

    def flow(self) -> None:
        self._drop_all()
        self._flowing.set()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._drop_all()
        self._flowing.set()

    def _drop_all(self) -> None:
        for writer in list(self._open):
            writer.transport.abort()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            up_reader, upstream = await asyncio.open_connection("127.0.0.1", self.target_port)
            self._open.add(upstream)
            pumps = [
                asyncio.create_task(self._pump(reader, upstream)),
                asyncio.create_task(self._pump(up_reader, writer)),
            ]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        except OSError:
            pass
        finally:
            for w in (writer, upstream):
                if w is not None:
                    self._open.discard(w)
                    w.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while True:
                await self._flowing.wait()
                data = await reader.read(1 << 16)
                if not data:
                    return
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()


# -- what a test drives -----------------------------------------------------------------------------


class FakeServer:
    """A FakeNode over a ListJournal on its own event loop in a thread, behind a Relay; every
    change goes through the loop (`do`)."""

    def __init__(self) -> None:
        self.keys = Keys.generate()
        self.journal = ListJournal()
        self.node = FakeNode(self.journal)
        self.port = 0  # the relay's: where clients connect
        self._relay: Relay | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="fake-node", daemon=True)

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        loop.run_until_complete(self._start())
        self._ready.set()
        loop.run_forever()
        loop.close()

    async def _start(self) -> None:
        target = await self.node.listen(self.keys, self.keys.authorized())
        self._relay = Relay(target)
        self.port = await self._relay.start()

    def __enter__(self) -> FakeServer:
        self._thread.start()
        assert self._ready.wait(10), "the fake node did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._relay is not None and self.node.acceptor is not None
            self.node.acceptor.close()
            await self._relay.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.do(stop)
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        refused = self.node.stats.refused
        assert exc[0] is not None or not refused, f"commands the fake could not run: {refused}"

    def do(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` (a function or a coroutine function) on the node's loop; its result."""

        async def call() -> Any:
            result = fn()
            if asyncio.iscoroutine(result):
                result = await result
            return result

        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(10)

    def append(self, items: Iterable[Item]) -> None:
        def add() -> None:
            self.journal.items.extend(items)
            self.node.poke()

        self.do(add)

    def set(self, **switches: Any) -> None:
        """Change the node's switches (see the module docstring)."""

        def change() -> None:
            for k, v in switches.items():
                assert k in ("old", "drop_budget", "hold_budget", "released", "fail_next"), k
                setattr(self.node, k, v)
            self.node.poke()

        self.do(change)

    def stall(self) -> None:
        """Stop answering, on every connection, new ones too."""
        assert self._relay is not None
        self.do(self._relay.stall)

    def unstall(self) -> None:
        """Answer again; the connections that hung are dropped."""
        assert self._relay is not None
        self.do(self._relay.flow)

    def stat(self, name: str) -> Any:
        """One of the node's Stats, read on its loop."""
        return self.do(lambda: getattr(self.node.stats, name))

    @property
    def items(self) -> list[Item]:
        """The journal's items so far."""
        items: list[Item] = self.do(lambda: list(self.journal.items))
        return items

    def known_hosts(self, path: Path) -> Path:
        return self.keys.known_hosts(path, [self.port])

    def client_key_file(self, path: Path) -> Path:
        return self.keys.client_key_file(path)
