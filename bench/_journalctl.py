"""Many nodes' `journalctl` for bench/ssh.py, served behind asyncssh's own SSH server.

Each node's journal is made as the clock reaches its entries, and served as the exporter's SSH
source asks for it.

A node's journal (`NodeJournal`): one request a second, one at a time, 10 entries each (the
params line, the launch line, a poll, the era-D timing block, the release line, `all slots are
idle`, the POST line and a health poll), every entry with journald's usual fields; request r is
generated (deterministically) only when asked for, so hundreds of nodes cost little.

What the source runs (`exporter.sources.sshreader.journalctl`): `journalctl --no-pager --all -u
UNIT -o json` with `-n N` (the probes: options tried on no entries, then the newest entry),
`--output-fields=F,...` and `--grep PATTERN` once they are accepted, and the follow stream
`--since @S --follow --no-tail`, or `--after-cursor C --follow --no-tail` when it resumes. An
`old` node is systemd 219's journalctl: --output-fields and --grep refused (exit 1), its JSON
pretty-spaced. Any other option is refused (exit 1), as journalctl refuses one it does not know.
`Counts` keeps a node's follow streams' figures: the bytes sent, the bytes the same entries
take unfiltered, and the `total time` entries sent.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import shlex
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from exporter.base.times import SECOND

UNIT = "sm-llm.service"
ENTRIES_PER_REQUEST = 10
# what journalctl prints of an entry whatever --output-fields names
ALWAYS = ("__CURSOR", "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_BOOT_ID")
NEW_OPTIONS = ("--output-fields", "--grep")  # what systemd 219's journalctl lacks
FLAGS = ("--no-pager", "--all", "--follow", "--no-tail")
WITH_VALUE = ("-u", "-o", "-n", "--since", "--cursor", "--after-cursor", "--grep")
UPTIME_US = 86_400 * SECOND  # the boot's age at the first entry
IDLE_WAIT_S = 1.0  # the longest a follow stream sleeps before it looks at the clock again


def now_us() -> int:
    return time.time_ns() // 1000


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int  # its index in the journal
    time_us: int
    message: str


class NodeJournal:
    """One node's journal: request r starts at t0 + r s + the node's offset; 10 entries each."""

    def __init__(self, index: int, t0_us: int) -> None:
        self.name = f"node{index:03d}"
        rng = random.Random(f"ssh-bench:{self.name}")
        self.t0 = t0_us + rng.randrange(SECOND)
        self.boot = f"{rng.getrandbits(128):032x}"
        self.machine = f"{rng.getrandbits(128):032x}"
        self.pid = str(4000 + rng.randrange(1000))
        self.task0 = rng.randrange(100, 5000)
        self.boot_us = t0_us - UPTIME_US
        self._cache: tuple[int, list[Entry]] = (-1, [])

    def request(self, r: int) -> list[Entry]:
        if self._cache[0] == r:
            return self._cache[1]
        rng = random.Random(f"{self.name}:{r}")
        start = self.t0 + r * SECOND
        total_us = rng.randrange(300_000, 800_000)
        end = start + total_us
        total_ms = total_us / 1000
        prompt, generated = rng.randrange(120, 940), rng.randrange(3, 120)
        prompt_ms = round(total_ms * rng.uniform(0.15, 0.4), 2)
        gen_ms = round(total_ms - prompt_ms, 2)
        slot = f"id  0 | task {self.task0 + r} |"
        timing = f"slot print_timing: {slot} "
        poll = rng.choice(("GET /health", "GET /v1/models", "GET /metrics"))
        messages = [
            (start, "srv  params_from_: Chat format: Hermes 2 Pro"),
            (start + 200, f"slot launch_slot_: {slot} processing task, is_child = 0"),
            (start + total_us // 2, f"srv  log_server_r: request: {poll} 127.0.0.1 200"),
            (
                end - 40,
                timing + f"prompt eval time = {prompt_ms:10.2f} ms / {prompt:5d}"
                f" tokens ({prompt_ms / prompt:8.2f} ms per token,"
                f" {1e3 / prompt_ms * prompt:8.2f} tokens per second)",
            ),
            (
                end - 20,
                timing + f"       eval time = {gen_ms:10.2f} ms / {generated:5d}"
                f" tokens ({gen_ms / generated:8.2f} ms per token,"
                f" {1e3 / gen_ms * generated:8.2f} tokens per second)",
            ),
            (
                end,
                timing + f"      total time = {total_ms:10.2f} ms / {prompt + generated:5d} tokens",
            ),
            (
                end + 30,
                f"slot      release: {slot} stop processing:"
                f" n_tokens = {prompt + generated}, truncated = 0",
            ),
            (end + 60, "srv  update_slots: all slots are idle"),
            (end + 90, "srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200"),
            (end + 100_000, "srv  log_server_r: request: GET /health 127.0.0.1 200"),
        ]
        entries = [Entry(r * ENTRIES_PER_REQUEST + k, t, m) for k, (t, m) in enumerate(messages)]
        self._cache = (r, entries)
        return entries

    def entry(self, seq: int) -> Entry:
        return self.request(seq // ENTRIES_PER_REQUEST)[seq % ENTRIES_PER_REQUEST]

    def upto(self, start: int, until_us: int) -> Iterator[Entry]:
        """The entries from index `start` on whose time has come by `until_us`."""
        seq = start
        while (e := self.entry(seq)).time_us <= until_us:
            yield e
            seq += 1

    def after(self, cursor: str) -> int:
        """The index after the entry with `cursor` (its `i=` field is the index + 1)."""
        for part in cursor.split(";"):
            key, _, value = part.partition("=")
            if key == "i":
                return int(value, 16)
        raise Refused("Failed to parse cursor")

    def first_since(self, since_us: int) -> int:
        """The index of the first entry at or after `since_us`."""
        seq = 0
        while self.entry(seq).time_us < since_us:
            seq += 1
        return seq

    def record(self, e: Entry) -> dict[str, str]:
        """The entry as journalctl -o json has it."""
        cursor = (
            f"s={self.machine};i={e.seq + 1:x};b={self.boot};m={e.time_us - self.boot_us:x};"
            f"t={e.time_us:x};x={(e.seq * 2654435761) & 0xFFFFFFFFFFFF:x}"
        )
        return {
            "__CURSOR": cursor,
            "__REALTIME_TIMESTAMP": str(e.time_us),
            "__MONOTONIC_TIMESTAMP": str(e.time_us - self.boot_us),
            "_BOOT_ID": self.boot,
            "_TRANSPORT": "stdout",
            "PRIORITY": "6",
            "SYSLOG_IDENTIFIER": "sm-llm",
            "_PID": self.pid,
            "_UID": "998",
            "_GID": "998",
            "_COMM": "llama-server",
            "_EXE": "/opt/llama.cpp/bin/llama-server",
            "_CMDLINE": "/opt/llama.cpp/bin/llama-server --host 0.0.0.0 --port 8080 -c 32768 "
            "-ngl 99 -m /srv/models/qwen3-30b-a3b-q4_k_m.gguf",
            "_SYSTEMD_CGROUP": f"/system.slice/{UNIT}",
            "_SYSTEMD_UNIT": UNIT,
            "_HOSTNAME": self.name,
            "MESSAGE": e.message,
        }


# -- the command ------------------------------------------------------------------------------


class Refused(Exception):
    """What journalctl says on stderr before it exits 1."""


@dataclass
class Query:
    """A journalctl command line, read."""

    options: dict[str, str] = field(default_factory=dict)  # option -> value ("" for a flag)
    fields: tuple[str, ...] | None = None
    new_option: str = ""  # the first option given that systemd 219 lacks

    def grep(self) -> re.Pattern[str] | None:
        """--grep's pattern: case-insensitive unless it holds an upper-case letter."""
        pattern = self.options.get("--grep")
        if pattern is None:
            return None
        return re.compile(pattern, 0 if any(c.isupper() for c in pattern) else re.IGNORECASE)


