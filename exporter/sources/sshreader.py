"""Follows a node's journal over SSH: `journalctl -u UNIT -o json --follow` on the node.

The connection comes from `sources/sshconnect.py` (credentials, host keys, asyncssh). Every
argument of the remote command is quoted. What the node's journalctl supports
(`--output-fields`, `--grep`) is probed once per connection by trying it. The stream resumes
after the last cursor read (`--after-cursor`), or from `since` on a first start; the source
counts as caught up once it has read the entry that was newest, under the same filters, when the
stream started (at once when that entry is older than `since` on a first start: it will never
come). The remote journalctl is stopped by closing its channel (root sessions refuse signals).
What the node says on standard error comes into a message on one line, its control characters
escaped.

The follow stream is gathered (`sources/sshstream.py`): the source's task wakes only when the
queue is full, or at the end. Lines are framed, found and decoded by the line layer
(`sources/lines.py`), the same as a dump file's: compiled where built. `window` reads a past
window for the report the same way.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
from collections.abc import AsyncIterator
from dataclasses import dataclass

from exporter.base.logs import escape
from exporter.base.records import Batch
from exporter.base.times import SECOND
from exporter.parse.tokens import KEYWORDS
from exporter.sources.base import Progress, SourceError
from exporter.sources.entries import EntryDecoder, EntryError, cursor_time_us
from exporter.sources.lines import LineReader
from exporter.sources.ssh import SshNode
from exporter.sources.sshconnect import Completed, Connection, Env, connection, who
from exporter.sources.sshstream import READ_SIZE, FollowStream, loop_ticks

log = logging.getLogger(__name__)

TAIL_KEPT = 4096  # bytes of a partial line kept to find the newest entry's cursor in
SAID_CHARS = 300  # characters of what a remote command said that an error message shows
COMMAND_TIMEOUT_S = 60  # a probe or `-n 1` that hangs this long fails the connection
CURSOR_TIMEOUT_S = 30  # the saved cursor's entry, looked up
EXIT_TIMEOUT_S = 30  # a report's remote journalctl, after its output ended
FIELDS = "MESSAGE,_PID,__REALTIME_TIMESTAMP,__CURSOR"
# The parser's keywords as one PCRE2 alternation, for journalctl --grep.
GREP = "|".join(k.decode().replace("|", "\\|") for k in KEYWORDS)


@dataclass(frozen=True)
class Features:
    output_fields: bool
    grep: bool


def journalctl(node: SshNode, *args: str, features: Features | None = None) -> str:
    """The remote command line, every argument quoted."""
    # --all: without it journalctl writes a MESSAGE of 4096 bytes or more as null
    argv = ["journalctl", "--no-pager", "--all", "-u", node.unit, "-o", "json"]
    if node.journal_directory:
        argv += ["--directory", node.journal_directory]
    if features is not None and features.output_fields:
        argv.append(f"--output-fields={FIELDS}")
    if features is not None and features.grep:
        argv += ["--grep", GREP]
    return " ".join(shlex.quote(a) for a in [*argv, *args])


def remote_error(*outputs: object) -> str:
    """What a failed remote command said (its standard error, else its output: nologin writes
    `This account is currently not available.` there), in one line, without sshd's `Could not
    chdir to home directory` notice, its control characters escaped (`\\x1b`): the node's
    words cannot break the line or drive a terminal."""
    for out in outputs:
        text = out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out or "")
        lines = [
            line.strip()
            for line in text.splitlines()
            if line.strip() and not line.startswith("Could not chdir to home directory")
        ]
        if lines:
            return escape("; ".join(lines)[:SAID_CHARS])
    return "it printed nothing"


async def check_remote(conn: Connection, node: SshNode) -> None:
    """The remote journalctl runs at all (no option to blame yet): SourceError saying what the
    node answered when it does not (the account, the command, the journal directory)."""
    r = await conn.run(
        journalctl(node, "-n", "0"), check=False, timeout=COMMAND_TIMEOUT_S, encoding=None
    )
    if r.exit_status != 0:
        raise SourceError(
            f"{who(node)}: the remote journalctl "
            f"failed ({r.exit_status}): {remote_error(r.stderr, r.stdout)}"
        )


class SshSource:
    """One remote node's journal, followed; `run` hands Batches to a queue until cancelled."""

    def __init__(
        self,
        node: SshNode,
        *,
        since_us: int,
        position: str = "",
        env: Env = os.environ,
    ) -> None:
        self.node = node
        self.since_us = since_us
        self.cursor = position
        self.env = env
        self._reader = LineReader(
            node.name, since_us=since_us, where=f"node {node.name}", first_line=None
        )
        self._tail = b""  # the partial line the last bytes ended with

    async def run(self, out: asyncio.Queue[Batch]) -> None:
        timed_out = f"remote journalctl did not answer within {COMMAND_TIMEOUT_S} s"
        async with connection(self.node, self.env, timed_out) as conn:
            features = await self._probe(conn)
            gap = await self._check_cursor(conn)
            newest, newest_us = await self._newest(conn, features)
            caught_up = self._caught_up_at_start(newest, newest_us)
            await self._stream(conn, features, newest, caught_up, gap, out)

    async def _check_cursor(self, conn: Connection) -> bool:
        """Is the saved cursor's entry still there? If not (vacuumed or rotated away), resume
        from its time, and say there is a gap."""
        if not self.cursor:
            return False
        process = await conn.create_process(
            journalctl(self.node, "--cursor", self.cursor), encoding=None
        )
        try:
            first = await asyncio.wait_for(process.stdout.readline(), CURSOR_TIMEOUT_S)
        finally:
            process.close()
        if _entry_cursor(self.node.name, first.rstrip(b"\n")) == self.cursor:
            return False
        at = cursor_time_us(self.cursor)
        log.warning(
            "node %s: the saved cursor is no longer in the journal (vacuumed or rotated "
            "away): resuming from its time; entries that are gone are not counted",
            self.node.name,
        )
        self.since_us = at + 1 if at is not None else self.since_us
        self._reader.since_us = self.since_us
        self.cursor = ""
        return True

    async def _probe(self, conn: Connection) -> Features:
        """Which journalctl options the node accepts, by trying them on no entries."""

        async def run(*args: str) -> Completed:
            return await conn.run(
                journalctl(self.node, "-n", "0", *args), check=False, timeout=COMMAND_TIMEOUT_S
            )

        async def accepts(*args: str) -> bool:
            return (await run(*args)).exit_status == 0

        await check_remote(conn, self.node)
        output_fields = await accepts(f"--output-fields={FIELDS}")
        grep = await accepts("--grep", GREP)
        if not (output_fields and grep):
            log.info(
                "node %s: journalctl without%s%s: reading every entry in full",
                self.node.name,
                "" if output_fields else " --output-fields",
                "" if grep else " --grep",
            )
        return Features(output_fields, grep)

    async def _newest(self, conn: Connection, features: Features) -> tuple[str, int | None]:
        """The cursor and journal time of the newest entry under the same filters, when the
        stream starts ("" and None for an empty journal)."""
        r = await conn.run(
            journalctl(self.node, "-n", "1", features=features),
            check=False,
            timeout=COMMAND_TIMEOUT_S,
            encoding=None,  # bytes, split on LF only: a MESSAGE may hold U+2028 unescaped
        )
        if r.exit_status != 0:
            raise SourceError(
                f"node {self.node.name}: journalctl failed "
                f"({r.exit_status}): {remote_error(r.stderr)}"
            )
        stdout = r.stdout if isinstance(r.stdout, bytes) else b""
        decoder = EntryDecoder(self.node.name)
        for raw in reversed(stdout.split(b"\n")):
            try:
                line = decoder.decode(raw)
            except EntryError:
                line = None
            if line is not None and line.cursor:
                return line.cursor, line.time_us
        return "", None

    def _caught_up_at_start(self, newest: str, newest_us: int | None) -> bool:
        """Has the stream nothing to send of what the journal holds now? So when the journal is
        empty, when the saved cursor is its newest entry, or on a first start (from `since`)
        when its newest entry is older than `since`: it will never come."""
        if not newest or newest == self.cursor:
            return True
        since_whole_s = self.since_us // SECOND * SECOND  # --since @S: whole seconds
        return not self.cursor and newest_us is not None and newest_us < since_whole_s

    def _start_args(self) -> list[str]:
        # --no-tail: without it --follow shows only the last 10 entries after the cursor
        if self.cursor:
            return ["--after-cursor", self.cursor, "--follow", "--no-tail"]
        return ["--since", f"@{self.since_us // SECOND}", "--follow", "--no-tail"]

    async def _stream(
        self,
        conn: Connection,
        features: Features,
        newest: str,
        caught_up: bool,
        gap: bool,
        out: asyncio.Queue[Batch],
    ) -> None:
        follow = FollowStream(self.batch, out, loop_ticks(), newest, caught_up=caught_up)
        chan, _ = await conn.create_session(
            lambda: follow,
            journalctl(self.node, *self._start_args(), features=features),
            encoding=None,
        )
        try:
            await out.put(Batch(self.node.name, up=True, caught_up=follow.caught_up, gap=gap))
            follow.start()
            while True:
                await follow.event.wait()
                if follow.held is not None:  # the queue was full: wait for room here
                    await out.put(follow.held)
                    follow.taken()
                elif follow.error is not None:
                    raise follow.error
                else:  # closed: what came last, now (a tick would come too late)
                    follow.hand_over()
                    if follow.held is None and follow.error is None:
                        break
            raise SourceError(
                f"node {self.node.name}: remote journalctl ended "
                f"({chan.get_exit_status()}): {remote_error(follow.stderr)}"
            )
        finally:
            follow.stop()
            chan.close()  # closing the channel stops it: root sessions refuse signals

    def batch(self, data: bytes, newest: str, caught_up: bool) -> Batch | None:
        """The follow stream's next bytes as a Batch (None while no line is whole)."""
        chunk = self._reader.feed(data)
        nl = data.rfind(b"\n")
        if nl < 0:  # (a line's cursor is at its start: the start of the partial line is kept)
            self._tail = (self._tail + data)[:TAIL_KEPT]
            return None
        tail, self._tail = self._tail, data[nl + 1 : nl + 1 + TAIL_KEPT]
        if chunk.cursor:
            self.cursor = chunk.cursor
        if not caught_up and newest:
            caught_up = self.cursor == newest or _holds(tail, data, newest.encode())
        return chunk.batch(self.node.name, position=self.cursor, caught_up=caught_up)


def _holds(tail: bytes, data: bytes, cursor: bytes) -> bool:
    """Is `cursor` in a whole line of `tail + data` (tail: the partial line before `data`)?"""
    end = data.rfind(b"\n")
    if data.find(cursor, 0, end) >= 0 or tail.find(cursor) >= 0:
        return True
    k = len(cursor)
    return (tail[-k:] + data[: min(k, end)]).find(cursor) >= 0


def _entry_cursor(node: str, raw: bytes) -> str:
    """The cursor of one `-o json` line ("" when it has none, or is no entry)."""
    try:
        line = EntryDecoder(node).decode(raw)
    except EntryError:
        return ""
    return "" if line is None else line.cursor


def follow(node: SshNode, since_us: int, position: str) -> SshSource:
    """The daemon's source for an ssh node, from `position` (or `since_us` without one)."""
    return SshSource(node, since_us=since_us, position=position)


async def window(
    node: SshNode,
    since_us: int,
    until_us: int,
    progress: Progress | None = None,
    env: Env = os.environ,
) -> AsyncIterator[Batch]:
    """The node's entries over [since_us, until_us] that may matter, for a report, as Batches;
    `progress` hears (node, entries read, journal time reached) as the stream comes in."""
    reader = LineReader(node.name, since_us=since_us, where=f"node {node.name}", first_line=None)
    entries = 0
    reached: int | None = None
    async with connection(node, env, "remote journalctl did not answer in time") as conn:
        await check_remote(conn, node)
        command = journalctl(
            node, "--since", f"@{since_us // SECOND}", "--until", f"@{-(-until_us // SECOND)}"
        )
        process = await conn.create_process(command, encoding=None)
        try:
            while True:
                data = await process.stdout.read(READ_SIZE)
                chunk = reader.feed(data) if data else reader.end()
                entries += chunk.entries
                reached = chunk.newest_us if chunk.newest_us is not None else reached
                if progress is not None:
                    progress(node.name, entries, reached)
                yield chunk.batch(node.name, caught_up=not data)
                if not data:
                    break
            status = await process.wait(check=False, timeout=EXIT_TIMEOUT_S)
        finally:
            process.close()
    if status.exit_status != 0:
        raise SourceError(
            f"{who(node)}: remote journalctl failed ({status.exit_status}): "
            f"{remote_error(status.stderr)}"
        )
