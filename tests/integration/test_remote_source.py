"""The `journal-remote` reader on real journal files: a collector's directory written by Debian's
systemd-journal-remote (support.journal_remote stamps each host's entries with its `_HOSTNAME`),
read through systemd-python, several nodes at once on one queue, as in the daemon.

Covered, each against a count of what was written: each node gets exactly its host's entries of
the unit (one file per host, and hosts behind NAT sharing one file, where the later hosts'
uploads lag), a host no node reads goes to nobody and is logged once, and the nodes of one
directory share one reader; an entry stored twice (journal-upload sends the entry at its saved
cursor again after a restart) is handed over once; resuming from a Batch's position, nodes that
start at once from their own places, a cursor of a vacuumed file; a host that moved to a new
address (two files); a node that joins late, and one that joins further on than the reader
stands; the reading node's task cancelled (mid-step and idle), and a node that leaves while its
Batches wait; entries appended while following, a new file appearing; a missing directory; a
host name with control characters; `window` for a report.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

from exporter.base import logs
from exporter.base.records import Batch, LogLine
from exporter.base.times import SECOND
from exporter.sources.base import SourceError
from exporter.sources.remote import RemoteNode

from support.journal_remote import Identity, host_export, write_host_journal
from support.journals import (
    LAUNCH,
    NOISE,
    OTHER,
    T0,
    UNIT,
    Entry,
    JournalWriter,
    count_in,
    ent,
    era_d_total,
    journal_json,
    lines_of,
    require_journal_tools,
)

if TYPE_CHECKING:
    from exporter.sources.remotereader import Collector

T = TypeVar("T")
WAIT_S = 15.0  # for what the reader must hand over (it rests 0.5 s once at the end)
HOSTS = {"a": "gpu-a", "b": "gpu-b", "c": "gpu-c"}  # node: its host (not its name)
PID = 2000
# Nodes that start at once join while the first node's task has the reader's first step under
# way: where that step stands when each joins varies, so those tests try several times.
TRIES = 20


@pytest.fixture(autouse=True)
def journal_tools() -> None:
    """systemd-journal-remote, journalctl and systemd-python, or fail in CI / skip elsewhere."""
    require_journal_tools()


# -- what is written --------------------------------------------------------------------------


def index(node: str) -> int:
    return sorted(HOSTS).index(node)


def who(node: str) -> Identity:
    return Identity.of(HOSTS[node])


def requests(node: str, n: int, start: int = 0) -> list[Entry]:
    """`n` era D requests of `node`'s host, one a second from T0 + `start` seconds: a launch
    line, noise, another unit's line, the total line. Its PID and task numbers tell the hosts'
    lines apart; the hosts' clocks are a millisecond apart."""
    k = index(node)
    pid = PID + k
    out = []
    for i in range(start, start + n):
        t = T0 + i * SECOND + k * 1000
        task = 1000 * (k + 1) + i
        out += [
            ent(t, LAUNCH.format(task), pid=pid),
            ent(t + 10, NOISE, pid=pid),
            ent(t + 20, LAUNCH.format(task), OTHER, pid=pid + 100),
            ent(t + 400_000, era_d_total(task, 500 + i, 400_000), pid=pid),
        ]
    return out


def unit(entries: Sequence[Entry]) -> list[Entry]:
    """The entries a node reads: its unit's."""
    return [e for e in entries if e.unit == UNIT]


def file_of(directory: Path, node: str) -> Path:
    """Where the collector keeps what `node`'s host uploads from its own address."""
    return directory / f"remote-10.77.0.{index(node) + 2}.journal"


SHARED = "remote-192.0.2.1.journal"  # hosts behind one NAT address


