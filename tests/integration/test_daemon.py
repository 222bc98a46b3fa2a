"""The daemon end to end: real dump files followed, /metrics over real HTTP, real promtool."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from exporter import __version__
from exporter.base.records import Batch, LogLine
from exporter.base.times import SECOND
from exporter.checkpoint import codec
from exporter.checkpoint.store import Checkpoint
from exporter.commands.demo import NODES, node_lines, short_iso
from exporter.config.schema import Config
from exporter.daemon.daemon import Daemon
from exporter.sources.base import SourceError
from exporter.sources.file import FileNode
from exporter.sources.registry import NodeConfig

from support.daemon_thread import DaemonThread
from support.dumps import END, SINCE, START, config_for, report_of_dumps, write_dumps
from support.readme import metric_table
from support.scrape import Samples, http_get, parse_metrics, sample
from support.tools import free_port, require_tool, wait_for

REPO = Path(__file__).resolve().parents[2]


METRICS_TABLE = [
    "smllm_requests_total",
    "smllm_request_seconds_total",
    "smllm_tokens_total",
    "smllm_prompt_tokens_total",
    "smllm_generated_tokens_total",
    "smllm_prompt_seconds_total",
    "smllm_generation_seconds_total",
    "smllm_request_duration_seconds_bucket",
    "smllm_request_duration_seconds_sum",
    "smllm_request_duration_seconds_count",
    "smllm_requests_untimed_total",
    "smllm_untimed_request_seconds_total",
    "smllm_node_busy_seconds_total",
    "smllm_slot_busy_seconds_total",
    "smllm_node_slots",
    "smllm_server_up",
    "smllm_node_requests_in_flight",
    "smllm_node_busy",
    "smllm_nodes_busy",
    "smllm_concurrency_seconds_total",
    "smllm_mix_seconds_total",
    "smllm_accounted_until_timestamp_seconds",
    "smllm_node_last_request_end_timestamp_seconds",
    "smllm_requests_aborted_total",
    "smllm_server_restarts_total",
    "smllm_source_up",
    "smllm_source_lag_seconds",
    "smllm_source_gaps_total",
    "smllm_checkpoint_errors_total",
    "smllm_source_reconnects_total",
    "smllm_source_entries_total",
    "smllm_parse_errors_total",
    "smllm_late_intervals_total",
    "smllm_exporter_build_info",
    "process_resident_memory_bytes",
    "process_cpu_seconds_total",
]


@pytest.fixture
def dumps(tmp_path: Path) -> dict[str, Path]:
    return write_dumps(tmp_path)


def caught_up(
    d: DaemonThread, paths: dict[str, Path]
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    samples = parse_metrics(d.metrics())
    for node, path in paths.items():
        lines = path.read_bytes().count(b"\n")
        if sample(samples, "smllm_source_entries_total", node=node) != lines:
            return None
    return samples


def test_every_metric_served_and_promtool_clean(dumps: dict[str, Path], tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    with DaemonThread(Daemon(config_for(dumps), publish_seconds=0.1)) as d:
        samples = wait_for(lambda: caught_up(d, dumps), 20, "every line read")
        text = d.metrics()
    names = {name for name, _ in samples}
    missing = [m for m in METRICS_TABLE if m not in names]
    assert not missing
    # the metrics page's table names every family served, and serves every row it has (but
    # those it says are absent until seen)
    table = metric_table()
    served = {re.sub(r"_(bucket|count|sum)$", "", n) for n in names if n.startswith("smllm_")}
    assert sorted(n for n in served if n not in table) == []
    unseen = sorted(n for n in table if n not in served and "absent" not in table[n][2])
    assert unseen == []
    for node in NODES:
        for kind in ("extraction", "reconcile"):
            assert (sample(samples, "smllm_requests_total", node=node, kind=kind) or 0) > 0
        # the demo's embeddings and client cancels: occupancies without timing, by reason
        for reason in ("cancelled", "untimed"):
            labels = {"node": node, "reason": reason}
            assert (sample(samples, "smllm_requests_untimed_total", **labels) or 0) > 0
            assert (sample(samples, "smllm_untimed_request_seconds_total", **labels) or 0) > 0
        assert sample(samples, "smllm_requests_untimed_total", node=node, reason="lost") == 0
        assert sample(samples, "smllm_node_slots", node=node) == 1  # its start-up line
        assert sample(samples, "smllm_server_up", node=node) == 1
        # (accounted up to the watermark, which may not have moved yet: at least as much)
        busy = sample(samples, "smllm_node_busy_seconds_total", node=node)
        slot_busy = sample(samples, "smllm_slot_busy_seconds_total", node=node)
        assert busy is not None and slot_busy is not None and slot_busy >= busy
    assert {dict(lbl)["reason"] for n, lbl in samples if n == "smllm_requests_untimed_total"} == {
        "cancelled",
        "error",
        "untimed",
        "lost",
    }
    assert {dict(lbl)["mix"] for n, lbl in samples if n == "smllm_mix_seconds_total"} == {
        "idle",
        "extraction",
        "reconcile",
        "extraction+reconcile",
    }
    assert {
        dict(lbl)["nodes_busy"] for n, lbl in samples if n == "smllm_concurrency_seconds_total"
    } == {"0", "1", "2", "3"}
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), (
        check.stdout + check.stderr
    )


def test_series_exist_at_zero_from_start(tmp_path: Path) -> None:
    paths = {n: tmp_path / f"missing-{n}.log" for n in NODES}
    with DaemonThread(Daemon(config_for(paths))) as d:
        samples = parse_metrics(d.metrics())
        for node in NODES:
            for kind in ("extraction", "reconcile"):
                assert sample(samples, "smllm_requests_total", node=node, kind=kind) == 0
                assert (
                    sample(samples, "smllm_request_duration_seconds_count", node=node, kind=kind)
                    == 0
                )
            assert sample(samples, "smllm_node_busy_seconds_total", node=node) == 0
            assert sample(samples, "smllm_slot_busy_seconds_total", node=node) == 0
            for reason in ("cancelled", "error", "untimed", "lost"):
                labels = {"node": node, "reason": reason}
                assert sample(samples, "smllm_requests_untimed_total", **labels) == 0
                assert sample(samples, "smllm_untimed_request_seconds_total", **labels) == 0
            # nothing said yet: the slots and the server's state are not known
            assert sample(samples, "smllm_node_slots", node=node) is None
            assert sample(samples, "smllm_server_up", node=node) is None
            assert (
                sample(samples, "smllm_node_last_request_end_timestamp_seconds", node=node) is None
            )
            assert (
                sample(samples, "smllm_node_oldest_in_flight_start_timestamp_seconds", node=node)
                is None
            )
        for mix in ("idle", "extraction", "reconcile", "extraction+reconcile"):
            assert sample(samples, "smllm_mix_seconds_total", mix=mix) is not None
        # the files do not exist: their sources are down, and say so once published
        wait_for(
            lambda: all(
                sample(parse_metrics(d.metrics()), "smllm_source_up", node=n) == 0 for n in NODES
            ),
            10,
            "source_up 0",
        )


def test_a_failing_source_never_stops_the_others(dumps: dict[str, Path], tmp_path: Path) -> None:
    broken = tmp_path / "a-directory"
    broken.mkdir()
    paths = {**dumps, "broken": broken}
    with DaemonThread(Daemon(config_for(paths), publish_seconds=0.1)) as d:
        samples = wait_for(lambda: caught_up(d, dumps), 20, "the good nodes read")
        assert sample(samples, "smllm_source_up", node="broken") == 0
        assert all(sample(samples, "smllm_source_up", node=n) == 1 for n in NODES)
        assert d.daemon.turns > 0


def test_daemon_figures_equal_the_report(dumps: dict[str, Path]) -> None:
    """The live pipeline and the one-shot report agree on the same lines, to the microsecond."""
    cfg = config_for(dumps)

    def read_and_accounted(d: DaemonThread) -> Samples | None:
        """Every line read, and the watermark past the last (caught up and idle: now - 2 s,
        from the tick after the last batch)."""
        samples = caught_up(d, dumps)
        accounted = samples and sample(samples, "smllm_accounted_until_timestamp_seconds")
        return samples if accounted and accounted * SECOND > END else None

    with DaemonThread(Daemon(cfg, publish_seconds=0.1)) as d:
        samples = wait_for(lambda: read_and_accounted(d), 20, "every line read and accounted")
    watermark = round(sample(samples, "smllm_accounted_until_timestamp_seconds") * SECOND)  # type: ignore[operator]
    r = report_of_dumps(dumps, cfg.kinds, START, watermark)
    snap = r.snapshot
    for k, v in enumerate(snap.concurrency_us):
        assert sample(
            samples, "smllm_concurrency_seconds_total", nodes_busy=str(k)
        ) == pytest.approx(v / SECOND, abs=1e-6)
    for mix, v in snap.mix_us.items():
        assert sample(samples, "smllm_mix_seconds_total", mix=mix) == pytest.approx(
            v / SECOND, abs=1e-6
        )
    for n in snap.nodes:
        assert sample(samples, "smllm_node_busy_seconds_total", node=n.name) == pytest.approx(
            n.busy_us / SECOND, abs=1e-6
        )
        for kind, c in n.kinds.items():
            assert sample(samples, "smllm_requests_total", node=n.name, kind=kind) == c.requests
            assert sample(samples, "smllm_tokens_total", node=n.name, kind=kind) == c.tokens
            assert sample(
                samples, "smllm_request_seconds_total", node=n.name, kind=kind
            ) == pytest.approx(c.request_us / SECOND, abs=1e-6)


def test_lines_appended_while_running_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "node0.log"
    lines = [short_iso("node0", x) for x in node_lines("node0", 3, START, END)]
    half = len(lines) // 2
    path.write_text("\n".join(lines[:half]) + "\n")
    with DaemonThread(Daemon(config_for({"node0": path}), publish_seconds=0.1)) as d:

        def requests() -> float:
            s = parse_metrics(d.metrics())
            return sum(v for (n, _), v in s.items() if n == "smllm_requests_total")

        first = wait_for(lambda: requests() or None, 10, "the first half counted")
        with path.open("a") as f:
            f.write("\n".join(lines[half:]) + "\n")
        total = sum(1 for x in lines if "total time" in x)
        wait_for(lambda: requests() == total, 10, "the appended half counted")
        assert first < total


def test_http_endpoints(tmp_path: Path) -> None:
    with DaemonThread(Daemon(config_for({"n": tmp_path / "n.log"}))) as d:
        assert http_get(d.url + "/-/healthy")[0] == 200
        wait_for(lambda: http_get(d.url + "/-/ready")[0] == 200, 10, "ready")
        status, body, headers = http_get(d.url + "/metrics", {"Accept-Encoding": "gzip"})
        assert status == 200 and headers.get("Content-Encoding") == "gzip"
        assert b"smllm_exporter_build_info" in gzip.decompress(body)
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert http_get(d.url + "/")[0] == 200
        assert http_get(d.url + "/nope")[0] == 404
        status, _, _ = http_get(d.url + "/metrics?x=1")
        assert status == 200
        req = urllib.request.Request(d.url + "/metrics", data=b"x", method="POST")
        try:
            urllib.request.urlopen(req, timeout=5)
            code = 200
        except urllib.error.HTTPError as e:
            code = e.code
        assert code == 405
        # raw requests: bare LF line ends answered like CRLF (RFC 9112), junk and a head too
        # long refused or closed, never left hanging
        assert raw_request(d, b"GET /-/healthy HTTP/1.1\nHost: x\n\n").startswith(
            b"HTTP/1.1 200 OK\r\n"
        )
        assert raw_request(d, b"GARBAGE\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert raw_request(d, b"GET / HTTP/1.1\r\nX: " + b"y" * 70_000 + b"\r\n\r\n") == b""


def raw_request(d: DaemonThread, data: bytes) -> bytes:
    """What the daemon's server sends back for `data`: one whole answer (a kept-alive connection
    stays open after it), or what came until it closed (5 s at most)."""
    assert d.daemon.address is not None
    with socket.create_connection(("127.0.0.1", d.daemon.address[1]), timeout=5) as sock:
        out = b""
        try:
            sock.sendall(data)
            while not _whole_answer(out) and (chunk := sock.recv(65536)):
                out += chunk
        except ConnectionResetError:  # closed with our bytes unread: a reset, not a FIN
            pass
        return out


def _whole_answer(out: bytes) -> bool:
    head, sep, body = out.partition(b"\r\n\r\n")
    length = re.search(rb"\r\nContent-Length: (\d+)", head)
    return bool(sep) and length is not None and len(body) >= int(length[1])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_the_daemon_cleanly(
    dumps: dict[str, Path], tmp_path: Path, sig: signal.Signals
) -> None:
    port = free_port()
    cfg = tmp_path / "config.yaml"
    nodes = "\n".join(f"  - {{name: {n}, source: file, path: {p}}}" for n, p in dumps.items())
    cfg.write_text(
        f'listen: "127.0.0.1:{port}"\nsince: "{SINCE}"\nstate_dir: {tmp_path / "state"}\n'
        f"nodes:\n{nodes}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "run", "--config", str(cfg)],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: _ready(port), 20, "the daemon ready")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert f"serving /metrics on 127.0.0.1:{port}" in err
    assert "stopping" in err
    assert "Traceback" not in err


def _ready(port: int) -> bool:
    try:
        return http_get(f"http://127.0.0.1:{port}/-/ready")[0] == 200
    except OSError:
        return False


def test_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "exporter", "--version"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    assert out.strip() == f"sm-llm-exporter {__version__}"


@pytest.mark.slow
def test_demo_shows_counters_moving(tmp_path: Path) -> None:
    """The README's demo: within seconds, counters move and the active-node gauge changes."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "demo",
            "--dir",
            str(tmp_path),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        wait_for(lambda: _ready(port), 20, "the demo ready")
        seen_busy: set[float] = set()
        requests: list[float] = []

        def moved() -> bool:
            s = parse_metrics(http_get(f"http://127.0.0.1:{port}/metrics")[1].decode())
            seen_busy.add(sample(s, "smllm_nodes_busy") or 0)
            total = sum(v for (n, _), v in s.items() if n == "smllm_requests_total")
            if total:  # the last hour is in: from here on, counters must move
                requests.append(total)
            return len(seen_busy) >= 2 and len(requests) > 1 and requests[-1] > requests[0]

        wait_for(moved, 30, "counters moving and smllm_nodes_busy changing")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)
    assert proc.returncode == 0