def parse(command: str) -> Query:
    """The options of `journalctl ...`; Refused for anything else."""
    argv = shlex.split(command)
    if argv[:1] != ["journalctl"]:
        raise Refused(f"only journalctl here, not {argv[:1]}")
    q = Query()
    args = iter(argv[1:])
    for a in args:
        if a.startswith("--output-fields="):
            q.fields = tuple(a.partition("=")[2].split(","))
        elif a in WITH_VALUE:
            value = next(args, None)
            if value is None:
                raise Refused(f"option '{a}' requires an argument")
            q.options[a] = value
        elif a in FLAGS:
            q.options[a] = ""
        else:
            raise Refused(f"unrecognized option '{a}'")
        if a.startswith(NEW_OPTIONS) and not q.new_option:
            q.new_option = a
    if q.options.get("-o") != "json":
        raise Refused("only -o json is emulated")
    return q


def render(record: Mapping[str, str], old: bool) -> bytes:
    """One entry as journalctl -o json prints it: compact, or pretty-spaced as systemd 219 did."""
    if old:
        pairs = ", ".join(f"{json.dumps(k)} : {json.dumps(v)}" for k, v in record.items())
        return b"{ " + pairs.encode() + b" }\n"
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


# -- the node -----------------------------------------------------------------------------------


