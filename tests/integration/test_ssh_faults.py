"""The SSH source under faults, against asyncssh's own server emulating a node's journalctl.

The server (support/fake_journalctl.py: a FakeServer, on its own event loop in a thread) serves
an in-memory journal the test grows, and can: drop the connection K bytes into a stream, stop
answering (the client's keepalive must notice), make journalctl exit non-zero with a message on
stderr, send garbage and truncated JSON lines, and refuse `--output-fields`/`--grep` like an old
systemd. A daemon runs in-process (or, for SIGKILL, as a subprocess); a watch thread records
every scrape and fails the test if any counter or the watermark ever went down. After each
fault the served figures must equal a from-scratch report over the entries served, up to the
served watermark.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path

import pytest

import exporter.daemon.supervise
from exporter.base.records import Batch, LogLine
from exporter.base.times import SECOND, iso
from exporter.commands.demo import node_lines
from exporter.daemon.daemon import Daemon
from exporter.report import window as report
from exporter.sources.base import SourceError
from exporter.sources.entries import EntryDecoder, EntryError, plain_json
from exporter.sources.lines import KEYWORDS
from exporter.sources.ssh import SshNode
from exporter.sources.sshreader import FIELDS, GREP, SshSource

from support.daemon_process import DaemonProcess
from support.daemon_thread import DaemonThread
from support.fake_journalctl import FakeServer, Item, Query, grep_pattern, line, selected
from support.journals import UNIT, compare
from support.scrape import Samples, Watch, sample
from support.settings import default_settings
from support.ssh_nodes import (
    AHEAD_ALLOWANCE_S,
    KINDS,
    MINUTE,
    local_config,
    local_node,
    now_us,
    requests,
)
from support.tools import until_right, wait_for

pytestmark = pytest.mark.slow

# -- the journal's contents, and the truth -------------------------------------------------------


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


def source_query(follow: bool = True) -> Query:
    """What the source asks journalctl for: its unit, --output-fields and --grep."""
    return Query(unit=UNIT, fields=tuple(FIELDS.split(",")), grep=grep_pattern(GREP), follow=follow)


def served_lines(items: list[Item]) -> list[bytes]:
    """The lines a follow stream with the source's filters sends for `items`."""
    q = source_query()
    return [line(q, it) for it in selected(q, items)]


def served_size(items: list[Item]) -> int:
    """The bytes a follow stream with the source's filters sends for `items`."""
    return sum(map(len, served_lines(items)))


def served_count(items: list[Item]) -> int:
    """How many lines the source's follow stream sends for `items`, each once."""
    return len(selected(source_query(), items))


def entries_once(samples: Samples, fake: FakeServer) -> None:
    """Every line the node sent was counted once: none twice after a reconnect or restart."""
    assert counter(samples, "smllm_source_entries_total") == served_count(fake.items)


def newest_sent(items: list[Item]) -> int:
    """The journal time of the newest entry the source's follow stream sends."""
    shown = selected(source_query(follow=False), items)
    return max((int(it.entry["__REALTIME_TIMESTAMP"]) for it in shown if it.entry), default=0)


KEYWORDS_TEXT = tuple(k.decode() for k in KEYWORDS)  # what the line layer looks at


def truth(items: list[Item], node: str, since_us: int) -> Batch:
    """What a from-scratch count reads of the items served, garbage as parse errors."""
    decoder = EntryDecoder(node)
    lines: list[LogLine] = []
    errors: list[str] = []
    for it in items:
        if it.entry is None:
            if any(k.encode() in it.raw for k in KEYWORDS_TEXT):
                try:
                    decoder.decode(it.raw)
                except EntryError as err:
                    errors.append(str(err))
                    continue
                raise AssertionError(f"garbage that decodes: {it.raw!r}")
            continue
        e = it.entry
        t = int(e["__REALTIME_TIMESTAMP"])
        if e["_SYSTEMD_UNIT"] == UNIT and t >= since_us:
            lines.append(LogLine(node, t, e["__CURSOR"], int(e["_PID"]), e["MESSAGE"]))
    return Batch(node, tuple(lines), errors=tuple(errors))


