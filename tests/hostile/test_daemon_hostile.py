"""The daemon's own defects of issue 27: a node whose source changes kind, a misspelt `unit:`,
repeated events logged without bound, a SIGHUP while starting, a config read that hangs.

Real parts throughout: the daemon as a process (`python -m exporter run`) where the point is
about the process, real journal files written by Debian's systemd-journal-remote for the
journal source, a real FIFO for the config that hangs. The one stand-in: a reloader that blocks
on an event, for a config read that hangs longer than the deadline (no hung NFS mount here).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from exporter.commands.demo import DemoLine, short_iso
from exporter.config.load import load
from exporter.config.schema import Config
from exporter.daemon.daemon import Daemon

from support.daemon_process import DaemonProcess, file_nodes, run_command
from support.daemon_thread import DaemonThread
from support.journals import JOURNAL_REMOTE, require_journal_tools
from support.scrape import answer, sample, total
from support.tools import now_us, wait_for

SECOND = 1_000_000
UNIT = "sm-llm.service"
PID = 4242
NODE = "n0"
BOOT_ID = "5c3a0f6e2b8d4c1e9a7f0b3d6e2c8a41"
DEADLINE_S = 20.0


def request_lines(task: int, end_us: int, pid: int = PID) -> list[DemoLine]:
    """One 1 s request on slot 0 ending at `end_us`: launch, timing, release."""
    p = f"slot print_timing: id  0 | task {task} | "
    return [
        DemoLine(end_us - SECOND, pid, f"slot launch_slot_: id  0 | task {task} | processing task"),
        DemoLine(end_us, pid, p + "prompt eval time =     500.00 ms /   100 tokens"),
        DemoLine(end_us, pid, p + "       eval time =     500.00 ms /    10 tokens"),
        DemoLine(end_us, pid, p + "      total time =    1000.00 ms /   110 tokens"),
        DemoLine(end_us + 10, pid, f"slot      release: id  0 | task {task} | stop processing"),
    ]


def requests_of(m: dict[Any, float], node: str = NODE) -> float:
    return total(m, "smllm_requests_total", node=node)


# -- journal files, written by systemd-journal-remote --------------------------------------------


@pytest.fixture
def journal_remote() -> None:
    """systemd-journal-remote, journalctl and systemd-python, or fail in CI / skip elsewhere."""
    require_journal_tools()


def export(lines: Iterable[DemoLine], unit: str = UNIT) -> bytes:
    """Journal export format of `lines` as the unit's entries (all fields printable)."""
    out = bytearray()
    for ln in lines:
        fields = {
            "__REALTIME_TIMESTAMP": str(ln.time_us),
            "__MONOTONIC_TIMESTAMP": str(ln.time_us - 1_700_000_000 * SECOND),
            "_BOOT_ID": BOOT_ID,
            "_SYSTEMD_UNIT": unit,
            "_HOSTNAME": "node0",
            "SYSLOG_IDENTIFIER": "sm-llm",
            "_PID": str(ln.pid),
        }
        for key, value in fields.items():
            out += f"{key}={value}\n".encode()
        message = ln.message.encode()
        out += b"MESSAGE\n" + struct.pack("<Q", len(message)) + message + b"\n\n"
    return bytes(out)


