"""The `demo` command: a seeded, realistic sm-llm workload on three nodes, as growing journals.

`node_lines` makes the journal lines (the tests' workload too); `Appender` writes the last hour of
them, then each later line when its time comes; `main` runs the daemon on them. The seed's
workload: extraction calls of 600-1,000 tokens taking 20-60 s, reconcile calls under
600 tokens taking 2-15 s, one request at a time per node, each with its launch line, its era D
timing block and its release line; the last node sometimes sits idle for minutes. Each node's
llama-server logs its start-up line (one slot) first, and between requests now and then an
embedding (launch, release) or a request the client cancelled (launch, cancel line, release).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import random
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from exporter.base.outfile import shown
from exporter.base.times import SECOND
from exporter.config.schema import Config
from exporter.daemon.daemon import Daemon
from exporter.sources.file import FileNode

log = logging.getLogger(__name__)

NODES = ("node0", "node1", "node2")
SEED = 1
TEMP_PREFIX = "sm-llm-demo-"


@dataclass(frozen=True)
class DemoLine:
    time_us: int
    pid: int
    message: str


def node_lines(node: str, seed: int, start_us: int, end_us: int) -> Iterator[DemoLine]:
    """Journal lines of one node's requests that end in [start_us, end_us), in journal order."""
    rng = random.Random(f"{seed}:{node}")
    untimed = random.Random(f"{seed}:{node}:untimed")  # (the timed workload stays as it was)
    pid = 4000 + rng.randrange(1000)
    idle_prone = node == NODES[-1]
    lines = list(_startup(random.Random(f"{seed}:{node}:startup"), pid, start_us))
    yield from lines
    t = lines[-1].time_us + rng.randrange(5 * SECOND)
    task = rng.randrange(100, 5000)
    while True:
        if idle_prone and rng.random() < 0.02:
            t += rng.randrange(120, 600) * SECOND  # the node sits idle for minutes
        gap = rng.randrange(200_000, 5 * SECOND)
        if gap > 2 * SECOND and untimed.random() < 0.15:
            yield from _untimed(untimed, pid, task + 10_000, t + 100_000, t + gap - 100_000)
        t += gap
        if rng.random() < 0.45:
            prompt, generated = rng.randrange(560, 940), rng.randrange(40, 120)
            total_ms = rng.randrange(20_000_00, 60_000_00) / 100
        else:
            prompt, generated = rng.randrange(120, 540), rng.randrange(3, 50)
            total_ms = rng.randrange(2_000_00, 15_000_00) / 100
        total_us = round(total_ms * 1000)
        end = t + total_us
        if end >= end_us:
            return
        prompt_ms = round(total_ms * rng.uniform(0.15, 0.4), 2)
        gen_ms = round(total_ms - prompt_ms, 2)
        prefix = f"slot print_timing: id  0 | task {task} | "
        yield DemoLine(
            t + rng.randrange(50, 900),
            pid,
            f"slot launch_slot_: id  0 | task {task} | processing task, is_child = 0",
        )
        yield DemoLine(
            end,
            pid,
            prefix + f"prompt eval time = {prompt_ms:10.2f} ms / {prompt:5d}"
            f" tokens ({prompt_ms / prompt:8.2f} ms per token,"
            f" {1e3 / prompt_ms * prompt:8.2f} tokens per second)",
        )
        yield DemoLine(
            end,
            pid,
            prefix + f"       eval time = {gen_ms:10.2f} ms / {generated:5d}"
            f" tokens ({gen_ms / generated:8.2f} ms per token,"
            f" {1e3 / gen_ms * generated:8.2f} tokens per second)",
        )
        yield DemoLine(
            end,
            pid,
            prefix + f"      total time = {total_ms:10.2f} ms / {prompt + generated:5d} tokens",
        )
        yield DemoLine(
            end + 30,
            pid,
            f"slot      release: id  0 | task {task} | stop processing:"
            f" n_tokens = {prompt + generated}, truncated = 0",
        )
        t = end
        task += 1 + rng.randrange(3)


def _startup(rng: random.Random, pid: int, start_us: int) -> Iterator[DemoLine]:
    """The unit's start and the server's start-up lines (era D's elapsed prefix), from
    `start_us`: loading the model takes a few seconds."""
    yield DemoLine(start_us, 1, "Started sm-llm.service - sm-llm llama-server.")
    begin = start_us + rng.randrange(5_000, 15_000)  # (the exec, before the first line)
    loaded = rng.randrange(2 * SECOND, 6 * SECOND)
    delay = 0  # (journald reads a line a little after it is written, never before)
    for at, text in (
        (1_500, "llama_server: initializing ..."),
        (5_900, "  load_model: loading model '/srv/models/model.gguf'"),
        (
            loaded,
            "  load_model: initializing, n_slots = 1, n_ctx_slot = 4096, kv_unified = 'false'",
        ),
        (loaded + 3_000, "llama_server: model loaded"),
        (loaded + 3_050, "llama_server: listening on http://127.0.0.1:8080"),
    ):
        m, us = divmod(at, 60 * SECOND)
        stamp = f"{m}.{us // SECOND:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d}"
        delay = max(delay, rng.randrange(100, 400))
        yield DemoLine(begin + at + delay, pid, f"{stamp} I srv  {text}")