@dataclass
class Counts:
    """A node's follow streams: bytes sent, the same entries' bytes unfiltered, requests sent."""

    sent: int = 0
    full: int = 0
    requests: int = 0


class Node:
    """One node's journalctl over SSH; `handle` is asyncssh's process factory."""

    def __init__(self, journal: NodeJournal, *, old: bool = False) -> None:
        self.journal = journal
        self.old = old
        self.counts = Counts()
        self.acceptor: asyncssh.SSHAcceptor | None = None

    async def listen(self, keys: Keys) -> int:
        """Serve on a port of 127.0.0.1 the kernel picks; that port."""
        self.acceptor = await asyncssh.listen(
            "127.0.0.1",
            0,
            server_host_keys=[keys.host],
            authorized_client_keys=keys.authorized(),
            process_factory=self.handle,
            encoding=None,
            allow_scp=False,
        )
        port: int = self.acceptor.sockets[0].getsockname()[1]
        return port

    async def handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        try:
            q = parse(process.command or "")
            if q.new_option and self.old:
                raise Refused(f"unrecognized option '{q.new_option}'")
            if q.options.get("-u") != UNIT:
                raise Refused(f"unit {q.options.get('-u')!r} not emulated")
            if "--follow" in q.options:
                await self._follow(process, q)
            else:
                process.stdout.write(b"".join(self._print(q)))
                process.exit(0)
        except Refused as refused:
            process.stderr.write(f"journalctl: {refused}\n".encode())
            process.exit(1)
        except (OSError, asyncssh.Error):
            pass  # the client went away

    def _print(self, q: Query) -> list[bytes]:
        """What a command without --follow prints: from --cursor's entry (or the first) to the
        newest, the last N with -n N."""
        cursor = q.options.get("--cursor")
        start = 0 if cursor is None else self.journal.after(cursor) - 1
        shown = [line for e in self.journal.upto(start, now_us()) if (line := self._line(q, e)[0])]
        n = int(q.options.get("-n", len(shown)))
        return shown[len(shown) - n :] if n else []

    def _line(self, q: Query, e: Entry) -> tuple[bytes, bytes]:
        """What the command prints of `e` (b"" when --grep leaves it out), and the entry
        unfiltered."""
        record = self.journal.record(e)
        full = render(record, self.old)
        grep = q.grep()
        if grep is not None and grep.search(e.message) is None:
            return b"", full
        if q.fields is None:
            return full, full
        keep = {*q.fields, *ALWAYS}
        return render({k: v for k, v in record.items() if k in keep}, self.old), full

    async def _follow(self, process: asyncssh.SSHServerProcess[bytes], q: Query) -> None:
        j, counts = self.journal, self.counts
        if "--after-cursor" in q.options:
            seq = j.after(q.options["--after-cursor"])
        else:
            seq = j.first_since(int(q.options.get("--since", "@0")[1:]) * SECOND)
        while not process.is_closing():
            out = []
            for e in j.upto(seq, now_us()):
                sent, full = self._line(q, e)
                out.append(sent)
                counts.sent += len(sent)
                counts.full += len(full)
                counts.requests += bool(sent) and "total time" in e.message
                seq = e.seq + 1
            if out:
                process.stdout.write(b"".join(out))
                await process.stdout.drain()
            wait = (j.entry(seq).time_us - now_us()) / SECOND
            await asyncio.sleep(min(max(wait, 0.001), IDLE_WAIT_S))


# -- keys ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Keys:
    """The nodes' host key and the one client key they authorise (ed25519)."""

    host: asyncssh.SSHKey
    client: asyncssh.SSHKey

    @classmethod
    def generate(cls) -> Keys:
        return cls(*(asyncssh.generate_private_key("ssh-ed25519") for _ in range(2)))

    @classmethod
    def read(cls, directory: Path) -> Keys:
        """As `write` left them."""
        host, client = (
            asyncssh.read_private_key(directory / n) for n in ("host_key", "client_key")
        )
        return cls(host, client)

    def write(self, directory: Path) -> Path:
        """Both keys into `directory`; the client key's path."""
        self.host.write_private_key(directory / "host_key")
        client = directory / "client_key"
        self.client.write_private_key(client)
        client.chmod(0o600)
        return client

    def authorized(self) -> asyncssh.SSHAuthorizedKeys:
        return asyncssh.import_authorized_keys(self.client.export_public_key("openssh").decode())

    def known_hosts(self, path: Path, ports: Iterable[int]) -> Path:
        """A known_hosts file with the host key for `[127.0.0.1]:PORT` of each port."""
        key = " ".join(self.host.export_public_key("openssh").decode().split()[:2])
        path.write_text("".join(f"[127.0.0.1]:{port} {key}\n" for port in ports))
        return path