def write_journal(path: Path, lines: Sequence[DemoLine], unit: str = UNIT) -> None:
    """Append `lines` to the journal file `path` (one run of systemd-journal-remote)."""
    done = subprocess.run(
        [JOURNAL_REMOTE, "-o", str(path), "-"],
        input=export(lines, unit),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")


# -- 2. a node's source changes kind ---------------------------------------------------------------


def dump_and_journal(tmp_path: Path) -> tuple[Path, Path, int]:
    """Three requests as a dump and as a journal directory of the same entries; the time after
    which a fourth can come."""
    start = now_us() - 60 * SECOND
    lines = [ln for t in range(3) for ln in request_lines(t, start + (t + 1) * 5 * SECOND)]
    dump = tmp_path / f"{NODE}.log"
    dump.write_text("".join(short_iso(NODE, ln) + "\n" for ln in lines))
    directory = tmp_path / "journal"
    directory.mkdir()
    write_journal(directory / "remote.journal", lines)
    return dump, directory, start + 30 * SECOND


def journal_row(directory: Path) -> dict[str, str]:
    return {"name": NODE, "source": "journal", "unit": UNIT, "directory": str(directory)}


def counted(d: DaemonProcess, n: int) -> dict[Any, float] | None:
    """The samples once `n` requests of the node are served, its source up and caught up."""
    m = d.metrics()
    if requests_of(m) < n or sample(m, "smllm_source_up", node=NODE) != 1:
        return None
    return m if sample(m, "smllm_source_lag_seconds", node=NODE) == 0 else None


def a_fourth_request_counts_once(d: DaemonProcess, directory: Path, end_us: int) -> None:
    """Append a fourth request to the journal: once it is served, 4 requests (not 3 + 3 + 1)."""
    write_journal(directory / "remote.journal", request_lines(3, end_us))
    m = wait_for(lambda: counted(d, 4), DEADLINE_S, "the fourth request")
    assert requests_of(m) == 4, d.log_text()[-3000:]
    assert sample(m, "smllm_source_gaps_total", node=NODE) == 0


@pytest.mark.slow
@pytest.mark.usefixtures("journal_remote")
def test_a_dump_node_moved_to_its_journal_is_not_counted_twice_on_restart(tmp_path: Path) -> None:
    dump, directory, later = dump_and_journal(tmp_path)
    settings = {"nodes": file_nodes({NODE: dump}), "since": "-10m"}
    with DaemonProcess(tmp_path / "d", settings) as d:
        d.start()
        assert requests_of(wait_for(lambda: counted(d, 3), DEADLINE_S, "3 requests")) == 3
        d.stop()
        assert d.settings is not None
        d.settings["nodes"] = [journal_row(directory)]
        d.start()
        wait_for(lambda: counted(d, 3), DEADLINE_S, "the journal followed")
        a_fourth_request_counts_once(d, directory, later)
        log = d.stop()
    assert "its source is now of kind journal, its saved position of kind file" in log


@pytest.mark.slow
@pytest.mark.usefixtures("journal_remote")
def test_a_dump_node_moved_to_its_journal_is_not_counted_twice_on_reload(tmp_path: Path) -> None:
    dump, directory, later = dump_and_journal(tmp_path)
    settings = {"nodes": file_nodes({NODE: dump}), "since": "-10m"}
    with DaemonProcess(tmp_path / "d", settings) as d:
        d.start()
        assert requests_of(wait_for(lambda: counted(d, 3), DEADLINE_S, "3 requests")) == 3
        assert d.settings is not None and d.proc is not None
        d.config.write_text(
            json.dumps(
                {**d.settings, "nodes": [journal_row(directory)], "listen": f"127.0.0.1:{d.port}"}
            )
        )
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "its saved position of kind file" in d.log_text(), DEADLINE_S, "reload")
        a_fourth_request_counts_once(d, directory, later)
        d.stop()


@pytest.mark.slow
def test_a_dump_moved_to_another_path_is_not_counted_twice_on_restart(tmp_path: Path) -> None:
    """The same kind, another file: its saved position (another inode) cannot be used, and the
    node reads the new file from after the journal time it had read, not from `since`."""
    dump, _, later = dump_and_journal(tmp_path)
    moved = tmp_path / "moved.log"
    settings = {"nodes": file_nodes({NODE: dump}), "since": "-10m"}
    with DaemonProcess(tmp_path / "d", settings) as d:
        d.start()
        assert requests_of(wait_for(lambda: counted(d, 3), DEADLINE_S, "3 requests")) == 3
        d.stop()
        shutil.copyfile(dump, moved)
        assert d.settings is not None
        d.settings["nodes"] = file_nodes({NODE: moved})
        d.start()
        with moved.open("a") as f:  # (once it is served, 4 requests: not 3 + 3 + 1)
            f.writelines(short_iso(NODE, ln) + "\n" for ln in request_lines(3, later))
        m = wait_for(lambda: counted(d, 4), DEADLINE_S, "the fourth request")
        assert requests_of(m) == 4, d.log_text()[-3000:]
        d.stop()


# -- 3. a misspelt unit ----------------------------------------------------------------------------


def quiet_settings(tmp_path: Path) -> dict[str, str]:
    """The settings of an in-process daemon's config: its own state, any free port."""
    return {"since": "-10m", "state_dir": str(tmp_path / "state"), "listen": "127.0.0.1:0"}


