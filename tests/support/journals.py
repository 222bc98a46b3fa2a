"""Journals for the tests: entries in export format, files written by systemd-journal-remote.

Also the workload of two nodes and another unit, and served figures compared with the report's.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import pytest

from exporter.accounting.figures import Snapshot
from exporter.base.records import REASONS, LogLine
from exporter.base.times import SECOND
from exporter.commands.demo import DemoLine, node_lines
from exporter.parse.tokens import KEYWORDS

from support.scrape import Samples, sample
from support.tools import IN_CI

JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"
MS = 1000
UNIT = "sm-llm.service"
UNIT_B = "sm-llm-b.service"
OTHER = "other.service"
IDENT = {UNIT: b"sm-llm", UNIT_B: b"sm-llm", OTHER: b"other"}
BOOT_ID = "5c3a0f6e2b8d4c1e9a7f0b3d6e2c8a41"
MONO_BASE_US = 1_700_000_000 * SECOND  # monotonic = realtime - this: one boot, in step
T0 = 1_790_062_264_127_792  # 2026-09-22T07:31:04.127792Z
PID = 4242


@dataclass(frozen=True)
class Entry:
    """One journal entry as a node's journald would have stored it."""

    time_us: int
    message: bytes
    unit: str = UNIT
    pid: int | None = PID


def require_journal_tools() -> None:
    """systemd-journal-remote, journalctl and systemd-python, or fail in CI / skip elsewhere."""
    missing = []
    if not os.access(JOURNAL_REMOTE, os.X_OK):
        missing.append(f"{JOURNAL_REMOTE} (Debian systemd-journal-remote)")
    if shutil.which("journalctl") is None:
        missing.append("journalctl")
    try:
        import systemd.journal  # noqa: F401
    except ImportError:
        missing.append("systemd-python (needs Debian libsystemd-dev)")
    if missing:
        what = ", ".join(missing)
        if IN_CI:
            pytest.fail(f"{what} missing in CI; `make test` installs them (run as root)")
        pytest.skip(f"{what} missing here (not CI, where this fails); `make test` as root")


def ent(time_us: int, message: str | bytes, unit: str = UNIT, pid: int | None = PID) -> Entry:
    return Entry(time_us, message.encode() if isinstance(message, str) else message, unit, pid)


def export(entries: Iterable[Entry]) -> bytes:
    """Journal export format: `KEY=value` for printable text, else `KEY`, the 64-bit
    little-endian length, the bytes; a blank line ends an entry."""
    out = bytearray()
    for e in entries:
        fields = [
            (b"__REALTIME_TIMESTAMP", b"%d" % e.time_us),
            (b"__MONOTONIC_TIMESTAMP", b"%d" % (e.time_us - MONO_BASE_US)),
            (b"_BOOT_ID", BOOT_ID.encode()),
            (b"_SYSTEMD_UNIT", e.unit.encode()),
            (b"_HOSTNAME", b"node0"),
            (b"SYSLOG_IDENTIFIER", IDENT[e.unit]),
            (b"MESSAGE", e.message),
        ]
        if e.pid is not None:
            fields.append((b"_PID", b"%d" % e.pid))
        for key, value in fields:
            if _printable(value):
                out += key + b"=" + value + b"\n"
            else:
                out += key + b"\n" + struct.pack("<Q", len(value)) + value + b"\n"
        out += b"\n"
    return bytes(out)


def _printable(value: bytes) -> bool:
    try:
        return value.decode("utf-8").isprintable()
    except UnicodeDecodeError:
        return False