def lay_out(directory: Path, layout: str, written: dict[str, list[Entry]]) -> None:
    """Each node's host's entries as a collector stores them: `own`, one file per host; `nat`,
    every host in one file, in uploads of a quarter each, the later hosts' uploads one round
    behind the first's (their entries of a time come after the first host's newer ones)."""
    if layout == "own":
        for node, entries in written.items():
            write_host_journal(file_of(directory, node), entries, who(node))
        return
    quarters = {
        n: [e[len(e) * q // 4 : len(e) * (q + 1) // 4] for q in range(4)]
        for n, e in written.items()
    }
    first, *rest = written
    for r in range(5):
        for node in (first, *rest):
            q = r if node == first else r - 1
            if 0 <= q < 4:
                write_host_journal(directory / SHARED, quarters[node][q], who(node))


def unit_cursors(path: Path, node: str) -> list[str]:
    """The places of `node`'s host's entries of the unit in `path`, in the file's order, from
    the cursors journalctl gives (a position names each so: `s=ID;i=SEQNUM;t=TIME`)."""
    return [
        short(str(r["__CURSOR"]))
        for r in journal_json("--file", str(path))
        if r.get("_HOSTNAME") == HOSTS[node] and r.get("_SYSTEMD_UNIT") == UNIT
    ]


def short(cursor: str) -> str:
    fields = dict(part.split("=", 1) for part in cursor.split(";"))
    return f"s={fields['s']};i={fields['i']};t={fields['t']}"


def newest(position: str) -> str:
    """The newest place a position names (it names one in each file read from, newest last)."""
    return position.rsplit(maxsplit=1)[-1] if position else ""


class HostWriter(JournalWriter):
    """One systemd-journal-remote kept running on a file of the collector's: entries written
    land in it as they come, each stamped as its host's (support.journal_remote.host_export)."""

    def write_as(self, node: str, entries: Sequence[Entry]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(host_export(entries, who(node)))
        self.proc.stdin.flush()
        self.written += len(entries)


@contextlib.contextmanager
def writing(path: Path) -> Iterator[HostWriter]:
    writer = HostWriter(path)
    try:
        yield writer
        writer.close()
    finally:
        writer.kill()


# -- the reader, several nodes on one queue ---------------------------------------------------


def node(directory: Path, name: str) -> RemoteNode:
    return RemoteNode(name, UNIT, directory, HOSTS[name])


def collectors() -> list[Collector]:
    from exporter.sources import remotereader

    return remotereader.collectors()


def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps of 7 entries, however many hosts: many Batches, many positions."""
    from exporter.sources import remotereader

    monkeypatch.setattr(remotereader, "BATCH", 7)
    monkeypatch.setattr(remotereader, "BATCH_PER_HOST", 0)


class Following:
    """Nodes followed at once, as the daemon does, every Batch on one queue; gathered by node."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Batch] = asyncio.Queue()
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.got: dict[str, list[Batch]] = defaultdict(list)

    def start(self, n: RemoteNode, since_us: int = 0, position: str = "") -> None:
        from exporter.sources import remotereader

        source = remotereader.follow(n, since_us, position)
        self.tasks[n.name] = asyncio.create_task(source.run(self.queue), name=n.name)

    def _take(self) -> None:
        while not self.queue.empty():
            b = self.queue.get_nowait()
            self.got[b.node].append(b)

    async def until(self, check: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
        """Gather Batches until `check` holds; fail after `timeout` seconds, or when a node's
        task ends by itself."""
        deadline = time.monotonic() + timeout
        while True:
            self._take()
            if check():
                return
            for name, task in self.tasks.items():
                if task.done() and not task.cancelled():
                    pytest.fail(f"node {name}'s task ended: {task.exception()!r}")
            left = deadline - time.monotonic()
            if left <= 0:
                seen = {n: (self.entries(n), b[-1].caught_up) for n, b in self.got.items() if b}
                pytest.fail(f"timed out after {timeout} s waiting for {what}: {seen}")
            with contextlib.suppress(TimeoutError):
                b = await asyncio.wait_for(self.queue.get(), min(left, 0.2))
                self.got[b.node].append(b)

    async def read(self, want: dict[str, int], what: str = "every entry written") -> None:
        """Until each node of `want` has that many entries and its last Batch was read to the
        end of the files (so whatever it was handed twice would have come before)."""
        await self.until(lambda: all(self.settled(n, k) for n, k in want.items()), what)

    def settled(self, name: str, n: int) -> bool:
        got = self.got[name]
        return bool(got) and got[-1].caught_up and self.entries(name) >= n

    def entries(self, name: str) -> int:
        return sum(b.entries for b in self.got[name])

    def lines(self, name: str) -> list[LogLine]:
        return [x for b in self.got[name] for x in b.lines]

    def newest(self, name: str) -> int | None:
        times = [b.newest_us for b in self.got[name] if b.newest_us is not None]
        return times[-1] if times else None

    def position(self, name: str) -> str:
        return newest(next(b.position for b in reversed(self.got[name]) if b.position))

    async def cancel(self, name: str) -> None:
        task = self.tasks.pop(name)
        task.cancel()
        await asyncio.wait({task}, timeout=WAIT_S)
        assert task.cancelled(), f"node {name}'s task did not end on cancellation"
        self._take()

    async def close(self) -> None:
        for name in list(self.tasks):
            await self.cancel(name)


def follow(main: Callable[[Following], Awaitable[T]]) -> T:
    """Run `main` with nodes to follow on a new event loop; every node's task cancelled after.
    No reader is left behind."""

    async def go() -> T:
        f = Following()
        try:
            return await main(f)
        finally:
            await f.close()

    result = asyncio.run(go())
    assert collectors() == [], "a reader outlived its nodes"
    return result


def the_collector() -> Collector:
    (only,) = collectors()
    return only


async def joined(*hosts: str) -> Collector:
    """The one reader, once the nodes of `hosts` joined it (their tasks ran)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        found = collectors()
        if len(found) == 1 and set(hosts) <= set(the_collector().hosts):
            return the_collector()
        if time.monotonic() > deadline:
            pytest.fail(f"the nodes of {hosts} never joined a reader: {found}")
        await asyncio.sleep(0.001)


def check_node(f: Following, name: str, written: Sequence[Entry]) -> None:
    """`name` got exactly its host's entries of the unit in `written`, once each, in order."""
    mine = unit(written)
    assert f.entries(name) == len(mine), name
    assert f.lines(name) == lines_of(written, name), name
    assert f.newest(name) == mine[-1].time_us, name


# -- 1. each node its host's entries; one reader --------------------------------------------------


@pytest.mark.parametrize("layout", ["own", "nat"])
def test_each_node_gets_its_hosts_entries_from_one_shared_reader(
    tmp_path: Path, layout: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.sources.remotereader")
    written = {n: requests(n, 12) for n in HOSTS}
    lay_out(tmp_path, layout, written)
    assert len(list(tmp_path.glob("*.journal"))) == (3 if layout == "own" else 1)

    async def main(f: Following) -> Following:
        f.start(node(tmp_path, "a"))
        f.start(node(tmp_path, "b"))
        await f.read({n: len(unit(written[n])) for n in "ab"})
        collector = the_collector()
        assert (collector.directory, collector.unit) == (tmp_path, UNIT)
        assert set(collector.hosts) == {"gpu-a", "gpu-b"}
        await f.cancel("a")
        assert set(the_collector().hosts) == {"gpu-b"}
        await f.cancel("b")
        assert collectors() == []
        return f

    f = follow(main)
    for name in "ab":
        check_node(f, name, written[name])
        if layout == "own":
            assert f.position(name) == unit_cursors(file_of(tmp_path, name), name)[-1]
        else:
            assert f.position(name) == unit_cursors(tmp_path / SHARED, name)[-1]
    assert set(f.got) == {"a", "b"}  # gpu-c's entries: to nobody
    unread = f"journal-remote {tmp_path}: host gpu-c is there, but no node reads it"
    assert unread in [r.getMessage() for r in caplog.records]


def test_only_a_host_no_node_reads_is_logged_as_unread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The nodes start at once, as in the daemon: the hosts of nodes that join while the first
    step reads are not said to be read by no node."""
    caplog.set_level(logging.INFO, logger="exporter.sources.remotereader")
    written = {n: requests(n, 3) for n in HOSTS}
    lay_out(tmp_path, "own", written)

    async def main(f: Following) -> None:
        for name in "ab":
            f.start(node(tmp_path, name))
        await f.read({n: len(unit(written[n])) for n in "ab"})

    for attempt in range(TRIES):
        caplog.clear()
        follow(main)
        said = [r.getMessage() for r in caplog.records if "no node reads it" in r.getMessage()]
        unread = f"journal-remote {tmp_path}: host gpu-c is there, but no node reads it"
        assert said == [unread], attempt


# -- 2. an entry stored twice -----------------------------------------------------------------


@pytest.mark.parametrize("when", ["before", "while following", "after a restart"])
def test_an_entry_stored_twice_is_handed_over_once(tmp_path: Path, when: str) -> None:
    """journal-upload, started again, sends the entry at its saved cursor again (the last one
    it sent: here a total line), and journal-remote stores it twice."""
    first, second = requests("a", 5), requests("a", 5, start=5)
    again = first[-1]
    assert again.unit == UNIT and b"total time" in again.message
    path = file_of(tmp_path, "a")
    others = requests("b", 10)
    write_host_journal(file_of(tmp_path, "b"), others, who("b"))
    write_host_journal(path, first, who("a"))

    def upload_again() -> None:
        write_host_journal(path, [again], who("a"))
        write_host_journal(path, second, who("a"))
        assert count_in(path) == len(first) + 1 + len(second)  # stored twice

    async def session(position: str, want_a: int, upload: bool = False) -> Following:
        f = Following()
        try:
            f.start(node(tmp_path, "b"))
            f.start(node(tmp_path, "a"), position=position)
            await f.read({"a": want_a, "b": len(unit(others))})
            if upload:
                await asyncio.to_thread(upload_again)
                await f.read({"a": len(unit(first + second))}, "the entries uploaded again")
            return f
        finally:
            await f.close()

    if when == "before":
        upload_again()
        f = asyncio.run(session("", len(unit(first + second))))
        check_node(f, "a", first + second)
    elif when == "while following":
        f = asyncio.run(session("", len(unit(first)), upload=True))
        check_node(f, "a", first + second)
    else:
        before = asyncio.run(session("", len(unit(first))))
        check_node(before, "a", first)
        upload_again()
        # resumed at the first copy, which the second comes right after in the file
        f = asyncio.run(session(before.position("a"), len(unit(second))))
        check_node(f, "a", second)
    check_node(f, "b", others)
    assert collectors() == []


# -- 3. resuming from a position ----------------------------------------------------------------


def path_of(directory: Path, layout: str, name: str) -> Path:
    return file_of(directory, name) if layout == "own" else directory / SHARED


def rest(directory: Path, layout: str, name: str, written: Sequence[Entry], at: str) -> list[Entry]:
    """`name`'s entries of the unit after the one at cursor `at` (found with journalctl)."""
    k = unit_cursors(path_of(directory, layout, name), name).index(at)
    return unit(written)[k + 1 :]


def positions(f: Following, name: str) -> list[str]:
    """The positions `name`'s Batches gave, each once, the last one's left out."""
    out = [newest(b.position) for b in f.got[name] if b.entries]
    return list(dict.fromkeys(out[:-1]))


async def read_all(f: Following, want: dict[str, int]) -> Following:
    await f.read(want)
    return f


@pytest.mark.parametrize("layout", ["own", "nat"])
def test_resuming_from_a_batchs_position_gives_exactly_the_rest(
    tmp_path: Path, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:

    small_steps(monkeypatch)  # many Batches, many positions
    written = {n: requests(n, 10) for n in HOSTS}
    lay_out(tmp_path, layout, written)

    def start_all(f: Following) -> Awaitable[Following]:
        for name in "ab":
            f.start(node(tmp_path, name))
        return read_all(f, {n: len(unit(written[n])) for n in "ab"})

    whole = follow(start_all)
    for name in "ab":
        check_node(whole, name, written[name])
    for name in "ab":
        places = positions(whole, name)
        assert len(places) > 3
        for at in places:
            want = rest(tmp_path, layout, name, written[name], at)

            def resume(
                f: Following, name: str = name, at: str = at, n: int = len(want)
            ) -> Awaitable[Following]:
                f.start(node(tmp_path, name), position=at)
                return read_all(f, {name: n})

            got = follow(resume)
            assert got.lines(name) == lines_of(want, name), (name, at)
            assert got.entries(name) == len(want), (name, at)


def test_nodes_that_start_at_once_from_their_own_places_get_exactly_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon started again: every node resumes from its own position at once, the first
    node to start further on than the others."""

    small_steps(monkeypatch)
    written = {n: requests(n, 10) for n in HOSTS}
    lay_out(tmp_path, "own", written)

    def start_all(f: Following) -> Awaitable[Following]:
        for name in HOSTS:
            f.start(node(tmp_path, name))
        return read_all(f, {n: len(unit(written[n])) for n in HOSTS})

    whole = follow(start_all)
    at = {"a": positions(whole, "a")[-1], "b": positions(whole, "b")[0], "c": ""}
    want = {n: rest(tmp_path, "own", n, written[n], at[n]) for n in "ab"}
    want["c"] = unit(written["c"])

    def resume(f: Following) -> Awaitable[Following]:
        for name in HOSTS:  # a first: it reads for all
            f.start(node(tmp_path, name), position=at[name])
        return read_all(f, {n: len(w) for n, w in want.items()})

    for attempt in range(TRIES // 4):  # (each try: a longer read)
        got = follow(resume)
        for name in HOSTS:
            assert got.lines(name) == lines_of(want[name], name), (attempt, name)
            assert got.entries(name) == len(want[name]), (attempt, name)


@pytest.mark.parametrize("kept_from", [1, 9])
def test_a_cursor_of_a_vacuumed_file_resumes_by_its_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept_from: int
) -> None:
    """The host's file was vacuumed; its entries from second `kept_from` on are in a file of a
    new address (uploaded again: the same entries, other cursors), from before the saved
    place (1) or only after it (9)."""

    small_steps(monkeypatch)
    old, new = file_of(tmp_path, "a"), tmp_path / "remote-10.77.9.9.journal"
    written = requests("a", 10)
    write_host_journal(old, written, who("a"))
    write_host_journal(file_of(tmp_path, "b"), requests("b", 6), who("b"))  # (read by no node)

    def start(f: Following) -> Awaitable[Following]:
        f.start(node(tmp_path, "a"))
        return read_all(f, {"a": len(unit(written))})

    first = follow(start)
    places = positions(first, "a")
    at = places[len(places) // 2]
    place_us = unit(written)[unit_cursors(old, "a").index(at)].time_us
    old.unlink()
    later = requests("a", 14 - kept_from, start=kept_from)
    write_host_journal(new, later, who("a"))
    want = [e for e in unit(later) if e.time_us > place_us]
    assert (unit(later)[0].time_us <= place_us) == (kept_from == 1)

    def resume(f: Following) -> Awaitable[Following]:
        f.start(node(tmp_path, "a"), position=at)
        return read_all(f, {"a": len(want)})

    got = follow(resume)
    assert got.lines("a") == lines_of(want, "a")
    assert got.entries("a") == len(want)


# -- 4. a host that moved to a new address: two files -----------------------------------------


MOVED = ("remote-10.77.1.1.journal", "remote-10.77.1.2.journal")


@pytest.mark.parametrize("how", ["from since", "from a place in the old file", "window"])
@pytest.mark.parametrize("new_name", MOVED)
def test_a_host_that_moved_to_a_new_address_is_read_from_both_files(
    tmp_path: Path, new_name: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its entries up to the move in the old address's file, the later ones in the new one's.
    Each file as the new one, so that whichever order the directory lists them in comes."""

    small_steps(monkeypatch)
    (old_name,) = set(MOVED) - {new_name}
    before, after = requests("a", 6), requests("a", 6, start=6)
    write_host_journal(tmp_path / old_name, before, who("a"))
    write_host_journal(tmp_path / new_name, after, who("a"))
    write_host_journal(file_of(tmp_path, "b"), requests("b", 12), who("b"))  # (read by no node)

    if how == "window":
        lines = window_lines(node(tmp_path, "a"), T0, T0 + 20 * SECOND)
        assert lines == lines_of(before + after, "a")
        return
    at = unit_cursors(tmp_path / old_name, "a")[4] if how != "from since" else ""
    want = unit(before)[5:] + unit(after) if at else unit(before + after)

    def start(f: Following) -> Awaitable[Following]:
        f.start(node(tmp_path, "a"), position=at)
        return read_all(f, {"a": len(want)})

    got = follow(start)
    assert got.lines("a") == lines_of(want, "a")
    assert got.entries("a") == len(want)


def window_lines(n: RemoteNode, since_us: int, until_us: int) -> list[LogLine]:
    from exporter.sources import remotereader

    async def read() -> list[Batch]:
        return [b async for b in remotereader.window(n, since_us, until_us)]

    batches = asyncio.run(read())
    assert {b.node for b in batches} == {n.name}
    return [x for b in batches for x in b.lines]


# -- 5. a node that joins late ------------------------------------------------------------------


@pytest.mark.parametrize("since_s", [0.0, 4.5])
@pytest.mark.parametrize("layout", ["own", "nat"])
def test_a_node_that_joins_late_gets_its_entries_and_the_others_nothing_twice(
    tmp_path: Path, layout: str, since_s: float
) -> None:
    written = {n: requests(n, 10) for n in "ab"}
    lay_out(tmp_path, layout, written)
    since = T0 + int(since_s * SECOND)
    late = [e for e in unit(written["b"]) if e.time_us >= since]
    more = {n: requests(n, 3, start=10) for n in "ab"}

    async def main(f: Following) -> Following:
        f.start(node(tmp_path, "a"))
        await f.read({"a": len(unit(written["a"]))}, "a caught up alone")
        f.start(node(tmp_path, "b"), since_us=since)
        await f.read({"b": len(late)}, "b, which joined late")
        # (a reads for both: its Batches of the step that read b's come before b's)
        assert f.entries("a") == len(unit(written["a"]))
        for name in "ab":
            path = path_of(tmp_path, layout, name)
            await asyncio.to_thread(write_host_journal, path, more[name], who(name))
        await f.read(
            {"a": len(unit(written["a"] + more["a"])), "b": len(late) + len(unit(more["b"]))}
        )
        return f

    f = follow(main)
    check_node(f, "a", written["a"] + more["a"])
    assert f.lines("b") == lines_of(late + more["b"], "b")
    assert f.entries("b") == len(late) + len(unit(more["b"]))


def test_a_node_that_joins_further_on_makes_no_other_skip_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b reads a long backlog in small steps; a joins meanwhile from a place near the end of
    its own file: b still gets every entry (the reader goes back for a node, never forward)."""

    small_steps(monkeypatch)
    written = {n: requests(n, 300) for n in "ab"}
    lay_out(tmp_path, "own", written)
    at = unit_cursors(file_of(tmp_path, "a"), "a")[-10]
    want_a = unit(written["a"])[-9:]

    async def main(f: Following) -> Following:
        f.start(node(tmp_path, "b"))
        await f.until(lambda: f.entries("b") > 0, "b's first Batch")
        assert not f.got["b"][-1].caught_up and f.entries("b") < len(unit(written["b"])) // 2
        f.start(node(tmp_path, "a"), position=at)
        await f.read({"a": len(want_a), "b": len(unit(written["b"]))})
        return f

    f = follow(main)
    check_node(f, "b", written["b"])
    assert f.lines("a") == lines_of(want_a, "a")
    assert f.entries("a") == len(want_a)


# -- 6. the reading node's task cancelled: another takes over -------------------------------------


async def reading(collector: Collector) -> None:
    """Until the reader's worker thread is in a step (it holds the files' lock)."""
    deadline = time.monotonic() + WAIT_S
    while not collector.busy:
        if time.monotonic() > deadline:
            pytest.fail("the reader never started a step")
        await asyncio.sleep(0.001)


def test_cancelling_the_reading_nodes_task_hands_the_reader_over(tmp_path: Path) -> None:
    """a's task reads for all: cancelled mid-step (the step it started goes to the next
    reader), then the next one's cancelled while it waits; the last node goes on alone with the
    entries appended live, nothing lost, nothing twice."""
    written = {n: requests(n, 400) for n in HOSTS}  # (the first step takes a while)
    lay_out(tmp_path, "own", written)
    live = {n: [requests(n, 1, start=400 + r) for r in range(4)] for n in HOSTS}

    async def main(f: Following) -> tuple[Following, str, str]:
        for name in HOSTS:
            f.start(node(tmp_path, name))
        collector = await joined(*HOSTS.values())
        await reading(collector)
        assert collector.runner is not None and collector.runner.node == "a"
        await f.cancel("a")
        await f.read({n: len(unit(written[n])) for n in "bc"}, "b and c after a's task ended")
        assert the_collector() is collector and set(collector.hosts) == {"gpu-b", "gpu-c"}
        assert collector.runner is not None
        second = collector.runner.node
        last = ({"b", "c"} - {second}).pop()
        with contextlib.ExitStack() as stack:
            writers = {n: stack.enter_context(writing(file_of(tmp_path, n))) for n in HOSTS}
            for r in range(4):
                if r == 2:
                    await f.cancel(second)  # idle: it waits for new entries
                    assert collector.runner is None or collector.runner.node == last
                for n, w in writers.items():
                    await asyncio.to_thread(w.write_as, n, live[n][r])
                want = unit(written[last] + [e for x in live[last][: r + 1] for e in x])
                await f.read({last: len(want)}, f"round {r} appended live")
        assert collector.runner is not None and collector.runner.node == last
        return f, second, last

    f, second, last = follow(main)
    check_node(f, last, written[last] + [e for x in live[last] for e in x])
    for name in ("a", second):  # what they got before their tasks ended: in order, once
        whole = lines_of(written[name] + [e for x in live[name] for e in x], name)
        assert f.lines(name) == whole[: len(f.lines(name))], name
    assert f.entries(second) >= len(unit(written[second]))


def test_the_reading_node_cancelled_while_its_queue_is_full_loses_no_other_nodes_batch(
    tmp_path: Path,
) -> None:
    """The reading node's task waits for room for its own Batch (its queue is full) and is
    cancelled there: the other nodes' Batches of that step were handed on first, so b still
    gets every entry once (they were read: b's places moved on past them)."""
    write_host_journal(file_of(tmp_path, "a"), requests("a", 2), who("a"))
    write_host_journal(file_of(tmp_path, "b"), requests("b", 3), who("b"))
    want = len(unit(requests("b", 3)))

    async def main() -> list[Batch]:
        from exporter.sources import remotereader

        full: asyncio.Queue[Batch] = asyncio.Queue(maxsize=1)  # (nobody takes from it)
        got: asyncio.Queue[Batch] = asyncio.Queue()
        a = asyncio.create_task(remotereader.follow(node(tmp_path, "a"), 0, "").run(full))
        collector = await joined("gpu-a")
        deadline = time.monotonic() + WAIT_S
        while not full.full():  # (a's first Batch)
            assert time.monotonic() < deadline, "a's first Batch never came"
            await asyncio.sleep(0.01)
        more = requests("a", 2, start=2)
        await asyncio.to_thread(write_host_journal, file_of(tmp_path, "a"), more, who("a"))
        b = asyncio.create_task(remotereader.follow(node(tmp_path, "b"), 0, "").run(got))
        await joined("gpu-a", "gpu-b")
        host_a = collector.hosts["gpu-a"]
        # the step that read b's entries read a's new ones too: a's Batch waits for room
        while not (
            collector.hosts["gpu-b"].places
            and max(p.time_us for p in host_a.places.values()) == unit(more)[-1].time_us
            and collector._pending is None
        ):
            assert time.monotonic() < deadline, "the reader never read b's entries"
            await asyncio.sleep(0.01)
        assert collector.runner is host_a
        a.cancel()
        await asyncio.wait({a}, timeout=WAIT_S)
        batches: list[Batch] = []
        while sum(x.entries for x in batches) < want or not batches[-1].caught_up:
            left = deadline - time.monotonic()
            assert left > 0, f"b got {sum(x.entries for x in batches)} of {want} entries"
            with contextlib.suppress(TimeoutError):
                batches.append(await asyncio.wait_for(got.get(), min(left, 0.2)))
        b.cancel()
        await asyncio.wait({b}, timeout=WAIT_S)
        return batches

    batches = asyncio.run(main())
    assert sum(x.entries for x in batches) == want
    assert [x for b in batches for x in b.lines] == lines_of(requests("b", 3), "b")
    assert collectors() == []


def test_a_node_that_leaves_while_its_batches_wait_stops_no_other(tmp_path: Path) -> None:
    """The reader waits for a node's task to take its Batches (its queue is full); that node
    is removed (its task cancelled): the others go on."""
    write_host_journal(file_of(tmp_path, "a"), requests("a", 2), who("a"))
    write_host_journal(file_of(tmp_path, "b"), requests("b", 2), who("b"))
    more = requests("a", 3, start=2)

    async def main(f: Following) -> Following:
        from exporter.sources import remotereader

        f.start(node(tmp_path, "a"))
        await f.read({"a": len(unit(requests("a", 2)))}, "a caught up")
        full: asyncio.Queue[Batch] = asyncio.Queue(maxsize=1)  # nobody takes from it
        b = asyncio.create_task(remotereader.follow(node(tmp_path, "b"), 0, "").run(full))
        collector = await joined("gpu-b")
        k = 2
        deadline = time.monotonic() + WAIT_S
        while collector.hosts["gpu-b"].inbox.qsize() < 2:  # then the reader waits for b
            assert time.monotonic() < deadline, "b's Batches never piled up"
            entries = requests("b", 1, start=k)
            await asyncio.to_thread(write_host_journal, file_of(tmp_path, "b"), entries, who("b"))
            k += 1
            host = collector.hosts["gpu-b"]
            while max((p.time_us for p in host.places.values()), default=0) < entries[-1].time_us:
                assert time.monotonic() < deadline, "b's entries were never read"
                await asyncio.sleep(0.01)
        b.cancel()
        await asyncio.wait({b}, timeout=WAIT_S)
        assert b.cancelled()
        await asyncio.to_thread(write_host_journal, file_of(tmp_path, "a"), more, who("a"))
        await f.read({"a": len(unit(requests("a", 2) + more))}, "a's entries after b left")
        return f

    f = follow(main)
    check_node(f, "a", requests("a", 2) + more)


# -- 7. entries appended while following; a new file ----------------------------------------------


def test_entries_appended_while_following_arrive(tmp_path: Path) -> None:
    """Hosts a and b behind one address (one file, journal-remote writing as they come), and
    host c's file appearing later."""
    rounds = {n: [requests(n, 2, start=2 * r) for r in range(4)] for n in HOSTS}

    def upto(name: str, r: int) -> list[Entry]:
        """`name`'s entries written up to round `r` (c's from round 2 on)."""
        return [e for x in rounds[name][2 if name == "c" else 0 : r + 1] for e in x]

    async def main(f: Following) -> Following:
        for name in HOSTS:
            f.start(node(tmp_path, name))
        await f.read(dict.fromkeys(HOSTS, 0), "an empty directory read")
        with writing(tmp_path / SHARED) as shared:
            for r in range(4):
                for name in "ab":
                    await asyncio.to_thread(shared.write_as, name, rounds[name][r])
                if r >= 2:  # c starts to upload (from an address of its own)
                    await asyncio.to_thread(
                        write_host_journal, file_of(tmp_path, "c"), rounds["c"][r], who("c")
                    )
                want = {n: len(unit(upto(n, r))) for n in HOSTS}
                await f.read(want, f"round {r}")
        return f

    f = follow(main)
    check_node(f, "a", upto("a", 3))
    check_node(f, "b", upto("b", 3))
    check_node(f, "c", upto("c", 3))


def test_a_file_rotated_while_read_is_read_to_its_end_and_its_successor_from_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collector rotates a file: it renames it (`NAME@...`) and writes on in a new file of
    the old name. The renamed one is read to its end (it is not opened again by its name, which
    is now the new file's), then closed; the new one is read from its start."""
    from exporter.sources import remotefiles

    monkeypatch.setattr(remotefiles, "REMAP_S", 0.0)  # (opened again at every end reached)
    small_steps(monkeypatch)
    first, second = requests("a", 20), requests("a", 10, start=20)
    path = file_of(tmp_path, "a")
    write_host_journal(path, first, who("a"))

    async def main(f: Following) -> Following:
        f.start(node(tmp_path, "a"))
        await f.until(lambda: f.entries("a") > 0, "a's first Batch")
        path.rename(path.with_name(path.stem + "@0000-0000.journal"))
        await asyncio.to_thread(write_host_journal, path, second, who("a"))
        await f.read({"a": len(unit(first + second))})
        return f

    f = follow(main)
    check_node(f, "a", first + second)


def test_a_file_opened_again_mid_read_loses_and_repeats_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file is opened again every few entries read (its mapped pages let go), here every 3,
    in the middle of steps of a shared file, between entries of other units and hosts:
    every node still gets each of its entries once, in order."""
    from exporter.sources import remotefiles

    monkeypatch.setattr(remotefiles, "REMAP_ENTRIES", 3)
    monkeypatch.setattr(remotefiles, "REMAP_MIN", 1)
    small_steps(monkeypatch)
    reopened = [0]
    reopen = remotefiles.Files._reopen

    def counted(self: remotefiles.Files, opened: remotefiles.Opened) -> None:
        was = opened.reader
        reopen(self, opened)
        reopened[0] += opened.reader is not was  # (opened again, not given up on)

    monkeypatch.setattr(remotefiles.Files, "_reopen", counted)
    written = {n: requests(n, 6) for n in HOSTS}
    lay_out(tmp_path, "nat", written)

    async def main(f: Following) -> Following:
        for name in "ab":
            f.start(node(tmp_path, name))
        await f.read({n: len(unit(written[n])) for n in "ab"})
        return f

    f = follow(main)
    for name in "ab":
        check_node(f, name, written[name])
    # (opened again every 3 entries read, within the steps of 7)
    assert reopened[0] >= sum(len(unit(e)) for e in written.values()) // 3 - 2


def test_a_backlog_is_read_in_slices_of_time_every_file_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While files are behind, a step reads each only up to SLICE_US past the one furthest
    behind: a's and c's backlogs (files of their own, from T0) come in steps that keep them
    together; b's file begins past the first slice (its first entry is stepped back from)."""
    from exporter.sources import remotefiles

    monkeypatch.setattr(remotefiles, "SLICE_US", 5 * SECOND)
    monkeypatch.setattr(remotefiles, "MAX_SLICE_US", 5 * SECOND)  # (no step reads enough here
    # to keep its slice from growing: held to one size, each step's is known)
    written = {"a": requests("a", 40), "b": requests("b", 20, start=20), "c": requests("c", 40)}
    for name, entries in written.items():
        write_host_journal(file_of(tmp_path, name), entries, who(name))

    async def main(f: Following) -> Following:
        for name in HOSTS:
            f.start(node(tmp_path, name))
        await f.read({n: len(unit(e)) for n, e in written.items()})
        return f

    f = follow(main)
    for name, entries in written.items():
        check_node(f, name, entries)
    steps = {n: [b.newest_us for b in f.got[n] if b.newest_us is not None] for n in HOSTS}
    assert len(steps["a"]) >= 40 // 5 - 1, steps["a"]  # (not the whole backlog at once)
    for a_us, c_us in zip(steps["a"], steps["c"], strict=True):
        assert abs(a_us - c_us) <= 5 * SECOND
    assert steps["b"][0] >= T0 + 20 * SECOND


def test_a_long_backlog_is_read_in_slices_that_grow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long backlog of a quiet node (20 minutes, a request a second: 40 entries in 10 s): a
    step that reads little doubles the next one's slice, so it takes a few steps, not one
    every 10 s of it."""
    from exporter.sources import remotereader

    steps = [0]
    read = remotereader.Collector._read

    def counted(self: remotereader.Collector) -> remotereader.Step:
        steps[0] += 1
        return read(self)

    monkeypatch.setattr(remotereader.Collector, "_read", counted)
    written = requests("a", 1200)
    write_host_journal(file_of(tmp_path, "a"), written, who("a"))

    async def main(f: Following) -> Following:
        f.start(node(tmp_path, "a"))
        await f.read({"a": len(unit(written))})
        return f

    f = follow(main)
    check_node(f, "a", written)
    assert steps[0] <= 30, steps[0]  # (in slices of 10 s: 120 steps; doubling: about 10)


# -- 8. a missing directory; a host name with control characters --------------------------------


def test_a_missing_directory_fails_each_node_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "not-there"

    async def main() -> list[BaseException | None]:
        from exporter.sources import remotereader

        queue: asyncio.Queue[Batch] = asyncio.Queue()
        tasks = [
            asyncio.create_task(remotereader.follow(node(missing, n), 0, "").run(queue))
            for n in "ab"
        ]
        done, _ = await asyncio.wait(tasks, timeout=WAIT_S)
        for t in tasks:
            t.cancel()
        assert len(done) == 2, "the nodes' tasks did not end"
        assert queue.empty()
        return [t.exception() for t in tasks]

    errors = asyncio.run(main())
    for name, e in zip("ab", errors, strict=True):
        assert isinstance(e, SourceError), e
        assert str(e).startswith(f"node {name}: ") and str(missing) in str(e)
    assert collectors() == []


def test_a_host_name_with_control_characters_is_logged_escaped_and_read_by_no_node(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.sources.remotereader")
    hostile = "evil\x1b[2J\x1b]0;owned\x07\r\t\u009bhost\u2028"
    write_host_journal(
        tmp_path / "remote-10.77.0.66.journal",
        requests("c", 3),
        Identity(hostile, "0" * 32, "1" * 32),
    )
    write_host_journal(file_of(tmp_path, "a"), requests("a", 3), who("a"))

    def said() -> bool:
        return any("no node reads it" in r.getMessage() for r in caplog.records)

    async def main(f: Following) -> Following:
        f.start(node(tmp_path, "a"))
        await f.read({"a": len(unit(requests("a", 3)))})
        await f.until(said, "the unread host logged (at the step after it was met)")
        return f

    f = follow(main)
    check_node(f, "a", requests("a", 3))
    (record,) = [r for r in caplog.records if "no node reads it" in r.getMessage()]
    line = logs.TimeFormatter("%(levelname)s %(name)s: %(message)s").format(record)
    assert line == (
        f"INFO exporter.sources.remotereader: journal-remote {tmp_path}: host "
        "evil\\x1b[2J\\x1b]0;owned\\x07\\r\\t\\x9bhost\\u2028 is there, but no node reads it"
    )


# -- 9. window, for a report ----------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["own", "nat"])
def test_window_gives_the_nodes_entries_in_the_window(tmp_path: Path, layout: str) -> None:
    written = {n: requests(n, 12) for n in HOSTS}
    lay_out(tmp_path, layout, written)
    since, until = T0 + 3 * SECOND + 200_000, T0 + 8 * SECOND + 200_000  # mid-request
    for name in HOSTS:
        lines = window_lines(node(tmp_path, name), since, until)
        mine = lines_of(written[name], name)
        inside = [x for x in mine if since <= x.time_us <= until]
        assert lines[: len(inside)] == inside, name
        beyond = lines[len(inside) :]  # (a window may go on past `until`: the node's own)
        assert beyond == [x for x in mine if x.time_us > until][: len(beyond)], name
    assert window_lines(node(tmp_path, "a"), T0 + 20 * SECOND, T0 + 30 * SECOND) == []
