"""Follows a remote node's journal over SSH (asyncssh): `journalctl -u UNIT -o json --follow`.

Host keys are checked against known_hosts unless the node's config says otherwise (a warning,
once). Passwords come from a file or an environment variable and are never logged. Every
argument of the remote command is quoted. What the node's journalctl supports (`--output-fields`,
`--grep`) is probed once per connection by trying it. The stream resumes after the last cursor
read (`--after-cursor`), or from `since` on a first start; the source counts as caught up once it
has read the entry that was newest, under the same filters, when the stream started. The remote
journalctl is stopped by closing its channel (root sessions refuse signals).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import asyncssh

from exporter.config import SshNode
from exporter.logline import Batch, LogLine
from exporter.parse import KEYWORDS
from exporter.sources import SourceError
from exporter.sources.dump import DumpLineError, LineDecoder
from exporter.sources.file import last_lines, relevant_lines
from exporter.sources.journal import cursor_time_us

log = logging.getLogger(__name__)

READ_SIZE = 1 << 16
COMMAND_TIMEOUT_S = 60  # a probe or `-n 1` that hangs this long fails the connection
FIELDS = "MESSAGE,_PID,__REALTIME_TIMESTAMP,__CURSOR"
# The parser's keywords as one PCRE2 alternation, for journalctl --grep.
GREP = "|".join(k.decode().replace("|", "\\|") for k in KEYWORDS)
_warned_unverified: set[str] = set()


@dataclass(frozen=True)
class Features:
    output_fields: bool
    grep: bool


def read_secret(node: SshNode, env: dict[str, str] | os._Environ[str]) -> str | None:
    """The node's password from its password_file or password_env; SourceError (naming the file
    or variable, never the value) when it cannot be had."""
    if node.password_file is not None:
        try:
            return node.password_file.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as e:
            raise SourceError(
                f"node {node.name}: cannot read password_file {node.password_file}: {e.strerror}"
            ) from None
    if node.password_env is not None:
        value = env.get(node.password_env)
        if value is None:
            raise SourceError(f"node {node.name}: password_env {node.password_env} is not set")
        return value
    return None


def connect_options(node: SshNode, password: str | None) -> dict[str, object]:
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
        "known_hosts": str(node.known_hosts) if node.verify_host_key and node.known_hosts else None,
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
    if node.client_keys:
        options["client_keys"] = [str(k) for k in node.client_keys]
    if password is not None:
        options["password"] = password
    return options


def journalctl(node: SshNode, *args: str, features: Features | None = None) -> str:
    """The remote command line, every argument quoted."""
    argv = ["journalctl", "--no-pager", "-u", node.unit, "-o", "json"]
    if node.journal_directory:
        argv += ["--directory", node.journal_directory]
    if features is not None and features.output_fields:
        argv.append(f"--output-fields={FIELDS}")
    if features is not None and features.grep:
        argv += ["--grep", GREP]
    return " ".join(shlex.quote(a) for a in [*argv, *args])


def explain(node: SshNode, e: BaseException) -> str:
    """An SSH failure in words, naming the node and never a secret."""
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
        self._decoder = LineDecoder(node.name)

    async def run(self, out: asyncio.Queue[Batch]) -> None:
        node = self.node
        password = read_secret(node, self.env)
        try:
            async with asyncssh.connect(node.host, **connect_options(node, password)) as conn:
                features = await self._probe(conn)
                gap = await self._check_cursor(conn)
                newest = await self._newest(conn, features)
                await self._stream(conn, features, newest, gap, out)
        except (asyncssh.Error, OSError) as e:
            raise SourceError(explain(node, e)) from None
        except TimeoutError:
            raise SourceError(
                f"node {node.name}: remote journalctl did not answer within {COMMAND_TIMEOUT_S} s"
            ) from None

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
        try:
            if json.loads(first)["__CURSOR"] == self.cursor:
                return False
        except (ValueError, KeyError, TypeError):
            pass
        at = cursor_time_us(self.cursor)
        log.warning(
            "node %s: the saved cursor is no longer in the journal (vacuumed or rotated "
            "away): resuming from its time; entries that are gone are not counted",
            self.node.name,
        )
        self.since_us = at + 1 if at is not None else self.since_us
        self.cursor = ""
        return True

    async def _probe(self, conn: asyncssh.SSHClientConnection) -> Features:
        """Which journalctl options the node accepts, by trying them on no entries."""

        async def accepts(*args: str) -> bool:
            r = await conn.run(
                journalctl(self.node, "-n", "0", *args), check=False, timeout=COMMAND_TIMEOUT_S
            )
            return r.exit_status == 0

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

    async def _newest(self, conn: asyncssh.SSHClientConnection, features: Features) -> str:
        """The cursor of the newest entry under the same filters, when the stream starts."""
        r = await conn.run(
            journalctl(self.node, "-n", "1", features=features),
            check=False,
            timeout=COMMAND_TIMEOUT_S,
        )
        if r.exit_status != 0:
            raise SourceError(
                f"node {self.node.name}: journalctl failed "
                f"({r.exit_status}): {_text(r.stderr).strip()[:300]}"
            )
        for raw in reversed(_text(r.stdout).splitlines()):
            try:
                return str(json.loads(raw)["__CURSOR"])
            except (ValueError, KeyError, TypeError):
                continue
        return ""

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
        gap: bool,
        out: asyncio.Queue[Batch],
    ) -> None:
        caught_up = not newest or newest == self.cursor
        process = await conn.create_process(
            journalctl(self.node, *self._start_args(), features=features), encoding=None
        )
        try:
            await out.put(Batch(self.node.name, up=True, caught_up=caught_up, gap=gap))
            gap = False
            partial = b""
            while True:
                data = await process.stdout.read(READ_SIZE)
                if not data:
                    break
                data = partial + data
                cut = data.rfind(b"\n") + 1
                partial, whole = data[cut:], data[:cut]
                if not whole:
                    continue
                batch = self._batch(whole, newest, caught_up, gap)
                caught_up, gap = batch.caught_up, False
                await out.put(batch)
            status = await process.wait(check=False, timeout=5)
            stderr = _text(status.stderr or b"").strip()
            raise SourceError(
                f"node {self.node.name}: remote journalctl ended "
                f"({status.exit_status}): {stderr[:300] or 'no message'}"
            )
        finally:
            process.close()  # closing the channel stops it: root sessions refuse signals

    def _batch(self, whole: bytes, newest: str, caught_up: bool, gap: bool) -> Batch:
        lines: list[LogLine] = []
        errors: list[str] = []
        for raw in relevant_lines(whole):
            try:
                line = self._decoder.decode(raw)
            except DumpLineError as e:
                errors.append(f"node {self.node.name}: remote journalctl: {e}: {raw[:200]!r}")
                continue
            if line is not None and line.time_us >= self.since_us:  # --since has whole seconds
                lines.append(line)
        last_time = None
        for raw in last_lines(whole, most=whole.count(b"\n")):  # the newest that has a cursor
            try:
                rec = json.loads(raw)
                cursor, last_time = str(rec["__CURSOR"]), int(rec["__REALTIME_TIMESTAMP"])
            except (ValueError, KeyError, TypeError):
                continue
            self.cursor = cursor
            break
        if not caught_up and newest:
            caught_up = newest.encode() in whole or self.cursor == newest
        return Batch(
            self.node.name,
            tuple(lines),
            entries=whole.count(b"\n"),
            newest_us=last_time,
            position=self.cursor,
            caught_up=caught_up,
            gap=gap,
            errors=tuple(errors),
        )


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value or "")


async def host_keys(hosts: Sequence[tuple[str, str, int]]) -> list[str]:
    """known_hosts lines for each (name, host, port), fetched without trusting them, with the
    SHA256 fingerprint as a comment for the operator to check."""
    lines = []
    for name, host, port in hosts:
        try:
            key = await asyncssh.get_server_host_key(host, port)
        except (asyncssh.Error, OSError) as e:
            raise SourceError(
                f"node {name}: {host}:{port}: cannot fetch its host key: "
                f"{getattr(e, 'reason', None) or e}"
            ) from None
        if key is None:
            lines.append(f"# {name}: {host}:{port} offered no host key")
            continue
        entry = host if port == 22 else f"[{host}]:{port}"
        lines.append(f"# {name}: {key.get_fingerprint('sha256')}")
        lines.append(f"{entry} {key.export_public_key('openssh').decode().strip()}")
    return lines


async def read_window(
    node: SshNode,
    since_us: int,
    until_us: int,
    progress: Callable[[str, int, int | None], None] | None = None,
    env: dict[str, str] | os._Environ[str] = os.environ,
) -> list[LogLine | Exception]:
    """The node's entries over [since_us, until_us] that may matter, for a report; `progress`
    hears (node, entries read, journal time reached) as the stream comes in."""
    password = read_secret(node, env)
    decoder = LineDecoder(node.name)
    lines: list[LogLine | Exception] = []
    reached: int | None = None
    try:
        async with asyncssh.connect(node.host, **connect_options(node, password)) as conn:
            command = journalctl(
                node,
                "--since",
                f"@{since_us // 1_000_000}",
                "--until",
                f"@{-(-until_us // 1_000_000)}",
            )
            process = await conn.create_process(command, encoding=None)
            try:
                entries, partial = 0, b""
                while data := await process.stdout.read(READ_SIZE):
                    data = partial + data
                    cut = data.rfind(b"\n") + 1
                    partial, whole = data[cut:], data[:cut]
                    entries += whole.count(b"\n")
                    for raw in relevant_lines(whole):
                        try:
                            line = decoder.decode(raw)
                        except DumpLineError as e:  # it still counts, as a parse error
                            lines.append(e)
                            continue
                        if line is not None:
                            lines.append(line)
                            reached = line.time_us
                    if progress is not None:
                        progress(node.name, entries, reached)
                status = await process.wait(check=False, timeout=30)
            finally:
                process.close()
    except (asyncssh.Error, OSError) as e:
        raise SourceError(explain(node, e)) from None
    if status.exit_status != 0:
        raise SourceError(
            f"node {node.name}: remote journalctl failed ({status.exit_status}): "
            f"{_text(status.stderr).strip()[:300]}"
        )
    return lines