def journal_json(*args: str) -> list[dict[str, Any]]:
    """`journalctl -o json ARGS`, one dict per entry."""
    done = subprocess.run(
        ["journalctl", "--no-pager", "-q", "-o", "json", *args],
        capture_output=True,
        check=True,
        timeout=30,
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def count_in(path: Path) -> int:
    return len(journal_json("--file", str(path))) if path.exists() else 0


def write_journal(path: Path, entries: Sequence[Entry]) -> None:
    """Append `entries` to the journal file `path` with one run of systemd-journal-remote, and
    check that every one arrived (it exits 0 even when it rejects entries)."""
    before = count_in(path)
    done = subprocess.run(
        [JOURNAL_REMOTE, "-o", str(path), "-"],
        input=export(entries),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    after = count_in(path)
    assert after == before + len(entries), (
        f"journal-remote stored {after - before} of {len(entries)} entries in {path}: "
        + done.stderr.decode(errors="replace")
    )


class JournalWriter:
    """One systemd-journal-remote kept running: what is written to it lands in `path` as it
    comes, as on a host that collects a node's journal live."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.before = count_in(path)
        self.written = 0
        self._err: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            [JOURNAL_REMOTE, "-o", str(path), "-"], stdin=subprocess.PIPE, stderr=self._err
        )

    def write(self, entries: Sequence[Entry]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(export(entries))
        self.proc.stdin.flush()
        self.written += len(entries)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=60)
        self._err.seek(0)
        err = self._err.read().decode(errors="replace")
        self._err.close()
        assert rc == 0, err
        stored = count_in(self.path) - self.before
        assert stored == self.written, f"journal-remote stored {stored} of {self.written}: {err}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._err.close()


LAUNCH = "slot launch_slot_: id  0 | task {} | processing task"
RELEASE = "slot      release: id  0 | task {} | stop processing: n_past = {}, truncated = 0"
CANCEL = "srv          stop: cancel task, id_task = {}"
NOISE = "srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200"
IDLE = "srv  update_slots: all slots are idle"


def ms(cs: int) -> str:
    """Hundredths of a millisecond as llama.cpp prints milliseconds."""
    return f"{cs // 100}.{cs % 100:02d}"


def era_c_block(task: int, prompt: int, generated: int, total_cs: int) -> list[str]:
    """Era C (2024-09 to 2026-05): a header, then three unprefixed lines."""
    prompt_cs = total_cs * 3 // 10
    eval_cs = total_cs - prompt_cs
    return [
        f"slot print_timing: id  0 | task {task} | ",
        f"prompt eval time = {ms(prompt_cs):>10} ms / {prompt:5d} tokens "
        f"({prompt_cs / 100 / prompt:8.2f} ms per token, "
        f"{prompt * 1e5 / prompt_cs:8.2f} tokens per second)",
        f"       eval time = {ms(eval_cs):>10} ms / {generated:5d} tokens "
        f"({eval_cs / 100 / generated:8.2f} ms per token, "
        f"{generated * 1e5 / eval_cs:8.2f} tokens per second)",
        f"      total time = {ms(total_cs):>10} ms / {prompt + generated:5d} tokens",
    ]


def era_d_total(task: int, tokens: int, total_cs: int) -> str:
    return (
        f"slot print_timing: id  0 | task {task} |       total time = {ms(total_cs):>10} ms / "
        f"{tokens:5d} tokens"
    )


def era_c_lines(seed: int, start_us: int, end_us: int) -> list[DemoLine]:
    """An era C llama-server: the stop line before the block, some requests cancelled
    (the client's cancel line, then the stop, never timed), and one restart (a new PID) in the
    middle of a request."""
    rng = random.Random(seed)
    pid = 7000 + rng.randrange(1000)
    task = rng.randrange(10, 400)
    t = start_us + rng.randrange(SECOND)
    restarted = False
    out: list[DemoLine] = []
    while True:
        t += rng.randrange(300 * MS, 4 * SECOND)
        total_cs = rng.randrange(150_000, 3_000_000)
        end = t + total_cs * 10
        if end >= end_us:
            return out
        out.append(DemoLine(t + rng.randrange(50, 900), pid, LAUNCH.format(task)))
        if not restarted and t > (start_us + end_us) // 2:
            restarted = True  # the server dies with this request in flight
            pid += 1
            task = rng.randrange(10, 400)
            continue
        prompt, generated = rng.randrange(100, 900), rng.randrange(3, 120)
        timed = rng.random() > 0.08  # else cancelled: the stop line and no timing block
        if not timed:
            out.append(DemoLine(end - 45, pid, CANCEL.format(task)))
        out.append(DemoLine(end - 40, pid, RELEASE.format(task, prompt + generated)))
        if timed:
            block = era_c_block(task, prompt, generated, total_cs)
            out += [DemoLine(end - 30 + 10 * i, pid, m) for i, m in enumerate(block)]
        out.append(DemoLine(end + 200, pid, NOISE))
        t = end
        task += 1 + rng.randrange(2)


# Appended to some era D total lines: a journal keeps whatever bytes the program wrote.
ODD_TAILS = (b"\r", b"\x00\x01 binary tail", b" \xff\xfe not UTF-8", " caf\u00e9".encode())


def workload(seed: int, start_us: int, end_us: int) -> list[Entry]:
    """Node a (era D, unit sm-llm.service), node b (era C, unit sm-llm-b.service) and another
    unit logging timing lines of its own, interleaved in journal order; each node ends idle
    with a line 10 s after `end_us`."""
    a: list[Entry] = []
    totals = 0
    for x in node_lines("node0", seed, start_us, end_us):
        msg = x.message.encode()
        if "total time" in x.message:
            totals += 1
            if totals % 5 == 0:
                msg += ODD_TAILS[totals // 5 % len(ODD_TAILS)]
        a.append(Entry(x.time_us, msg, UNIT, x.pid))
        if totals % 9 == 1 and "release" in x.message:
            a.append(ent(x.time_us + 70, "srv  params_from_: Chat format:\n  Content-only", UNIT))
    b = [ent(x.time_us, x.message, UNIT_B, x.pid) for x in era_c_lines(seed, start_us, end_us)]
    other = [
        ent(x.time_us, x.message, OTHER, x.pid) for x in node_lines("node1", seed, start_us, end_us)
    ]
    merged = sorted(a + b + other, key=lambda e: e.time_us)
    last = end_us + 10 * SECOND
    return [*merged, ent(last, IDLE, UNIT, a[-1].pid), ent(last, IDLE, UNIT_B, b[-1].pid)]


def relevant(message: bytes) -> bool:
    return any(k in message for k in KEYWORDS)


def decoded(message: bytes) -> str:
    return message.decode("utf-8", "replace")


def lines_of(entries: Iterable[Entry], node: str = "n", unit: str = UNIT) -> list[LogLine]:
    """The LogLines the source must hand over for `entries`: the unit's, with a keyword."""
    return [
        LogLine(node, e.time_us, "", e.pid or 0, decoded(e.message))
        for e in entries
        if e.unit == unit and relevant(e.message)
    ]


def iso(us: int) -> str:
    return datetime.fromtimestamp(us // SECOND, UTC).replace(microsecond=us % SECOND).isoformat()


def compare(samples: Samples, snap: Snapshot) -> list[str]:
    """Every served figure against the report's, to the microsecond."""
    out: list[str] = []

    def same(what: str, served: float | None, us: int, scale: int = SECOND) -> None:
        if served is None or round(served * scale) != us:
            out.append(f"{what}: served {served}, report {us / scale}")

    for n in snap.nodes:
        node = n.name
        same(f"{node} busy", sample(samples, "smllm_node_busy_seconds_total", node=node), n.busy_us)
        same(
            f"{node} slot busy",
            sample(samples, "smllm_slot_busy_seconds_total", node=node),
            n.slot_busy_us,
        )
        for reason in REASONS:
            count, us = n.untimed[reason]
            same(
                f"{node} {reason} untimed",
                sample(samples, "smllm_requests_untimed_total", node=node, reason=reason),
                count,
                1,
            )
            same(
                f"{node} {reason} untimed seconds",
                sample(samples, "smllm_untimed_request_seconds_total", node=node, reason=reason),
                us,
            )
        for name, value in (
            ("smllm_requests_aborted_total", n.aborted),
            ("smllm_server_restarts_total", n.restarts),
            ("smllm_parse_errors_total", n.parse_errors),
            ("smllm_late_intervals_total", 0),
            ("smllm_source_gaps_total", 0),
        ):
            same(f"{node} {name}", sample(samples, name, node=node), value, 1)
        for kind, c in n.kinds.items():
            for name, value, scale in (
                ("smllm_requests_total", c.requests, 1),
                ("smllm_tokens_total", c.tokens, 1),
                ("smllm_prompt_tokens_total", c.prompt_tokens, 1),
                ("smllm_generated_tokens_total", c.generated_tokens, 1),
                ("smllm_request_seconds_total", c.request_us, SECOND),
                ("smllm_prompt_seconds_total", c.prompt_us, SECOND),
                ("smllm_generation_seconds_total", c.generation_us, SECOND),
                ("smllm_request_duration_seconds_count", c.requests, 1),
            ):
                same(
                    f"{node} {kind} {name}",
                    sample(samples, name, node=node, kind=kind),
                    value,
                    scale,
                )
    for k, v in enumerate(snap.concurrency_us):
        same(
            f"concurrency {k}",
            sample(samples, "smllm_concurrency_seconds_total", nodes_busy=str(k)),
            v,
        )
    for mix, v in snap.mix_us.items():
        same(f"mix {mix}", sample(samples, "smllm_mix_seconds_total", mix=mix), v)
    return out
