"""The daemon on a FIFO: SIGTERM ends it within a second with no writer, and what a later writer
sends is counted."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from exporter.commands.demo import node_lines, short_iso

from support.daemon_process import DaemonProcess, file_nodes
from support.fifos import fifo_writer, unblock
from support.scrape import total
from support.tools import wait_for

DEMO_START = 1_790_000_000_000_000  # the demo lines' window, long past


DAEMON_SINCE = datetime.fromtimestamp(DEMO_START // 1_000_000, UTC).isoformat()


def holds_open(pid: int, path: Path) -> bool:
    """Does process `pid` have `path` open (the daemon's source waits on it)?"""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fd) == str(path) for fd in fds.iterdir())
    except FileNotFoundError:  # a descriptor closed while listed
        return False


def demo_dump(seconds: int, start_us: int = DEMO_START) -> tuple[bytes, int]:
    """node0's demo journal over [start_us, +seconds) and the requests in it."""
    lines = [
        short_iso("node0", x)
        for x in node_lines("node0", 7, start_us, start_us + seconds * 1_000_000)
    ]
    return "".join(x + "\n" for x in lines).encode(), sum("total time" in x for x in lines)


def test_daemon_on_a_fifo_no_writer_opened_stops_within_a_second_of_sigterm(
    tmp_path: Path,
) -> None:
    path = tmp_path / "node0.fifo"
    os.mkfifo(path)
    config = {"since": DAEMON_SINCE, "nodes": file_nodes({"node0": path})}
    try:
        with DaemonProcess(tmp_path / "daemon", config) as d:
            d.start()
            wait_for(lambda: holds_open(d.pid, path), 10, "the daemon to open the FIFO")
            sent_us = d.stop_within_a_second()
            checkpoint = d.checkpoint()
            assert checkpoint["written_at_us"] >= sent_us  # the final checkpoint, at shutdown
            assert "node0" in checkpoint["positions"]
    finally:
        unblock(path)


def test_daemon_counts_what_a_later_writer_sends_to_a_fifo(tmp_path: Path) -> None:
    path = tmp_path / "node0.fifo"
    os.mkfifo(path)
    config = {"since": DAEMON_SINCE, "nodes": file_nodes({"node0": path})}
    try:
        with DaemonProcess(tmp_path / "daemon", config) as d:
            d.start()
            expected = 0
            for round_ in range(2):  # a writer, gone, and another one
                writer = wait_for(lambda: fifo_writer(path), 10, "the daemon to open the FIFO")
                data, requests = demo_dump(300, DEMO_START + round_ * 300 * 1_000_000)
                assert requests > 0
                with os.fdopen(writer, "wb") as w:
                    w.write(data)
                expected += requests

                def counted(want: int = expected) -> bool:
                    return total(d.metrics(), "smllm_requests_total", node="node0") == want

                wait_for(counted, 10, f"{expected} requests counted")
            sent_us = d.stop_within_a_second()
            assert d.checkpoint()["written_at_us"] >= sent_us
    finally:
        unblock(path)