@pytest.mark.slow
@pytest.mark.usefixtures("journal_remote")
def test_a_unit_that_has_no_entry_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two journal nodes on the same journal directory, one with its unit misspelt: that one,
    once its source has been caught up for a while (shortened here) with no entry read, is
    named in one WARNING; the other, which reads its entries, never."""
    start = now_us() - 60 * SECOND
    directory = tmp_path / "journal"
    directory.mkdir()
    write_journal(directory / "remote.journal", request_lines(0, start))
    path = tmp_path / "config.yaml"
    rows = [{**journal_row(directory), "name": "good"}]
    rows.append({**journal_row(directory), "name": "typo", "unit": "sm-lm.service"})
    path.write_text(json.dumps({"nodes": rows, **quiet_settings(tmp_path)}))
    d = Daemon(load(path), quiet_unit_seconds=0.5, tick_seconds=0.05)

    def warned() -> list[str]:
        return [
            r.getMessage() for r in caplog.records if "check the node's `unit:`" in r.getMessage()
        ]

    with caplog.at_level(logging.WARNING, logger="exporter.daemon.daemon"), DaemonThread(d):
        wait_for(warned, DEADLINE_S, "the warning")
        turns = d.turns
        wait_for(lambda: d.turns > turns + 40, DEADLINE_S, "more turns of the loop")
    said = warned()
    assert len(said) == 1 and "node typo: no entry of unit sm-lm.service" in said[0], said
    assert sum(c.requests for c in d.acc.nodes["good"].kinds.values()) == 1


# -- 4. repeated events, summarised ----------------------------------------------------------------


@pytest.mark.slow
def test_a_new_pid_on_every_line_is_logged_in_summary(tmp_path: Path) -> None:
    """2,000 lines, each from a llama-server PID not seen before: every restart and abort is
    counted, and the log says the first and sums up the rest (not 2,000 lines)."""
    start = now_us() - 120 * SECOND
    lines = [
        DemoLine(
            start + i * 10_000, 10_000 + i, f"slot launch_slot_: id  0 | task {i} | processing task"
        )
        for i in range(2000)
    ]
    dump = tmp_path / f"{NODE}.log"
    dump.write_text("".join(short_iso(NODE, ln) + "\n" for ln in lines))
    settings = {"nodes": file_nodes({NODE: dump}), "since": "-10m"}
    with DaemonProcess(tmp_path / "d", settings) as d:
        d.start()

        def read() -> dict[Any, float] | None:
            m = d.metrics()
            return m if sample(m, "smllm_server_restarts_total", node=NODE) == 1999 else None

        m = wait_for(read, DEADLINE_S, "every restart counted")
        log = d.stop()
    aborted = sample(m, "smllm_requests_aborted_total", node=NODE) or 0
    said = [ln for ln in log.splitlines() if "restart" in ln or "aborted" in ln]
    assert len(said) <= 4, said[:10]
    assert "llama-server restarted (llama-server PID 10000 -> 10001)" in said[0]
    assert any("1998 llama-server restarts (the last: llama-server PID 11998" in ln for ln in said)
    logged_aborts = sum(
        int(n) for ln in said for n in re.findall(r"(\d+) requests in flight aborted", ln)
    )
    assert logged_aborts == aborted


# -- 5. a SIGHUP while starting ----------------------------------------------------------------------

SIGHUP_BIT = 1 << (signal.SIGHUP - 1)  # (bit N-1 of /proc/PID/status's masks is signal N)


def sighup_caught(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    masks = dict(re.findall(r"^(SigCgt|SigBlk):\s*([0-9a-f]+)$", status, re.MULTILINE))
    return any(int(masks.get(k, "0"), 16) & SIGHUP_BIT for k in ("SigCgt", "SigBlk"))


def console_script(config_file: Path) -> list[str]:
    """The installed `sm-llm-exporter` command (the venv's, beside its python)."""
    return [
        str(Path(sys.executable).parent / "sm-llm-exporter"),
        "run",
        "--config",
        str(config_file),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("command", [console_script, run_command], ids=["script", "python -m"])
def test_a_sighup_right_after_exec_is_taken_up_not_fatal(
    tmp_path: Path, command: Callable[[Path], list[str]]
) -> None:
    """SIGHUP the moment the process catches it (or blocks it): it lives, serves, and takes the
    signal up as a reload; and it catches it early, before it has even logged its start."""
    dump = tmp_path / f"{NODE}.log"
    dump.write_text("")
    settings = {"nodes": file_nodes({NODE: dump})}
    with DaemonProcess(tmp_path / "d", settings, command=command) as d:
        proc = d.launch()
        deadline = time.monotonic() + DEADLINE_S
        while not sighup_caught(proc.pid):  # (a tight poll: the signal goes the moment it can)
            assert proc.poll() is None and time.monotonic() < deadline, d.log_text()
        proc.send_signal(signal.SIGHUP)
        # caught early: before the command line was even read (nothing logged yet)
        assert "starting with" not in d.log_text()
        wait_for(d.ready_or_gone, DEADLINE_S, "ready or gone")
        assert d.ready_or_gone() == "ready", d.log_text()
        assert requests_of(d.metrics()) == 0
        wait_for(lambda: "reload: the config is unchanged" in d.log_text(), DEADLINE_S, "reload")
        log = d.stop()
    assert "a SIGHUP came while starting" in log


@pytest.mark.slow
def test_a_command_that_is_no_daemon_still_ends_on_a_hang_up(tmp_path: Path) -> None:
    """SIGHUP is caught from the first moment for the daemon's sake only: a `report` run by hand
    still ends when its terminal hangs up (here, waiting on a FIFO no one writes to)."""
    fifo = tmp_path / "node0.log"
    os.mkfifo(fifo)
    script = str(Path(sys.executable).parent / "sm-llm-exporter")
    window = ["--since", "2026-01-01T00:00:00Z", "--until", "2026-01-01T01:00:00Z"]
    proc = subprocess.Popen(
        [script, "report", *window, "--input", f"node0={fifo}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        writer = -1
        while writer < 0:  # (until the report has opened the FIFO: it reads, past its start)
            assert proc.poll() is None and time.monotonic() < deadline
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # (ENXIO: no reader yet)
                time.sleep(0.01)
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=DEADLINE_S) == -signal.SIGHUP
        os.close(writer)
    finally:
        proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


# -- 6. a config read that hangs -------------------------------------------------------------------


@pytest.mark.slow
def test_a_config_that_became_a_fifo_holds_up_neither_metrics_nor_the_stop(tmp_path: Path) -> None:
    """The config file is replaced by a FIFO no one writes to, and the daemon gets SIGHUP:
    /metrics goes on answering while the config is read (or refused), and SIGTERM stops it."""
    dump = tmp_path / f"{NODE}.log"
    dump.write_text("")
    with DaemonProcess(tmp_path / "d", {"nodes": file_nodes({NODE: dump})}) as d:
        d.start()
        d.config.unlink()
        os.mkfifo(d.config)
        assert d.proc is not None
        d.proc.send_signal(signal.SIGHUP)
        for _ in range(5):  # (each scrape waits at most 5 s: the loop is not held)
            got = answer(d.url + "/metrics", timeout=5)
            assert got is not None and got[0] == 200
        d.stop(timeout=10)


@pytest.mark.slow
def test_a_reload_that_hangs_is_abandoned_and_never_read_twice_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A reloader that blocks (stand-in for a hung NFS mount): past the deadline the reload is
    abandoned and logged, /metrics answers meanwhile, a second SIGHUP starts no second read
    while the first one hangs, and once it ends the config is read again. A read that hangs
    does not hold up the daemon's stop either."""
    dump = tmp_path / f"{NODE}.log"
    dump.write_text("")
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({"nodes": file_nodes({NODE: dump}), **quiet_settings(tmp_path)}))
    release, never = threading.Event(), threading.Event()
    reads: list[str] = []

    def reloader() -> Config:
        reads.append(threading.current_thread().name)
        if len(reads) == 1:
            assert release.wait(DEADLINE_S), "never released"
        if len(reads) == 3:
            never.wait(DEADLINE_S)  # (hangs past the daemon's stop)
        return load(path)

    d = Daemon(load(path), reloader=reloader, reload_deadline_seconds=0.3, tick_seconds=0.05)

    def said(text: str) -> int:
        return sum(text in r.getMessage() for r in caplog.records)

    with caplog.at_level(logging.INFO, logger="exporter.daemon.daemon"), DaemonThread(d) as t:
        loop = t._loop
        assert loop is not None
        loop.call_soon_threadsafe(d.request_reload)
        wait_for(lambda: said("reload abandoned"), DEADLINE_S, "the reload abandoned")
        assert t.metrics()  # served meanwhile
        loop.call_soon_threadsafe(d.request_reload)
        wait_for(lambda: said("has not ended yet"), DEADLINE_S, "the second SIGHUP noted")
        turns = d.turns
        wait_for(lambda: d.turns > turns + 20, DEADLINE_S, "more turns of the loop")
        assert reads == ["config reload"]  # one read at a time
        release.set()
        wait_for(lambda: said("reload: the config is unchanged"), DEADLINE_S, "the second read")
        assert len(reads) == 2
        loop.call_soon_threadsafe(d.request_reload)
        wait_for(lambda: len(reads) == 3, DEADLINE_S, "a third read, which hangs")
    # (DaemonThread's exit: cancelled while the read hangs, it stopped within its deadline)
    never.set()