TOTAL_LINE = "slot print_timing: id  0 | task {task} |       total time =  1000.00 ms /  100 tokens"


def stand_in_config(tmp_path: Path, names: Sequence[str], since: str) -> Config:
    """File nodes whose files are never read: the tests give stand-in sources (source_factory)."""
    return Config(
        listen_host="127.0.0.1",
        listen_port=0,
        state_dir=tmp_path / "state",
        since=since,
        nodes=tuple(FileNode(n, tmp_path / "unused") for n in names),
    )


async def run_until(d: Daemon, done: Callable[[], bool], timeout: float) -> None:
    """`d.run()` until `done()` holds (checked every 10 ms, failing after `timeout` s), then
    cancelled as the service is."""
    task = asyncio.create_task(d.run())
    try:
        async with asyncio.timeout(timeout):
            while not done():
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_a_restarted_source_starts_after_what_its_predecessor_handed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source hands over a batch and fails while the ingest loop is still busy (a slow
    checkpoint write): the next source must start after that batch, not from the position
    last applied, or its requests count twice. (A stand-in source: what matters is the order
    of hand-over, failure and restart, which a real one cannot be made to hit on cue.)"""
    lines = tuple(
        LogLine("n0", START + i * 10 * SECOND, "", 42, TOTAL_LINE.format(task=i))
        for i in range(1, 4)
    )
    starts: list[str] = []
    writing, second_started = threading.Event(), threading.Event()

    class HandsOverThenFails:
        def __init__(self, node: object, since_us: int, position: str) -> None:
            self.position = int(position or 0)
            starts.append(position)
            if len(starts) == 2:
                second_started.set()

        async def run(self, out: asyncio.Queue[Batch]) -> None:
            while not writing.is_set():  # hand over while the ingest loop is in the write
                await asyncio.sleep(0.01)
            await out.put(
                Batch(
                    "n0",
                    lines[self.position :],
                    entries=len(lines) - self.position,
                    newest_us=lines[-1].time_us,
                    position=str(len(lines)),
                    caught_up=True,
                )
            )
            if len(starts) == 1:
                raise SourceError("node n0: connection reset")
            await asyncio.Event().wait()  # followed from here on

    write = Checkpoint.write

    def slow_write(self: Checkpoint, data: bytes) -> None:
        writing.set()
        second_started.wait(3)  # a busy disk: held until the retry starts (or 3 s)
        write(self, data)

    monkeypatch.setattr(Checkpoint, "write", slow_write)
    cfg = stand_in_config(tmp_path, ["n0"], SINCE)
    d = Daemon(cfg, source_factory=HandsOverThenFails, publish_seconds=0.05)
    asyncio.run(
        run_until(
            d, lambda: len(starts) >= 2 and d.nodes["n0"].position == "3" and d.turns >= 10, 20
        )
    )
    assert starts == ["", "3"]
    assert sum(c.requests for c in d.acc.nodes["n0"].kinds.values()) == len(lines)


def test_a_wall_clock_stepped_back_does_not_hold_the_publishing(tmp_path: Path) -> None:
    """NTP steps the clock back an hour: checkpoints and publishes go on by the monotonic
    clock, and a request read after the step is served at once, not an hour later."""
    path = tmp_path / "n0.log"
    path.write_text("")
    offset = [0.0]
    d = Daemon(config_for({"n0": path}), clock=lambda: time.time() + offset[0], publish_seconds=0.1)
    with DaemonThread(d) as t:
        wait_for(lambda: sample(parse_metrics(t.metrics()), "smllm_source_up", node="n0"), 10, "up")
        offset[0] = -3600.0
        stamp = datetime.fromtimestamp(START // SECOND + 60, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        with path.open("a") as f:
            f.write(f"{stamp}.000000+0000 h sm-llm[7]: {TOTAL_LINE.format(task=5)}\n")

        def served() -> float | None:
            s = parse_metrics(t.metrics())
            return sum(v for (name, _), v in s.items() if name == "smllm_requests_total") or None

        assert wait_for(served, 10, "the request served after the step") == 1


@pytest.mark.slow
def test_a_slow_checkpoint_write_holds_up_no_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One checkpoint write takes 3 s (a stalled disk) while 20 caught-up nodes keep logging a
    request every 0.25 s: the ingest loop goes on applying them meanwhile, so none arrives
    behind the watermark (late, its busy seconds partly missed). (Stand-in sources: a real one
    cannot be made to log on cue for 20 nodes.)"""
    nodes = [f"n{i}" for i in range(20)]
    stalled = threading.Event()

    class Live:
        def __init__(self, node: FileNode, since_us: int, position: str) -> None:
            self.node, self.k = node.name, 0

        async def run(self, out: asyncio.Queue[Batch]) -> None:
            await out.put(Batch(self.node, caught_up=True))
            while True:
                await asyncio.sleep(0.25)
                self.k += 1
                t = int(time.time() * SECOND)
                launch = f"slot launch_slot_: id  0 | task {self.k} | processing task"
                lines = (
                    LogLine(self.node, t - 200_000, "", 7, launch),
                    LogLine(
                        self.node, t, "", 7, TOTAL_LINE.format(task=self.k).replace("1000", "200")
                    ),
                )
                await out.put(
                    Batch(
                        self.node,
                        lines,
                        entries=2,
                        newest_us=t,
                        position=str(self.k),
                        caught_up=True,
                    )
                )

    write, writes = Checkpoint.write, [0]

    def slow_third_write(self: Checkpoint, data: bytes) -> None:
        writes[0] += 1
        if writes[0] == 3:
            time.sleep(3)  # the stalled disk (the thing simulated, not a wait for a result)
            stalled.set()
        write(self, data)

    monkeypatch.setattr(Checkpoint, "write", slow_third_write)
    d = Daemon(stand_in_config(tmp_path, nodes, "-1m"), source_factory=Live)  # type: ignore[arg-type]

    def requests() -> int:
        return sum(c.requests for ns in d.acc.nodes.values() for c in ns.kinds.values())

    after: list[int] = []  # once the stalled write is over: a second more of logging

    def logged_on() -> bool:
        if stalled.is_set() and not after:
            after.append(requests() + 4 * len(nodes))
        return bool(after) and requests() >= after[0]

    asyncio.run(run_until(d, logged_on, 30))
    assert requests() > 12 * len(nodes)
    assert sum(ns.late for ns in d.acc.nodes.values()) == 0


