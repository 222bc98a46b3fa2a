"""The SSH source under faults, against asyncssh's own server emulating a node's journalctl.

The server (`FakeNode`, on its own event loop in a thread) serves an in-memory journal the test
grows, and can: drop the connection K bytes into a stream, stop answering (the client's keepalive
must notice), make journalctl exit non-zero with a message on stderr, send garbage and truncated
JSON lines, and refuse `--output-fields`/`--grep` like an old systemd. A daemon runs in-process
(or, for SIGKILL, as a subprocess); a scraper thread records every scrape and fails the test if
any counter or the watermark ever went down. After each fault the served figures must equal a
from-scratch report over the entries served, up to the served watermark.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import asyncssh
import pytest
from ssh_helpers import KINDS, MINUTE, REPO, local_config, local_node, now_us, requests, until_right
from test_daemon import DaemonThread
from test_journal_source import UNIT, compare, iso

import exporter.daemon
from exporter import report
from exporter.accounting import SECOND
from exporter.config import SshNode
from exporter.daemon import Daemon
from exporter.demo import node_lines
from exporter.logline import Batch, LogLine
from exporter.parse import KEYWORDS
from exporter.sources import SourceError
from exporter.sources.dump import DumpLineError, LineDecoder
from exporter.sources.ssh import FIELDS, GREP, SshSource, _plain

from conftest import Samples, free_port, http_get, parse_metrics, sample, wait_for

pytestmark = pytest.mark.slow

T = TypeVar("T")
REJECTED = "journalctl: unrecognized option '{}'"  # what systemd 219 says

# -- the fake node -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One line of the journal as served: an entry (filtered like journalctl does), or a raw
    garbage line sent wherever it stands, whatever the filters."""

    entry: dict[str, Any] | None = None
    raw: bytes = b""


def entry(i: int, time_us: int, pid: int, message: str, unit: str = UNIT) -> Item:
    return Item(
        {
            "__CURSOR": f"s=fake;i={i:x};b=boot;m={i:x};t={time_us:x};x={i:x}",
            "__REALTIME_TIMESTAMP": str(time_us),
            "__MONOTONIC_TIMESTAMP": str(i),
            "_BOOT_ID": "boot",
            "_SYSTEMD_UNIT": unit,
            "SYSLOG_IDENTIFIER": "llama-server",
            "_PID": str(pid),
            "MESSAGE": message,
        }
    )


@dataclass
class Options:
    unit: str = ""
    n: int | None = None
    cursor: str = ""
    after_cursor: str = ""
    since_us: int | None = None
    until_us: int | None = None
    follow: bool = False
    no_tail: bool = False
    fields: list[str] | None = None
    grep: re.Pattern[str] | None = None
    rejected: str = ""  # an option an old journalctl would not know


def parse_command(command: str) -> Options:
    argv = shlex.split(command)
    assert argv[0] == "journalctl", argv
    o = Options()
    args = iter(argv[1:])
    for a in args:
        if a in ("--no-pager", "--all"):
            continue
        if a == "-u":
            o.unit = next(args)
        elif a == "-o":
            assert next(args) == "json"
        elif a == "--directory":
            next(args)
        elif a == "-n":
            o.n = int(next(args))
        elif a == "--cursor":
            o.cursor = next(args)
        elif a == "--after-cursor":
            o.after_cursor = next(args)
        elif a in ("--since", "--until"):
            value = next(args)
            assert value.startswith("@"), value
            us = int(value[1:]) * SECOND
            if a == "--since":
                o.since_us = us
            else:
                o.until_us = us
        elif a == "--follow":
            o.follow = True
        elif a == "--no-tail":
            o.no_tail = True
        elif a.startswith("--output-fields="):
            o.fields = a.split("=", 1)[1].split(",")
            o.rejected = o.rejected or a
        elif a == "--grep":
            o.grep = re.compile(next(args))
            o.rejected = o.rejected or a
        else:
            raise AssertionError(f"the fake journalctl does not know {a!r} in {argv}")
    return o


