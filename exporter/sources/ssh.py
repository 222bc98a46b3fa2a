"""Follows a remote node's journal over SSH (asyncssh): `journalctl -u UNIT -o json --follow`.

Host keys are checked against known_hosts unless the node's config says otherwise (a warning,
once). Passwords come from a file or an environment variable and are never logged. Every
argument of the remote command is quoted. What the node's journalctl supports (`--output-fields`,
`--grep`) is probed once per connection by trying it. The stream resumes after the last cursor
read (`--after-cursor`), or from `since` on a first start; the source counts as caught up once it
has read the entry that was newest, under the same filters, when the stream started (at once
when that entry is older than `since` on a first start: it will never come). The remote
journalctl is stopped by closing its channel (root sessions refuse signals). What the node
says on standard error (and a peer's disconnect reason) comes into a message on one line, its
control characters escaped.

The follow stream is gathered, not read packet by packet: a node's journalctl writes each entry
as it comes, so a request's lines arrive in several packets. They collect in the SSH session (a
callback each, no task woken) and one timer for all the streams of the event loop hands each
stream's lines over as one Batch, GATHER_S after the first of them came, or at once when a
backlog is streaming in; the source's task wakes only when the queue is full, or at the end.
Lines are framed, found and decoded by the line layer (`sources/lines.py`), the same as a dump
file's: compiled where built. `window` reads a past window for the report the same way.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from exporter.base.logs import escape
from exporter.base.records import Batch
from exporter.config.config import SshNode, read_small_file
from exporter.parse.parser import KEYWORDS
from exporter.sources.base import SourceError
from exporter.sources.entries import EntryDecoder, EntryError, cursor_time_us
from exporter.sources.lines import LineReader

log = logging.getLogger(__name__)

READ_SIZE = 1 << 16  # a read for a report; a follow stream with this much is handed over at once
GATHER_S = 0.25  # a follow stream's output collects this long before it is handed over
GATHER_MAX = 1 << 18  # bytes collected before the channel stops reading (the node then waits)
TAIL_KEPT = 4096  # bytes of a partial line kept to find the newest entry's cursor in
STDERR_KEPT = 4096  # bytes of the remote journalctl's stderr kept for the error message
SAID_CHARS = 300  # characters of what a remote command said that an error message shows
COMMAND_TIMEOUT_S = 60  # a probe or `-n 1` that hangs this long fails the connection
FIELDS = "MESSAGE,_PID,__REALTIME_TIMESTAMP,__CURSOR"
# The parser's keywords as one PCRE2 alternation, for journalctl --grep.
GREP = "|".join(k.decode().replace("|", "\\|") for k in KEYWORDS)
_warned_unverified: set[str] = set()


@dataclass(frozen=True)
class Features:
    output_fields: bool
    grep: bool


Env = dict[str, str] | os._Environ[str]


def read_secret(node: SshNode, env: Env, what: str = "password") -> str | None:
    """The node's password (or, `what="passphrase"`, its keys' passphrase) from its *_file or
    *_env; SourceError when it cannot be had, naming the key and the file but not its value: a
    secret pasted there by mistake would be logged at every retry."""
    path: Path | None = getattr(node, f"{what}_file")
    name: str | None = getattr(node, f"{what}_env")
    if path is not None:
        shown = shown_path(path)
        try:
            return read_small_file(path).decode("utf-8").rstrip("\r\n")
        except OSError as e:
            why = e.strerror or type(e).__name__
            raise SourceError(
                f"{who(node)}: cannot read its {what}_file{shown}: {why}{_hint(e)}"
            ) from None
        except UnicodeDecodeError:
            raise SourceError(f"{who(node)}: its {what}_file{shown} is not UTF-8") from None
    if name is not None:  # (the variable's name is not shown: it may be the secret itself)
        value = env.get(name)
        if value is None:
            raise SourceError(f"{who(node)}: its {what}_env variable is not set")
        return value
    return None


def who(node: SshNode) -> str:
    """`node N: ssh USER@HOST:PORT`, how every SSH error begins."""
    return f"node {node.name}: ssh {node.user}@{node.host}:{node.port}"


def shown_path(path: Path) -> str:
    """` PATH` for a message, when it reads as a path; "" when it may be a secret pasted into a
    key meant for a path (no `/` in it, blanks, unprintable characters)."""
    text = str(path)
    if "/" in text and text.isprintable() and not any(c.isspace() for c in text):
        return f" {text}"
    return ""


def _hint(e: OSError) -> str:
    """For a file the service could not read: where it should come from."""
    if isinstance(e, PermissionError):
        return (
            " (under the service, files in /etc/sm-llm-exporter come as credentials: "
            "${CREDENTIALS_DIRECTORY}/ssh_FILE, see deploy/README.md)"
        )
    return ""


def load_client_keys(node: SshNode, env: Env) -> list[asyncssh.SSHKey]:
    """The node's client_keys, read and decrypted here, so that a problem names the file:
    SourceError for a file that cannot be read, is no private key, or is encrypted without
    (or with a wrong) passphrase."""
    passphrase = read_secret(node, env, "passphrase") if node.client_keys else None
    keys = []
    for path in node.client_keys:
        try:
            data = read_small_file(path)
        except OSError as e:
            why = e.strerror or type(e).__name__
            raise SourceError(
                f"{who(node)}: client key{shown_path(path)}: {why}{_hint(e)}"
            ) from None
        try:
            keys.append(asyncssh.import_private_key(data, passphrase))
        except (asyncssh.KeyImportError, ValueError, TypeError) as e:
            text = str(e)
            if "assphrase" in text or "decrypt" in text.lower():
                if passphrase is None:
                    why = "is encrypted: give its passphrase as passphrase_file or passphrase_env"
                else:
                    why = "is encrypted, and the passphrase given does not open it"
                raise SourceError(f"{who(node)}: client key{shown_path(path)} {why}") from None
            raise SourceError(
                f"{who(node)}: client key{shown_path(path)} is not a private key ({text[:120]})"
            ) from None
    return keys


def load_known_hosts(node: SshNode) -> asyncssh.SSHKnownHosts | None:
    """The node's known_hosts, read here so that a problem names the file (None when host keys
    are not verified)."""
    if not node.verify_host_key or node.known_hosts is None:
        return None
    path = node.known_hosts
    try:
        text = read_small_file(path).decode("utf-8", "replace")
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise SourceError(
            f"{who(node)}: known_hosts {path}: {why}{_hint(e)}; `sm-llm-exporter "
            f"known-hosts {node.name}` prints the lines to put there"
        ) from None
    try:
        return asyncssh.import_known_hosts(text)
    except (asyncssh.Error, ValueError) as e:
        raise SourceError(f"{who(node)}: known_hosts {path} does not read: {e}") from None


def loaded_options(node: SshNode, env: Env) -> dict[str, object]:
    """connect_options with the node's secrets, keys and known_hosts read (and the keys
    decrypted: half a second of bcrypt for one key) here: in a worker thread, off the loop."""
    password = read_secret(node, env)
    keys, known_hosts = load_client_keys(node, env), load_known_hosts(node)
    return connect_options(node, password, keys or None, known_hosts)


def connect_options(
    node: SshNode,
    password: str | None,
    keys: list[asyncssh.SSHKey] | None = None,
    known_hosts: asyncssh.SSHKnownHosts | None = None,
) -> dict[str, object]:
    """asyncssh.connect's options for the node; `keys` and `known_hosts` as loaded here
    (`load_client_keys`, `load_known_hosts`), else asyncssh reads the files itself."""
    if not node.verify_host_key and node.name not in _warned_unverified:
        _warned_unverified.add(node.name)
        log.warning(
            "node %s: host key NOT verified (verify_host_key: false); anyone on the path "
            "can read this node's journal and feed it false lines",
            node.name,
        )
    options: dict[str, object] = {
        "port": node.port,
        "username": node.user,
        "known_hosts": (
            known_hosts
            if known_hosts is not None
            else str(node.known_hosts)
            if node.verify_host_key and node.known_hosts
            else None
        ),
        "keepalive_interval": node.keepalive_interval,
        "keepalive_count_max": node.keepalive_count_max,
        # AES-GCM first: hardware AES costs a fraction of ChaCha20-Poly1305 per packet here
        "encryption_algs": [
            "aes128-gcm@openssh.com",
            "aes256-gcm@openssh.com",
            "chacha20-poly1305@openssh.com",
            "aes128-ctr",
            "aes256-ctr",
        ],
        "connect_timeout": 20,
        "login_timeout": 20,
    }
    if keys is not None:
        options["client_keys"] = keys
    elif node.client_keys:
        options["client_keys"] = [str(k) for k in node.client_keys]
    if password is not None:
        options["password"] = password
    return options


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


async def check_remote(conn: asyncssh.SSHClientConnection, node: SshNode) -> None:
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


def explain(node: SshNode, e: BaseException) -> str:
    """An SSH failure in words, naming the node and never a secret, escaped (a disconnect's
    reason is the peer's)."""
    return escape(_explained(node, e))


def _explained(node: SshNode, e: BaseException) -> str:
    where = f"ssh {node.user}@{node.host}:{node.port}"
    if isinstance(e, asyncssh.HostKeyNotVerifiable):
        return (
            f"node {node.name}: {where}: host key not verifiable against "
            f"{node.known_hosts} ({e.reason}); check the fingerprint with "
            f"`sm-llm-exporter known-hosts {node.name}`"
        )
    if isinstance(e, asyncssh.PermissionDenied):
        return f"node {node.name}: {where}: authentication failed ({e.reason})"
    if isinstance(e, asyncssh.DisconnectError):
        return f"node {node.name}: {where}: disconnected ({e.reason})"
    if isinstance(e, OSError):
        return f"node {node.name}: {where}: {e.strerror or e}"
    return f"node {node.name}: {where}: {type(e).__name__}: {e}"


class SshSource:
    """One remote node's journal, followed; `run` hands Batches to a queue until cancelled."""

    def __init__(
        self,
        node: SshNode,
        *,
        since_us: int,
        position: str = "",
        env: dict[str, str] | os._Environ[str] = os.environ,
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
        node = self.node
        options = await asyncio.to_thread(loaded_options, node, self.env)
        try:
            async with asyncssh.connect(node.host, **options) as conn:
                features = await self._probe(conn)
                gap = await self._check_cursor(conn)
                newest, newest_us = await self._newest(conn, features)
                caught_up = self._caught_up_at_start(newest, newest_us)
                await self._stream(conn, features, newest, caught_up, gap, out)
        except TimeoutError:  # (before OSError, its base class, and asyncssh's: it is both)
            raise SourceError(
                f"{who(node)}: remote journalctl did not answer within {COMMAND_TIMEOUT_S} s"
            ) from None
        except (asyncssh.Error, OSError) as e:
            raise SourceError(explain(node, e)) from None

    async def _check_cursor(self, conn: asyncssh.SSHClientConnection) -> bool:
        """Is the saved cursor's entry still there? If not (vacuumed or rotated away), resume
        from its time, and say there is a gap."""
        if not self.cursor:
            return False
        process = await conn.create_process(
            journalctl(self.node, "--cursor", self.cursor), encoding=None
        )
        try:
            first = await asyncio.wait_for(process.stdout.readline(), 30)
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

    async def _probe(self, conn: asyncssh.SSHClientConnection) -> Features:
        """Which journalctl options the node accepts, by trying them on no entries."""

        async def run(*args: str) -> asyncssh.SSHCompletedProcess:
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

    async def _newest(
        self, conn: asyncssh.SSHClientConnection, features: Features
    ) -> tuple[str, int | None]:
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
        since_whole_s = self.since_us // 1_000_000 * 1_000_000  # --since @S: whole seconds
        return not self.cursor and newest_us is not None and newest_us < since_whole_s

    def _start_args(self) -> list[str]:
        # --no-tail: without it --follow shows only the last 10 entries after the cursor
        if self.cursor:
            return ["--after-cursor", self.cursor, "--follow", "--no-tail"]
        return ["--since", f"@{self.since_us // 1_000_000}", "--follow", "--no-tail"]

    async def _stream(
        self,
        conn: asyncssh.SSHClientConnection,
        features: Features,
        newest: str,
        caught_up: bool,
        gap: bool,
        out: asyncio.Queue[Batch],
    ) -> None:
        follow = _Follow(self, out, _ticks(), newest, caught_up=caught_up)
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


class _Ticks:
    """One timer for all the follow streams of an event loop: every stream that got data since
    the last tick hands it over at the next, GATHER_S after the first of them got some, all in
    one callback. A tick is set only while a stream waits for one. (Nothing here refers to the
    loop, which keys the registry weakly: the streams and the timer are not held.)"""

    def __init__(self) -> None:
        self._due: list[weakref.ref[_Follow]] = []
        self._set = False

    def add(self, follow: _Follow) -> None:
        self._due.append(weakref.ref(follow))
        if not self._set:
            self._set = True
            asyncio.get_running_loop().call_later(GATHER_S, self._tick)

    def _tick(self) -> None:
        self._set = False
        due, self._due = self._due, []
        for ref in due:
            follow = ref()
            if follow is not None:
                follow.hand_over()


_ticks_of: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Ticks] = (
    weakref.WeakKeyDictionary()
)


def _ticks() -> _Ticks:
    loop = asyncio.get_running_loop()
    ticks = _ticks_of.get(loop)
    if ticks is None:
        ticks = _ticks_of[loop] = _Ticks()
    return ticks


class _Follow(asyncssh.SSHClientSession[bytes]):
    """A follow stream: its output collected as its packets arrive (a callback each) and handed
    over as one Batch at the next tick, by the tick itself: no task is woken while the queue
    takes them. Past READ_SIZE bytes (a backlog streaming in) it is handed over at once. When
    the queue is full the batch is held for the source's task to put, and the channel stops
    reading meanwhile (as it does past GATHER_MAX bytes): the node waits."""

    def __init__(
        self,
        source: SshSource,
        out: asyncio.Queue[Batch],
        ticks: _Ticks,
        newest: str,
        *,
        caught_up: bool,
    ) -> None:
        self._source, self._out, self._ticks = source, out, ticks
        self._newest, self.caught_up = newest, caught_up
        self._chan: asyncssh.SSHClientChannel[bytes] | None = None
        self._parts: list[bytes] = []
        self._size = 0
        self._started = False  # handing over (once the source's first Batch is out)
        self._due = False  # a hand-over is scheduled
        self._paused = False
        self.stderr = b""
        self.closed = False
        self.error: Exception | None = None  # the connection's, or handing over failed
        self.held: Batch | None = None  # what the full queue did not take
        self.event = asyncio.Event()  # for the task: a batch held, the end, or an error

    # asyncssh's side

    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self._chan = chan

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if datatype == asyncssh.EXTENDED_DATA_STDERR:
            self.stderr = (self.stderr + data)[:STDERR_KEPT]
            return
        self._parts.append(data)
        self._size += len(data)
        if self._size >= GATHER_MAX:
            self._pause()
        self._schedule()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.error is None:
            self.error = exc
        self.event.set()

    # the source's side

    def start(self) -> None:
        self._started = True
        self._schedule()

    def stop(self) -> None:
        """Hand over nothing more (the source is done with this stream)."""
        self._started = False

    def taken(self) -> None:
        """The task has put the batch that was held."""
        self.held = None
        if not self.closed and self.error is None:
            self.event.clear()
        self._resume()
        self._schedule()

    def hand_over(self) -> None:
        """What has collected, as one Batch, into the queue (or held, if it is full)."""
        self._due = False
        if not self._started or self.held is not None or self.error is not None:
            return
        if self._size:
            data = b"".join(self._parts)
            self._parts.clear()
            self._size = 0
            try:
                batch = self._source.batch(data, self._newest, self.caught_up)
            except Exception as e:  # the task raises it
                self.error = e
                self.event.set()
                return
            if batch is not None:
                self.caught_up = batch.caught_up
                try:
                    self._out.put_nowait(batch)
                except asyncio.QueueFull:
                    self.held = batch
                    self._pause()
                    self.event.set()
                    return
        self._resume()

    def _schedule(self) -> None:
        if not self._started or self._due or self.held is not None or not self._size:
            return
        self._due = True
        if self._size >= READ_SIZE:  # a backlog streaming in: no gathering
            asyncio.get_running_loop().call_soon(self.hand_over)
        else:
            self._ticks.add(self)

    def _pause(self) -> None:
        if not self._paused and self._chan is not None:
            self._paused = True
            self._chan.pause_reading()

    def _resume(self) -> None:
        if self._paused and self._chan is not None and self.held is None:
            self._paused = False
            self._chan.resume_reading()  # may deliver what waited, at once


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


async def host_key(name: str, host: str, port: int) -> list[str]:
    """known_hosts lines for a node, fetched without trusting it, with the SHA256 fingerprint as
    a comment for the operator to check."""
    try:
        key = await asyncssh.get_server_host_key(host, port)
    except (asyncssh.Error, OSError) as e:
        why = getattr(e, "reason", None) or getattr(e, "strerror", None) or e
        raise SourceError(
            f"node {name}: {host}:{port}: cannot fetch its host key: {escape(str(why))}"
        ) from None
    if key is None:
        return [f"# {name}: {host}:{port} offered no host key"]
    entry = host if port == 22 else f"[{host}]:{port}"
    return [
        f"# {name}: {key.get_fingerprint('sha256')}",
        f"{entry} {key.export_public_key('openssh').decode().strip()}",
    ]


async def window(
    node: SshNode,
    since_us: int,
    until_us: int,
    progress: Callable[[str, int, int | None], None] | None = None,
    env: dict[str, str] | os._Environ[str] = os.environ,
) -> AsyncIterator[Batch]:
    """The node's entries over [since_us, until_us] that may matter, for a report, as Batches;
    `progress` hears (node, entries read, journal time reached) as the stream comes in."""
    options = await asyncio.to_thread(loaded_options, node, env)
    reader = LineReader(node.name, since_us=since_us, where=f"node {node.name}", first_line=None)
    entries = 0
    reached: int | None = None
    try:
        async with asyncssh.connect(node.host, **options) as conn:
            await check_remote(conn, node)
            command = journalctl(
                node,
                "--since",
                f"@{since_us // 1_000_000}",
                "--until",
                f"@{-(-until_us // 1_000_000)}",
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
                status = await process.wait(check=False, timeout=30)
            finally:
                process.close()
    except TimeoutError:  # (before OSError, its base class, and asyncssh's: it is both)
        raise SourceError(f"{who(node)}: remote journalctl did not answer in time") from None
    except (asyncssh.Error, OSError) as e:
        raise SourceError(explain(node, e)) from None
    if status.exit_status != 0:
        raise SourceError(
            f"{who(node)}: remote journalctl failed ({status.exit_status}): "
            f"{remote_error(status.stderr)}"
        )