def _untimed(
    rng: random.Random, pid: int, task: int, start_us: int, end_us: int
) -> Iterator[DemoLine]:
    """An embedding, or now and then a request its client cancelled, on the node's slot."""
    launch = start_us + rng.randrange(max(1, (end_us - start_us) // 2))
    release = min(end_us, launch + rng.randrange(30_000, 900_000))
    yield DemoLine(launch, pid, f"slot launch_slot_: id  0 | task {task} | processing task")
    if rng.random() < 0.3:
        yield DemoLine(release - 20, pid, f"srv          stop: cancel task, id_task = {task}")
    yield DemoLine(
        release,
        pid,
        f"slot      release: id  0 | task {task} | stop processing: n_tokens = 12, truncated = 0",
    )


def short_iso(node: str, line: DemoLine) -> str:
    """The line as `journalctl -o short-iso-precise` prints it."""
    stamp = datetime.fromtimestamp(line.time_us // SECOND, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{line.time_us % SECOND:06d}+0000 {node} sm-llm[{line.pid}]: {line.message}"


def write_dumps(directory: Path, seed: int, start_us: int, end_us: int) -> dict[str, Path]:
    """Each demo node's journal over [start_us, end_us) as a short-iso-precise dump file."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for node in NODES:
        path = directory / f"{node}.log"
        with path.open("w", encoding="utf-8") as f:
            f.writelines(
                short_iso(node, line) + "\n" for line in node_lines(node, seed, start_us, end_us)
            )
        paths[node] = path
    return paths


def demo_config(directory: Path, listen: tuple[str, int], since_us: int) -> Config:
    """Three file nodes over the demo's dumps, state kept beside them; `listen` is (host,
    port)."""
    since = datetime.fromtimestamp(since_us / SECOND, UTC).isoformat()
    return Config(
        listen_host=listen[0],
        listen_port=listen[1],
        state_dir=directory / "state",
        since=since,
        nodes=tuple(FileNode(n, directory / f"{n}.log") for n in NODES),
    )


class Appender:
    """Writes the last hour of the demo now, then each later line when its time comes."""

    def __init__(
        self,
        directory: Path,
        *,
        clock: Callable[[], float] = time.time,
        seed: int = SEED,
        hours: float = 1.0,
    ) -> None:
        self.directory = directory
        self.clock = clock
        now = int(clock() * SECOND)
        self.start_us = now - int(hours * 3600 * SECOND)
        far = now + 365 * 86_400 * SECOND
        self._streams = {n: node_lines(n, seed, self.start_us, far) for n in NODES}
        self._next: list[tuple[int, str, DemoLine]] = []
        for node, stream in self._streams.items():
            self._push(node, stream)
        directory.mkdir(parents=True, exist_ok=True)
        for node in NODES:
            (directory / f"{node}.log").write_bytes(b"")
        self.write_due(now)

    def _push(self, node: str, stream: Iterator[DemoLine]) -> None:
        line = next(stream, None)
        if line is not None:
            heapq.heappush(self._next, (line.time_us, node, line))

    def write_due(self, now_us: int) -> int:
        """Append every line whose time has come; returns how many."""
        due: dict[str, list[str]] = {}
        while self._next and self._next[0][0] <= now_us:
            _, node, line = heapq.heappop(self._next)
            due.setdefault(node, []).append(short_iso(node, line) + "\n")
            self._push(node, self._streams[node])
        for node, lines in due.items():
            with (self.directory / f"{node}.log").open("a", encoding="utf-8") as f:
                f.writelines(lines)
        return sum(map(len, due.values()))

    async def run(self) -> None:
        while True:
            wait = (self._next[0][0] / SECOND - self.clock()) if self._next else 1.0
            await asyncio.sleep(min(max(wait, 0.05), 1.0))
            await asyncio.to_thread(self.write_due, int(self.clock() * SECOND))


async def run_demo(directory: Path, listen: tuple[str, int]) -> None:
    """The daemon on three demo nodes whose journals grow as their time comes. The daemon's
    OSError (the port taken, the state directory in use) and the appender's come as they are,
    not in an exception group."""
    appender = Appender(directory)
    log.info("demo journals in %s (the last hour, growing)", shown(directory))
    daemon = Daemon(demo_config(directory, listen, appender.start_us))
    appending = asyncio.create_task(appender.run(), name="demo appender")
    main = asyncio.current_task()

    def stop_if_failed(task: asyncio.Task[None]) -> None:
        """The appender failed (its error is raised below): the daemon stops."""
        if not task.cancelled() and task.exception() is not None and main is not None:
            main.cancel()

    appending.add_done_callback(stop_if_failed)
    try:
        await daemon.run_until_signalled()
    finally:
        appending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await appending  # (the appender's own error, if it failed)


@contextmanager
def demo_directory(given: Path | None = None) -> Iterator[Path]:
    """Where the demo's journals go: `given` (the user's `--dir`, never removed), else a new
    temporary directory that is removed on the way out, however the demo ends (a normal exit,
    an exception, SIGINT, or SIGTERM: one that comes while the daemon's own handlers are not
    installed yet, or no longer, ends the demo through this cleanup too)."""
    if given is not None:
        yield given
        return
    directory = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))

    def terminated(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    main = threading.current_thread() is threading.main_thread()  # (signals: main thread only)
    previous = signal.signal(signal.SIGTERM, terminated) if main else None
    try:
        yield directory
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(directory, ignore_errors=True)
        log.info("demo journals in %s removed", shown(directory))


def main(given: Path | None, listen: tuple[str, int]) -> int:
    """The `demo` command: the daemon on the demo's journals, in `given` (`--dir`) or a
    temporary directory, until SIGTERM or SIGINT: 0, or 1 when it cannot run."""
    with demo_directory(given) as directory:
        try:
            asyncio.run(run_demo(directory, listen))
        except OSError as e:  # the port taken, the directory not writable: no traceback
            log.error("cannot run the demo: %s", e)
            return 1
    return 0