class FakeNode:
    """An asyncssh server on 127.0.0.1 whose sessions run a fake journalctl over `items`."""

    def __init__(self) -> None:
        self.host_key = asyncssh.generate_private_key("ssh-ed25519")
        self.client_key = asyncssh.generate_private_key("ssh-ed25519")
        self.items: list[Item] = []
        # fault switches (read and changed on the server's loop only: use `do`)
        self.reject_features = False
        self.drop_budget: int | None = None  # follow-stream bytes still to send before a drop
        self.hold_budget: int | None = None  # follow-stream bytes to send, then send no more
        self.holds = 0  # streams held so far
        self.released = 0  # the holds up to this one are over
        self.fail_next: str = ""  # the next follow stream sends what it has, then exits 1 with it
        self.stalled = False
        # what happened
        self.drops = 0
        self.failures = 0
        self.commands: list[str] = []
        self.followers = 0
        self.conns: set[asyncssh.SSHServerConnection] = set()
        self._changed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncssh.SSHAcceptor | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self.port = 0

    # the server's own thread and loop

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        loop.run_until_complete(self._start())
        self._ready.set()
        loop.run_forever()
        loop.close()

    async def _start(self) -> None:
        self._changed = asyncio.Event()
        fake = self

        class Server(asyncssh.SSHServer):
            def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
                self.conn = conn
                fake.conns.add(conn)
                if fake.stalled:
                    _pause(conn)

            def connection_lost(self, exc: Exception | None) -> None:
                fake.conns.discard(self.conn)

        public = self.client_key.export_public_key("openssh").decode()
        self._server = await asyncssh.create_server(
            Server,
            "127.0.0.1",
            0,
            server_host_keys=[self.host_key],
            authorized_client_keys=asyncssh.import_authorized_keys(public),
            process_factory=self._handle,
            encoding=None,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    def __enter__(self) -> FakeNode:
        self._thread.start()
        assert self._ready.wait(10), "the fake node did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            for conn in list(self.conns):
                conn.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.do(stop)
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def do(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` (a function or a coroutine function) on the server's loop; its result."""

        async def call() -> Any:
            result = fn()
            if asyncio.iscoroutine(result):
                result = await result
            return result

        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(10)

    # what the test does

    def append(self, items: list[Item]) -> None:
        def add() -> None:
            self.items.extend(items)
            self._notify()

        self.do(add)

    def set(self, **switches: Any) -> None:
        def change() -> None:
            for k, v in switches.items():
                assert hasattr(self, k), k
                setattr(self, k, v)
            self._notify()

        self.do(change)

    def stall(self) -> None:
        """Stop answering: read nothing, write nothing, on every connection, new ones too."""

        def on() -> None:
            self.stalled = True
            for conn in self.conns:
                _pause(conn)

        self.do(on)

    def unstall(self) -> None:
        """Answer again; the connections that hung are dropped."""

        def off() -> None:
            self.stalled = False
            for conn in list(self.conns):
                conn.abort()
            self._notify()

        self.do(off)

    def known_hosts(self, path: Path) -> Path:
        key = self.host_key.export_public_key("openssh").decode().split()[:2]
        path.write_text(f"[127.0.0.1]:{self.port} {' '.join(key)}\n")
        return path

    def client_key_file(self, path: Path) -> Path:
        self.client_key.write_private_key(str(path))
        path.chmod(0o600)
        return path

    def get(self, name: str) -> Any:
        return self.do(lambda: getattr(self, name))

    # the fake journalctl

    def _notify(self) -> None:
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()

    @staticmethod
    def _select(items: list[Item], o: Options, start: int = 0) -> list[tuple[int, Item]]:
        """The items from index `start` that the options let through, in journal order."""
        out = []
        for i in range(start, len(items)):
            it = items[i]
            e = it.entry
            if e is None:
                if o.follow:  # garbage in the stream, not in the journal
                    out.append((i, it))
                continue
            if o.unit and e["_SYSTEMD_UNIT"] != o.unit:
                continue
            if o.since_us is not None and int(e["__REALTIME_TIMESTAMP"]) < o.since_us:
                continue
            if o.until_us is not None and int(e["__REALTIME_TIMESTAMP"]) > o.until_us:
                continue
            if o.grep is not None and not o.grep.search(e["MESSAGE"]):
                continue
            out.append((i, it))
        return out

    def _start_index(self, o: Options) -> int:
        for c, inclusive in ((o.cursor, True), (o.after_cursor, False)):
            if c:
                for i, it in enumerate(self.items):
                    if it.entry is not None and it.entry["__CURSOR"] == c:
                        return i if inclusive else i + 1
                return len(self.items)  # a cursor not found: nothing (good enough here)
        return 0

    @staticmethod
    def _line(o: Options, it: Item) -> bytes:
        if it.entry is None:
            return it.raw + b"\n"
        e = it.entry
        if o.fields is not None:
            keep = {*o.fields, "__CURSOR", "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP"}
            e = {k: v for k, v in e.items() if k in keep}
        # as journalctl writes it: UTF-8, nothing escaped that JSON does not require (U+2028 too)
        return json.dumps(e, ensure_ascii=False).encode() + b"\n"

    async def _handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command or ""
        self.commands.append(command)
        try:
            o = parse_command(command)
            if o.rejected and self.reject_features:
                process.stderr.write(REJECTED.format(o.rejected).encode() + b"\n")
                process.exit(1)
                return
            if not o.follow:
                selected = self._select(self.items, o, self._start_index(o))
                if o.n is not None:
                    selected = selected[len(selected) - o.n :] if o.n else []
                process.stdout.write(b"".join(self._line(o, it) for _, it in selected))
                process.exit(0)
                return
            await self._follow(process, o)
        except (OSError, asyncssh.Error):
            pass  # the client went away
        except Exception as e:  # a bug in the fake: make it loud
            process.stderr.write(f"fake journalctl: {e!r}\n".encode())
            process.exit(99)
            raise

    async def _follow(self, process: asyncssh.SSHServerProcess[bytes], o: Options) -> None:
        self.followers += 1
        try:
            position = self._start_index(o)
            if not o.no_tail:
                tail = self._select(self.items, o, position)[-10:]
                position = tail[0][0] if tail else len(self.items)
            while not process.is_closing():
                changed = self._changed
                assert changed is not None
                if not self.stalled:
                    selected = self._select(self.items, o, position)
                    position = len(self.items)
                    data = b"".join(self._line(o, it) for _, it in selected)
                    if data and not await self._send(process, data):
                        return
                    if self.fail_next:
                        message, self.fail_next = self.fail_next, ""
                        self.failures += 1
                        process.stderr.write(message.encode() + b"\n")
                        process.exit(1)
                        return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), 0.2)
        finally:
            self.followers -= 1

    async def _send(self, process: asyncssh.SSHServerProcess[bytes], data: bytes) -> bool:
        """Write `data`, or as much of it as the drop budget allows, then drop the connection;
        or as much as the hold budget allows, the rest once the hold is lifted."""
        hold = self.hold_budget
        if hold is not None and hold <= len(data):
            self.hold_budget = None
            process.stdout.write(data[:hold])
            await process.stdout.drain()
            self.holds += 1
            mine = self.holds
            while self.released < mine and not process.is_closing():
                await asyncio.sleep(0.05)
            data = data[hold:]
        elif hold is not None:
            self.hold_budget = hold - len(data)
        budget = self.drop_budget
        if budget is not None and budget <= len(data):
            self.drop_budget = None
            process.stdout.write(data[:budget])
            await process.stdout.drain()
            self.drops += 1
            process.get_extra_info("connection").abort()
            return False
        if budget is not None:
            self.drop_budget = budget - len(data)
        process.stdout.write(data)
        await process.stdout.drain()
        return True


def _pause(conn: asyncssh.SSHServerConnection) -> None:
    transport = conn._transport  # no public way to stop reading
    if transport is not None:
        transport.pause_reading()


# -- the journal's contents, and the truth -------------------------------------------------------


class Journal:
    """Entries of node0's llama-server, numbered, for the fake node to serve."""

    def __init__(self) -> None:
        self.count = 0

    def items(self, seed: int, start_us: int, end_us: int) -> list[Item]:
        out = []
        for x in node_lines("node0", seed, start_us, end_us):
            self.count += 1
            out.append(entry(self.count, x.time_us, x.pid, x.message))
            if self.count % 7 == 0:  # another unit's line, that -u filters out
                self.count += 1
                out.append(entry(self.count, x.time_us, 1, "total time = 1 ms", "other.service"))
        return out


def source_options(follow: bool = True) -> Options:
    """What the source asks journalctl for: its unit, --output-fields and --grep."""
    return Options(unit=UNIT, fields=FIELDS.split(","), grep=re.compile(GREP), follow=follow)


def served_size(items: list[Item]) -> int:
    """The bytes a follow stream with the source's filters sends for `items`."""
    o = source_options()
    return sum(len(FakeNode._line(o, it)) for _, it in FakeNode._select(items, o))


def served_count(items: list[Item]) -> int:
    """How many lines the source's follow stream sends for `items`, each once."""
    return len(FakeNode._select(items, source_options()))


def entries_once(samples: Samples, fake: FakeNode) -> None:
    """Every line the node sent was counted once: none twice after a reconnect or restart."""
    items: list[Item] = fake.get("items")
    assert counter(samples, "smllm_source_entries_total") == served_count(items)


def newest_sent(items: list[Item]) -> int:
    """The journal time of the newest entry the source's follow stream sends."""
    selected = FakeNode._select(items, source_options(follow=False))
    times = [int(it.entry["__REALTIME_TIMESTAMP"]) for _, it in selected if it.entry]
    return max(times, default=0)


def truth(items: list[Item], node: str, since_us: int) -> list[LogLine | Exception]:
    """What a from-scratch count reads of the items served, garbage as parse errors."""
    decoder = LineDecoder(node)
    out: list[LogLine | Exception] = []
    for it in items:
        if it.entry is None:
            if any(k.encode() in it.raw for k in KEYWORDS_TEXT):
                try:
                    decoder.decode(it.raw)
                except DumpLineError as err:
                    out.append(err)
                    continue
                raise AssertionError(f"garbage that decodes: {it.raw!r}")
            continue
        e = it.entry
        t = int(e["__REALTIME_TIMESTAMP"])
        if e["_SYSTEMD_UNIT"] == UNIT and t >= since_us:
            out.append(LogLine(node, t, e["__CURSOR"], int(e["_PID"]), e["MESSAGE"]))
    return out


KEYWORDS_TEXT = tuple(k.decode() for k in KEYWORDS)  # what the remote --grep lets through


# -- the scraper ---------------------------------------------------------------------------------


def monotonic(name: str) -> bool:
    return name.startswith("smllm_") and (
        name.endswith(("_total", "_count", "_sum", "_bucket"))
        or name == "smllm_accounted_until_timestamp_seconds"
    )


class Scraper:
    """Scrapes /metrics over and over in a thread; every counter and the watermark must never
    go down (across daemon restarts too)."""

    def __init__(self, url: Callable[[], str | None]) -> None:
        self.url = url
        self.highest: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.violations: list[str] = []
        self.scrapes = 0
        self.last: Samples = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            url = self.url()
            if url is not None:
                try:
                    status, body, _ = http_get(url + "/metrics")
                except OSError:
                    status, body = 0, b""
                if status == 200:
                    self._record(parse_metrics(body.decode()))
            self._stop.wait(0.03)

    def _record(self, samples: Samples) -> None:
        for key, value in samples.items():
            if not monotonic(key[0]):
                continue
            before = self.highest.get(key)
            if before is not None and value < before:
                self.violations.append(f"scrape {self.scrapes}: {key} {before} -> {value}")
            self.highest[key] = max(value, before if before is not None else value)
        self.last = samples
        self.scrapes += 1

    def fresh(self) -> Samples:
        """The samples of a scrape that started after this call."""
        n = self.scrapes
        wait_for(lambda: self.scrapes >= n + 2, 10, "two more scrapes")
        return self.last

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.scrapes > 0, "never scraped"
        assert not self.violations, self.violations[:10]


# -- helpers --------------------------------------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeNode]:
    with FakeNode() as node:
        yield node


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries after 0.1 s, not 1 s doubling to 60: twenty faults in seconds, not minutes."""
    monkeypatch.setattr(exporter.daemon, "RETRY_FIRST_S", 0.1)
    monkeypatch.setattr(exporter.daemon, "RETRY_MAX_S", 0.3)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


def ssh_node(fake: FakeNode, tmp_path: Path, name: str = "a") -> SshNode:
    return local_node(
        name,
        fake.port,
        fake.known_hosts(tmp_path / "known_hosts"),
        fake.client_key_file(tmp_path / "id_ed25519"),
        "/var/log/journal/it's $HOME",
        keepalive_interval=0.3,
        keepalive_count_max=2,
    )


def make_daemon(tmp_path: Path, since_us: int, node: SshNode) -> Daemon:
    return Daemon(local_config(tmp_path, since_us, node), publish_seconds=0.1, tick_seconds=0.1)


def problems(samples: Samples, fake: FakeNode, since_us: int, node: str = "a") -> list[str]:
    """The served figures against a report over what the node served, up to the served
    watermark; the source up."""
    wm = sample(samples, "smllm_accounted_until_timestamp_seconds")
    if wm is None:
        return ["no watermark served"]
    items: list[Item] = fake.do(lambda: list(fake.items))
    snap = report.build(
        {node: truth(items, node, since_us)}, KINDS, since_us, round(wm * SECOND)
    ).snapshot
    out = compare(samples, snap)
    newest = newest_sent(items)
    if round(wm * SECOND) < newest:
        out.append(f"watermark {iso(round(wm * SECOND))} before the newest entry {iso(newest)}")
    if sample(samples, "smllm_source_up", node=node) != 1:
        out.append(f"source_up {sample(samples, 'smllm_source_up', node=node)}")
    return out


def settle(scraper: Scraper, fake: FakeNode, since_us: int, timeout: float, what: str) -> Samples:
    """Fresh scrapes until one finds no problem; its samples."""
    samples: Samples = {}

    def check() -> list[str]:
        nonlocal samples
        samples = scraper.fresh()
        return problems(samples, fake, since_us)

    until_right(check, timeout, what, pause=0)
    return samples


def counter(samples: Samples, name: str, node: str = "a") -> float:
    return sample(samples, name, node=node) or 0.0


def dropped(fake: FakeNode, n: int) -> bool:
    return bool(fake.get("drops") >= n)


def held(fake: FakeNode, n: int) -> bool:
    return bool(fake.get("holds") >= n)


def failed(fake: FakeNode, n: int) -> bool:
    return bool(fake.get("failures") >= n)


# -- the tests ------------------------------------------------------------------------------------


def test_connection_dropped_at_twenty_random_points_of_a_growing_journal(
    fake: FakeNode, tmp_path: Path
) -> None:
    seed = int(os.environ.get("SMLLM_FAULT_SEED", random.randrange(1 << 32)))
    print(f"SMLLM_FAULT_SEED={seed}")
    rng = random.Random(seed)
    now = now_us()
    since = now - 40 * MINUTE
    journal = Journal()
    fake.append(journal.items(1, since, since + 20 * MINUTE))  # history
    later = journal.items(2, now + 10 * MINUTE, now + 50 * MINUTE)  # ahead of the clock
    size = len(later) // 20
    chunks = [later[i * size : (i + 1) * size] for i in range(19)] + [later[19 * size :]]
    assert all(len(c) > 5 for c in chunks), [len(c) for c in chunks]
    node = ssh_node(fake, tmp_path)
    with DaemonThread(make_daemon(tmp_path, since, node)) as d, Scraper(lambda: d.url) as s:
        settle(s, fake, since, 30, f"the history read (seed {seed})")
        for i, chunk in enumerate(chunks):
            fake.set(drop_budget=rng.randrange(1, served_size(chunk)))
            fake.append(chunk)
            wait_for(partial(dropped, fake, i + 1), 20, f"drop {i + 1} (seed {seed})")
        samples = settle(s, fake, since, 30, f"after 20 drops (seed {seed})")
        assert counter(samples, "smllm_source_reconnects_total") >= 20
        entries_once(samples, fake)
        assert counter(samples, "smllm_parse_errors_total") == 0
        assert requests(samples) > 40
        followers = [c for c in fake.get("commands") if "--follow" in c]
        assert len(followers) >= 21 and "--after-cursor" in followers[-1], followers[-3:]


def test_server_that_stops_answering_is_noticed_by_keepalive(
    fake: FakeNode, tmp_path: Path
) -> None:
    now = now_us()
    since = now - 40 * MINUTE
    journal = Journal()
    fake.append(journal.items(3, since, since + 20 * MINUTE))
    node = ssh_node(fake, tmp_path)
    with DaemonThread(make_daemon(tmp_path, since, node)) as d, Scraper(lambda: d.url) as s:
        before = settle(s, fake, since, 30, "the history read")
        reconnects = counter(before, "smllm_source_reconnects_total")
        fake.stall()
        # written while the node hangs: to be read once it answers again
        fake.append(journal.items(4, now + 10 * MINUTE, now + 20 * MINUTE))
        wait_for(
            lambda: sample(s.fresh(), "smllm_source_up", node="a") == 0,
            15,
            "source_up 0 once keepalive notices",
        )
        fake.unstall()
        after = settle(s, fake, since, 30, "read again after the stall")
        assert counter(after, "smllm_source_reconnects_total") > reconnects
        assert requests(after) > requests(before)
        entries_once(after, fake)


def test_journalctl_exiting_non_zero_is_retried_and_logged(
    fake: FakeNode, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = now_us()
    since = now - 40 * MINUTE
    journal = Journal()
    fake.append(journal.items(5, since, since + 20 * MINUTE))
    message = "Failed to iterate through journal: Bad message"
    node = ssh_node(fake, tmp_path)
    with DaemonThread(make_daemon(tmp_path, since, node)) as d, Scraper(lambda: d.url) as s:
        settle(s, fake, since, 30, "the history read")
        for seed in (6, 7):
            fake.set(fail_next=message)
            fake.append(journal.items(seed, now + seed * MINUTE * 10, now + seed * MINUTE * 11))
            wait_for(partial(failed, fake, seed - 5), 15, "journalctl failed")
            samples = settle(s, fake, since, 30, f"read again after failure {seed - 5}")
        assert counter(samples, "smllm_source_reconnects_total") >= 2
        entries_once(samples, fake)
    logged = [r.getMessage() for r in caplog.records if message in r.getMessage()]
    assert logged and "remote journalctl ended (1)" in logged[0], logged


GARBAGE = [
    b'{"__CURSOR": "s=x;i=1", "MESSAGE": "slot release: id  0 | task 9 | total time',  # truncated
    b"\x00\xff\xfe garbage with total time = 12 ms in it",
    b'{"MESSAGE": "prompt eval time = 1.0 ms / 2 tokens"}',  # no __REALTIME_TIMESTAMP
    b'["print_timing", 1, 2]',
    b'{"__REALTIME_TIMESTAMP": "soon", "MESSAGE": "slot released"}',
    b"plain noise without any keyword",  # not even looked at
    b"",
]


def test_garbage_and_truncated_json_lines_count_as_parse_errors_only(
    fake: FakeNode, tmp_path: Path
) -> None:
    now = now_us()
    since = now - 40 * MINUTE
    journal = Journal()
    history = journal.items(8, since, since + 20 * MINUTE)
    mixed: list[Item] = []
    for i, it in enumerate(history):  # garbage among the entries, and at the very end
        mixed.append(it)
        if i % 37 == 5:
            mixed.append(Item(raw=GARBAGE[i % len(GARBAGE)]))
    mixed += [Item(raw=g) for g in GARBAGE]
    errors = sum(
        1 for it in mixed if it.entry is None and any(k.encode() in it.raw for k in KEYWORDS_TEXT)
    )
    assert errors > 10
    fake.append(mixed)
    node = ssh_node(fake, tmp_path)
    with DaemonThread(make_daemon(tmp_path, since, node)) as d, Scraper(lambda: d.url) as s:
        samples = settle(s, fake, since, 30, "history with garbage read")
        assert counter(samples, "smllm_parse_errors_total") == errors
        clean = report.build(
            {"a": truth(history, "a", since)},
            KINDS,
            since,
            round((sample(samples, "smllm_accounted_until_timestamp_seconds") or 0) * SECOND),
        ).snapshot
        assert requests(samples) == sum(c.requests for c in clean.nodes[0].kinds.values()) > 20
        # more garbage while following, then more entries
        fake.append([Item(raw=g) for g in GARBAGE])
        fake.append(journal.items(9, now + 10 * MINUTE, now + 20 * MINUTE))
        samples = settle(s, fake, since, 30, "garbage while following")
        assert counter(samples, "smllm_parse_errors_total") == errors + 5
        assert counter(samples, "smllm_source_reconnects_total") == 0


def test_server_refusing_output_fields_and_grep(fake: FakeNode, tmp_path: Path) -> None:
    fake.set(reject_features=True)
    now = now_us()
    since = now - 40 * MINUTE
    journal = Journal()
    fake.append(journal.items(10, since, since + 20 * MINUTE))
    node = ssh_node(fake, tmp_path)
    with DaemonThread(make_daemon(tmp_path, since, node)) as d, Scraper(lambda: d.url) as s:
        settle(s, fake, since, 30, "history read without --output-fields/--grep")
        fake.append(journal.items(11, now + 10 * MINUTE, now + 20 * MINUTE))
        samples = settle(s, fake, since, 30, "appended entries read")
        # every entry of the unit came over the wire, in full
        items: list[Item] = fake.get("items")
        assert counter(samples, "smllm_source_entries_total") == sum(
            1 for it in items if it.entry is not None and it.entry["_SYSTEMD_UNIT"] == UNIT
        )
    commands: list[str] = fake.get("commands")
    follows = [c for c in commands if "--follow" in c]
    assert follows and all("--grep" not in c and "--output-fields" not in c for c in follows)
    assert any("--grep" in c for c in commands)  # it was probed


@contextlib.asynccontextmanager
async def following(source: SshSource, out: asyncio.Queue[Batch]) -> AsyncIterator[None]:
    """`source` following into `out` for the block; cancelled after it, as the daemon does."""
    task = asyncio.create_task(source.run(out))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, SourceError):
            await task


def test_a_newest_entry_holding_a_line_separator_is_no_empty_journal(
    fake: FakeNode, tmp_path: Path
) -> None:
    """journalctl leaves U+2028 unescaped in its JSON (Python's str.splitlines splits there): the
    newest entry must still be read whole, or the source takes the journal for empty and says
    "caught up" before the backlog (which would then count as late)."""
    fake.set(reject_features=True)  # no --grep: the newest entry is whatever the unit said last
    since = now_us() - 40 * MINUTE
    journal = Journal()
    items = journal.items(10, since, since + 20 * MINUTE)
    items.append(entry(10**6, since + 21 * MINUTE, 4242, "request body a\u2028b"))
    fake.append(items)
    source = SshSource(ssh_node(fake, tmp_path), since_us=since)

    async def first_batch() -> Batch:
        out: asyncio.Queue[Batch] = asyncio.Queue(4)
        async with following(source, out):
            return await asyncio.wait_for(out.get(), 20)

    first = asyncio.run(first_batch())
    assert first.up and not first.caught_up


def test_daemon_killed_with_sigkill_mid_stream(fake: FakeNode, tmp_path: Path) -> None:
    now = now_us()
    since = now - 40 * MINUTE
    journal = Journal()
    fake.append(journal.items(12, since, since + 20 * MINUTE))
    later = journal.items(13, now + 10 * MINUTE, now + 40 * MINUTE)
    node = ssh_node(fake, tmp_path)
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        "\n".join(
            [
                f"listen: '127.0.0.1:{port}'",
                f"state_dir: {tmp_path / 'state'}",
                f"since: '{iso(since)}'",
                "nodes:",
                "  - name: a",
                "    source: ssh",
                "    host: 127.0.0.1",
                f"    port: {fake.port}",
                "    user: root",
                f"    unit: {UNIT}",
                f"    known_hosts: {node.known_hosts}",
                f"    client_keys: [{node.client_keys[0]}]",
                "    keepalive_interval: 0.3",
                "    keepalive_count_max: 2",
                "",
            ]
        )
    )
    url = f"http://127.0.0.1:{port}"

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "exporter", "run", "--config", str(config)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "daemon.log").open("ab"),
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )

    proc = start()
    try:
        with Scraper(lambda: url) as s:
            settle(s, fake, since, 30, "the history read")
            for k, half in enumerate((later[: len(later) // 2], later[len(later) // 2 :])):
                fake.set(hold_budget=served_size(half) // 3)  # held mid-line: the kill lands there
                fake.append(half)
                wait_for(partial(held, fake, k + 1), 15, "the stream held")
                s.fresh()  # the daemon has published what it read of it
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                fake.set(released=k + 1)
                proc = start()
            samples = settle(s, fake, since, 40, "everything once after two kills")
            entries_once(samples, fake)
            assert requests(samples) > 40
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
    follows = [c for c in fake.get("commands") if "--follow" in c]
    assert len(follows) == 3 and all("--after-cursor" in c for c in follows[1:]), follows
    log = (tmp_path / "daemon.log").read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


class CountingQueue(asyncio.Queue[Batch]):
    """A queue that counts the batches it refused for being full."""

    refused = 0

    def put_nowait(self, item: Batch) -> None:
        try:
            super().put_nowait(item)
        except asyncio.QueueFull:
            self.refused += 1
            raise


def test_a_full_queue_holds_the_stream_back_and_loses_nothing(
    fake: FakeNode, tmp_path: Path
) -> None:
    """A source whose queue is full holds its batch and stops reading (the node waits) until
    there is room: every line of a backlog (1.3 MB) and of what follows arrives once, in
    order."""
    now = now_us()
    since = now - 400 * MINUTE
    journal = Journal()
    fake.append(journal.items(14, since, since + 390 * MINUTE))
    later = journal.items(15, now + 10 * MINUTE, now + 20 * MINUTE)
    node = ssh_node(fake, tmp_path)

    async def follow() -> tuple[list[LogLine], int, str, int]:
        queue = CountingQueue(1)
        lines: list[LogLine] = []
        entries, position, appended = 0, "", False
        async with following(SshSource(node, since_us=since), queue):
            async with asyncio.timeout(60):
                while not queue.refused:  # the first batch fills it: the next one is held
                    await asyncio.sleep(0.01)
                while not (appended and entries == served_count(fake.items)):
                    batch = await queue.get()
                    assert batch.up and not batch.errors, batch
                    lines += batch.lines
                    entries += batch.entries
                    position = batch.position or position
                    if not appended and entries == served_count(fake.items):
                        await asyncio.to_thread(fake.append, later)  # now following
                        appended = True
        return lines, entries, position, queue.refused

    lines, entries, position, refused = asyncio.run(follow())
    items: list[Item] = fake.get("items")
    served = [
        it.entry for _, it in FakeNode._select(items, source_options()) if it.entry is not None
    ]
    assert refused > 0, "the queue was never full: nothing was held"
    assert entries == len(served)
    assert lines == [
        LogLine("a", int(e["__REALTIME_TIMESTAMP"]), e["__CURSOR"], int(e["_PID"]), e["MESSAGE"])
        for e in served
        if int(e["__REALTIME_TIMESTAMP"]) >= since
    ]
    assert position == served[-1]["__CURSOR"]


def _entry_line(**fields: object) -> bytes:
    return json.dumps(fields).encode()


CURSOR = "s=fake;i=1f;b=boot;m=1f;t=5e0f1a2b3c4d5;x=1f"
PLAIN = {
    "as journalctl writes it": _entry_line(
        __CURSOR=CURSOR,
        __REALTIME_TIMESTAMP="1790000000123456",
        __MONOTONIC_TIMESTAMP="31",
        _BOOT_ID="boot",
        _PID="4242",
        MESSAGE="slot print_timing: id  0 | task 7 | total time = 1.00 ms / 3 tokens",
    ),
    "escapes and non-ASCII": _entry_line(
        __CURSOR=CURSOR,
        __REALTIME_TIMESTAMP="1790000000123456",
        _PID="1",
        MESSAGE='é "total time"\n\t\\ \u2028',
    ),
    "every field": json.dumps(entry(3, 1_790_000_000_000_001, 77, "release").entry).encode(),
}
UNUSUAL = {
    "no _PID, a SYSLOG_PID": _entry_line(
        __CURSOR=CURSOR, __REALTIME_TIMESTAMP="1", SYSLOG_PID="9", MESSAGE="release"
    ),
    "an empty _PID": _entry_line(__CURSOR=CURSOR, __REALTIME_TIMESTAMP="1", _PID="", MESSAGE="m"),
    "a PID that is no number": _entry_line(
        __CURSOR=CURSOR, __REALTIME_TIMESTAMP="1", _PID="12x", MESSAGE="m"
    ),
    "a PID as a number": _entry_line(
        __CURSOR=CURSOR, __REALTIME_TIMESTAMP="1", _PID=12, MESSAGE="m"
    ),
    "a time as a number": _entry_line(
        __CURSOR=CURSOR, __REALTIME_TIMESTAMP=1, _PID="1", MESSAGE="m"
    ),
    "a signed time": _entry_line(__CURSOR=CURSOR, __REALTIME_TIMESTAMP="+1", _PID="1", MESSAGE="m"),
    "non-ASCII digits": _entry_line(
        __CURSOR=CURSOR, __REALTIME_TIMESTAMP="\u0661\u0662", _PID="1", MESSAGE="m"
    ),
    "a time that is no number": _entry_line(
        __CURSOR=CURSOR, __REALTIME_TIMESTAMP="soon", _PID="1", MESSAGE="m"
    ),
    "no cursor": _entry_line(__REALTIME_TIMESTAMP="1", _PID="1", MESSAGE="m"),
    "a MESSAGE of bytes": _entry_line(
        __CURSOR=CURSOR, __REALTIME_TIMESTAMP="1", _PID="1", MESSAGE=[114, 255, 101]
    ),
    "a null MESSAGE": _entry_line(
        __CURSOR=CURSOR, __REALTIME_TIMESTAMP="1", _PID="1", MESSAGE=None
    ),
    "trailing blanks": PLAIN["as journalctl writes it"] + b"  ",
    "a carriage return": PLAIN["as journalctl writes it"] + b"\r",
    "two objects": PLAIN["as journalctl writes it"] * 2,
    "not UTF-8": PLAIN["as journalctl writes it"].replace(b"total", b"t\xfftal"),
    "an array": b'["print_timing", 1, 2]',
    "truncated": PLAIN["as journalctl writes it"][:-3],
    "a leading blank": b" " + PLAIN["as journalctl writes it"],
}


def test_the_quick_json_decoding_agrees_with_the_dump_decoder() -> None:
    """Entries of the usual shape are decoded to the very LogLine the dump decoder makes; any
    other line is left to the dump decoder (its LogLine, None or error with its words)."""
    for what, raw in PLAIN.items():
        assert _plain("a", raw) == LineDecoder("a").decode(raw), what
        assert _plain("a", raw) is not None, what
    for what, raw in UNUSUAL.items():
        assert _plain("a", raw) is None, what