# -- helpers --------------------------------------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    with FakeServer() as node:
        yield node


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries after 0.1 s, not 1 s doubling to 60: twenty faults in seconds, not minutes."""
    monkeypatch.setattr(exporter.daemon.supervise, "RETRY_FIRST_S", 0.1)
    monkeypatch.setattr(exporter.daemon.supervise, "RETRY_MAX_S", 0.3)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


def ssh_node(fake: FakeServer, tmp_path: Path, name: str = "a") -> SshNode:
    return local_node(
        name,
        fake.port,
        fake.known_hosts(tmp_path / "known_hosts"),
        fake.client_key_file(tmp_path / "id_ed25519"),
        "/var/log/journal/it's $HOME",
        keepalive_interval=0.3,
        keepalive_count_max=2,
    )


def process_config(
    fake: FakeServer,
    node: SshNode,
    since_us: int,
    clock_allowance_seconds: int = 5,
    **node_keys: object,
) -> dict[str, object]:
    """The config of a daemon process following `node` on the fake server (`node_keys`: more of
    the node's keys)."""
    return {
        "since": iso(since_us),
        "clock_allowance_seconds": clock_allowance_seconds,
        "nodes": [
            {
                "name": "a",
                "source": "ssh",
                "host": "127.0.0.1",
                "port": fake.port,
                "user": "root",
                "unit": UNIT,
                "known_hosts": str(node.known_hosts),
                "client_keys": [str(node.client_keys[0])],
                **node_keys,
            }
        ],
    }


def make_daemon(tmp_path: Path, since_us: int, node: SshNode) -> Daemon:
    return Daemon(local_config(tmp_path, since_us, node), publish_seconds=0.1, tick_seconds=0.1)


def watch(d: DaemonThread) -> Watch:
    return Watch(lambda: d.url)


def problems(samples: Samples, fake: FakeServer, since_us: int, node: str = "a") -> list[str]:
    """The served figures against a report over what the node served, up to the served
    watermark; the source up."""
    wm = sample(samples, "smllm_accounted_until_timestamp_seconds")
    if wm is None:
        return ["no watermark served"]
    items = fake.items
    snap = report.build(
        {node: [truth(items, node, since_us)]},
        default_settings(KINDS),
        since_us,
        round(wm * SECOND),
    ).snapshot
    out = compare(samples, snap)
    newest = newest_sent(items)
    if round(wm * SECOND) < newest:
        out.append(f"watermark {iso(round(wm * SECOND))} before the newest entry {iso(newest)}")
    if sample(samples, "smllm_source_up", node=node) != 1:
        out.append(f"source_up {sample(samples, 'smllm_source_up', node=node)}")
    return out


def settle(w: Watch, fake: FakeServer, since_us: int, timeout: float, what: str) -> Samples:
    """Fresh scrapes until one finds no problem; its samples."""
    samples: Samples = {}

    def check() -> list[str]:
        nonlocal samples
        samples = w.fresh()
        return problems(samples, fake, since_us)

    until_right(check, timeout, what, pause=0)
    return samples


def counter(samples: Samples, name: str, node: str = "a") -> float:
    return sample(samples, name, node=node) or 0.0


def reached(fake: FakeServer, stat: str, n: int) -> bool:
    """Has the node's `stat` (drops, holds, failures) reached `n`?"""
    return bool(fake.stat(stat) >= n)


# -- the tests ------------------------------------------------------------------------------------


def test_connection_dropped_at_twenty_random_points_of_a_growing_journal(
    fake: FakeServer, tmp_path: Path
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
    with DaemonThread(make_daemon(tmp_path, since, node)) as d, watch(d) as s:
        settle(s, fake, since, 30, f"the history read (seed {seed})")
        for i, chunk in enumerate(chunks):
            fake.set(drop_budget=rng.randrange(1, served_size(chunk)))
            fake.append(chunk)
            wait_for(partial(reached, fake, "drops", i + 1), 20, f"drop {i + 1} (seed {seed})")
        samples = settle(s, fake, since, 30, f"after 20 drops (seed {seed})")
        assert counter(samples, "smllm_source_reconnects_total") >= 20
        entries_once(samples, fake)
        assert counter(samples, "smllm_parse_errors_total") == 0
        assert requests(samples) > 40
        followers = [c for c in fake.stat("commands") if "--follow" in c]
        assert len(followers) >= 21 and "--after-cursor" in followers[-1], followers[-3:]


def test_server_that_stops_answering_is_noticed_by_keepalive(
    fake: FakeServer, tmp_path: Path
) -> None:
    now = now_us()
    since = now - 40 * MINUTE
    journal = Journal()
    fake.append(journal.items(3, since, since + 20 * MINUTE))
    node = ssh_node(fake, tmp_path)
    with DaemonThread(make_daemon(tmp_path, since, node)) as d, watch(d) as s:
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
    fake: FakeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = now_us()
    since = now - 40 * MINUTE
    journal = Journal()
    fake.append(journal.items(5, since, since + 20 * MINUTE))
    message = "Failed to iterate through journal: Bad message"
    node = ssh_node(fake, tmp_path)
    with DaemonThread(make_daemon(tmp_path, since, node)) as d, watch(d) as s:
        settle(s, fake, since, 30, "the history read")
        for seed in (6, 7):
            fake.set(fail_next=message)
            fake.append(journal.items(seed, now + seed * MINUTE * 10, now + seed * MINUTE * 11))
            wait_for(partial(reached, fake, "failures", seed - 5), 15, "journalctl failed")
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
    *(  # poison times: beyond 64 bits, and beyond what a time can be
        b'{"__CURSOR":"s=p;i=%d","__REALTIME_TIMESTAMP":"%s","_PID":"4242","MESSAGE":'
        b'"slot print_timing: id  0 | task 9 |       total time =    10.00 ms /     5 tokens"}'
        % (i, t)
        for i, t in enumerate((b"18446744073709551616", b"9999999999999999999", b"-1"))
    ),
]
# the entries of GARBAGE that may hold a request, so are parse errors
GARBAGE_ERRORS = sum(1 for g in GARBAGE if any(k.encode() in g for k in KEYWORDS_TEXT))


def test_garbage_and_truncated_json_lines_count_as_parse_errors_only(
    fake: FakeServer, tmp_path: Path
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
    with DaemonThread(make_daemon(tmp_path, since, node)) as d, watch(d) as s:
        samples = settle(s, fake, since, 30, "history with garbage read")
        assert counter(samples, "smllm_parse_errors_total") == errors
        clean = report.build(
            {"a": [truth(history, "a", since)]},
            default_settings(KINDS),
            since,
            round((sample(samples, "smllm_accounted_until_timestamp_seconds") or 0) * SECOND),
        ).snapshot
        assert requests(samples) == sum(c.requests for c in clean.nodes[0].kinds.values()) > 20
        # more garbage while following, then more entries
        fake.append([Item(raw=g) for g in GARBAGE])
        fake.append(journal.items(9, now + 10 * MINUTE, now + 20 * MINUTE))
        samples = settle(s, fake, since, 30, "garbage while following")
        assert counter(samples, "smllm_parse_errors_total") == errors + GARBAGE_ERRORS
        assert counter(samples, "smllm_source_reconnects_total") == 0


def test_server_refusing_output_fields_and_grep(fake: FakeServer, tmp_path: Path) -> None:
    fake.set(old=True)
    now = now_us()
    since = now - 40 * MINUTE
    journal = Journal()
    fake.append(journal.items(10, since, since + 20 * MINUTE))
    node = ssh_node(fake, tmp_path)
    with DaemonThread(make_daemon(tmp_path, since, node)) as d, watch(d) as s:
        settle(s, fake, since, 30, "history read without --output-fields/--grep")
        fake.append(journal.items(11, now + 10 * MINUTE, now + 20 * MINUTE))
        samples = settle(s, fake, since, 30, "appended entries read")
        # every entry of the unit came over the wire, in full
        items = fake.items
        assert counter(samples, "smllm_source_entries_total") == sum(
            1 for it in items if it.entry is not None and it.entry["_SYSTEMD_UNIT"] == UNIT
        )
    commands: list[str] = fake.stat("commands")
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
    fake: FakeServer, tmp_path: Path
) -> None:
    """journalctl leaves U+2028 unescaped in its JSON (Python's str.splitlines splits there): the
    newest entry must still be read whole, or the source takes the journal for empty and says
    "caught up" before the backlog (which would then count as late)."""
    fake.set(old=True)  # no --grep: the newest entry is whatever the unit said last
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


def test_daemon_killed_with_sigkill_mid_stream(fake: FakeServer, tmp_path: Path) -> None:
    now = now_us()
    since = now - 40 * MINUTE
    journal = Journal()
    fake.append(journal.items(12, since, since + 20 * MINUTE))
    later = journal.items(13, now + 10 * MINUTE, now + 40 * MINUTE)
    node = ssh_node(fake, tmp_path)
    config = process_config(
        fake,
        node,
        since,
        keepalive_interval=0.3,
        keepalive_count_max=2,
        clock_allowance_seconds=AHEAD_ALLOWANCE_S,  # (`later` is ahead of the clock)
    )
    with DaemonProcess(tmp_path / "daemon", config) as d:
        d.start()
        with Watch(lambda: d.url if d.serving is not None else None) as s:
            settle(s, fake, since, 30, "the history read")
            for k, half in enumerate((later[: len(later) // 2], later[len(later) // 2 :])):
                before = counter(s.fresh(), "smllm_source_entries_total")
                fake.set(hold_budget=served_size(half) // 3)  # held mid-line: the kill lands there
                fake.append(half)
                wait_for(partial(reached, fake, "holds", k + 1), 15, "the stream held")
                wait_for(partial(served_more, s, before), 15, "some of the held stream served")
                d.kill()
                fake.set(released=k + 1)
                d.start()
            samples = settle(s, fake, since, 40, "everything once after two kills")
            entries_once(samples, fake)
            assert requests(samples) > 40
        d.stop()
    follows = [c for c in fake.stat("commands") if "--follow" in c]
    assert len(follows) == 3 and all("--after-cursor" in c for c in follows[1:]), follows
    for run in range(1, d.run + 1):
        assert "Traceback" not in d.log_text(run), d.log_text(run)[-3000:]


def served_more(s: Watch, entries: float) -> bool:
    """Has the daemon served (so checkpointed) more than `entries` entries?"""
    return counter(s.fresh(), "smllm_source_entries_total") > entries


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
    fake: FakeServer, tmp_path: Path
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
    served = [it.entry for it in selected(source_query(), fake.items) if it.entry is not None]
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
        assert plain_json("a", raw) == EntryDecoder("a").decode(raw), what
        assert plain_json("a", raw) is not None, what
    for what, raw in UNUSUAL.items():
        assert plain_json("a", raw) is None, what


def test_sigterm_while_the_node_stalls_stops_within_a_second(
    fake: FakeServer, tmp_path: Path
) -> None:
    """A peer that stops answering mid-stream (its TCP connection open, nothing more coming)
    holds no shutdown: the daemon exits within a second with its final checkpoint."""
    now = now_us()
    since = now - 40 * MINUTE
    fake.append(Journal().items(3, since, since + 20 * MINUTE))
    node = ssh_node(fake, tmp_path)
    # (keepalive does not notice it in time)
    config = process_config(fake, node, since, keepalive_interval=30)
    with DaemonProcess(tmp_path / "daemon", config) as d:
        d.start()
        wait_for(lambda: d.metrics().get(("smllm_source_up", (("node", "a"),))) == 1, 20, "up")
        fake.stall()
        sent_us = d.stop_within_a_second()
        assert d.checkpoint()["written_at_us"] >= sent_us
    fake.unstall()