POISON_TIMES = ("18446744073709551616", "9999999999999999999")  # 2**64, and over 2**63


def poisoned_dump(path: Path, before: int, after: int) -> int:
    """A `-o json` dump of one-slot requests with entries whose time does not fit in 64 bits
    between them; returns how many requests it holds."""
    rows = []
    t = START
    for i in range(before + after):
        if i == before:
            for j, poison in enumerate(POISON_TIMES):
                rows.append(
                    {
                        "__CURSOR": f"s=p;i={j}",
                        "__REALTIME_TIMESTAMP": poison,
                        "_PID": "42",
                        "MESSAGE": TOTAL_LINE.format(task=10_000 + j),
                    }
                )
        t += 5 * SECOND
        rows.append(
            {
                "__CURSOR": f"s=a;i={i}",
                "__REALTIME_TIMESTAMP": str(t),
                "_PID": "42",
                "MESSAGE": TOTAL_LINE.format(task=i),
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return before + after


def test_a_poison_line_is_counted_skipped_and_stops_no_node(tmp_path: Path) -> None:
    """Entries stamped beyond 64 bits once raised out of the compiled parser, stopped every
    node and, the saved position being before them, crashed every restart."""
    clean = write_dumps(tmp_path)
    poisoned = tmp_path / "poisoned.json"
    n_poisoned = poisoned_dump(poisoned, 7, 5)
    dumps = {"node0": clean["node0"], "poisoned": poisoned}
    cfg = config_for(dumps)
    want = report_of_dumps({"node0": clean["node0"]}, cfg.kinds, START, END + 3600 * SECOND)
    (want_node0,) = want.snapshot.nodes
    want_requests = {k: c.requests for k, c in want_node0.kinds.items()}
    assert sum(want_requests.values()) > 10

    for run in range(2):  # and a restart from the checkpoint does not crash either
        with DaemonThread(Daemon(cfg, publish_seconds=0.1)) as d:

            def followed(d: DaemonThread = d) -> Samples | None:
                samples = caught_up(d, dumps)
                ups = [sample(samples, "smllm_source_up", node=n) for n in dumps] if samples else []
                return samples if ups == [1] * len(dumps) else None

            samples = wait_for(followed, 20, f"every line read, run {run}")
        got = {
            k: sample(samples, "smllm_requests_total", node="node0", kind=k) for k in want_requests
        }
        assert got == want_requests
        poisoned_requests = sum(
            sample(samples, "smllm_requests_total", node="poisoned", kind=k) or 0
            for k in want_requests
        )
        assert poisoned_requests == n_poisoned  # before and after the poison
        assert sample(samples, "smllm_parse_errors_total", node="poisoned") == len(POISON_TIMES)


def test_a_logline_beyond_64_bits_from_a_source_is_that_lines_parse_error(
    tmp_path: Path,
) -> None:
    """What a source hands over unchecked (systemd-python gives any 64-bit journal time) goes
    through the compiled parser too: counted and skipped, the node and the others going on."""
    good = [LogLine("n0", START + i * SECOND, "", 42, TOTAL_LINE.format(task=i)) for i in (1, 2)]
    poison = [
        LogLine("n0", t, "", p, TOTAL_LINE.format(task=9))
        for t, p in ((2**64, 42), (-(2**63) - 1, 42), (START + 1, 2**70))
    ]
    lines = (good[0], *poison, good[1])

    class Once:
        def __init__(self, node: NodeConfig, since_us: int, position: str) -> None:
            self.node = node.name

        async def run(self, out: asyncio.Queue[Batch]) -> None:
            await out.put(
                Batch(
                    self.node,
                    lines if self.node == "n0" else tuple(good),
                    entries=len(lines),
                    newest_us=START + 2 * SECOND,
                    caught_up=True,
                )
            )
            await asyncio.Event().wait()

    d = Daemon(stand_in_config(tmp_path, ["n0", "n1"], SINCE), source_factory=Once)
    asyncio.run(run_until(d, lambda: d.acc.nodes["n0"].entries == len(lines), 10))
    n0, n1 = d.acc.nodes["n0"], d.acc.nodes["n1"]
    assert sum(c.requests for c in n0.kinds.values()) == 3  # the good ones and pid 2**70's
    assert n0.parse_errors == 2
    assert sum(c.requests for c in n1.kinds.values()) == 2 and n1.parse_errors == 0


def test_a_state_taken_earlier_never_replaces_a_newer_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A periodic checkpoint's worker thread is still encoding its state when the service is
    stopped: the final checkpoint (taken later) is written first, and the worker's older state
    must not land over it (test_systemd once saw the checkpoint go back in time so)."""
    encode, write = codec.Encoder.encode, Checkpoint.write
    final_written, worker_encoding = threading.Event(), threading.Event()
    finals: list[bytes] = []

    def encode_held_in_workers(self: codec.Encoder, state: dict[str, object]) -> bytes:
        data = encode(self, state)
        if threading.current_thread() is not threading.main_thread() and not finals:
            worker_encoding.set()
            final_written.wait(10)  # (until the final write has been made, or 10 s)
        return data

    def write_noting_the_final(self: Checkpoint, data: bytes) -> None:
        write(self, data)
        if threading.current_thread() is threading.main_thread():
            finals.append(data)
            final_written.set()

    monkeypatch.setattr(codec.Encoder, "encode", encode_held_in_workers)
    monkeypatch.setattr(Checkpoint, "write", write_noting_the_final)

    class Idle:
        def __init__(self, node: FileNode, since_us: int, position: str) -> None:
            self.node = node.name

        async def run(self, out: asyncio.Queue[Batch]) -> None:
            await out.put(Batch(self.node, caught_up=True))
            await asyncio.Event().wait()

    cfg = stand_in_config(tmp_path, ["n0"], "-1m")
    d = Daemon(cfg, source_factory=Idle, publish_seconds=0.05)  # type: ignore[arg-type]
    asyncio.run(run_until(d, worker_encoding.is_set, 20))  # (asyncio.run waits for the worker)
    assert len(finals) == 1
    assert d.checkpoint.path.read_bytes() == finals[0]
