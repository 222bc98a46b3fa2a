"""exporter.daemon.apply: batches and ticks on the daemon's node records, and what it logs of them.

No loop and no source: the records and the accounting of a `Core`, batches handed in by hand.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from exporter.base.records import Batch, LogLine
from exporter.base.times import SECOND
from exporter.config.schema import Config
from exporter.daemon.apply import ERRORS_LOGGED, Applier
from exporter.daemon.core import Core
from exporter.sources.file import FileNode
from exporter.web.fleet import StatusView

T0 = 1_790_000_000_000_000  # a journal time, microseconds
TOTAL = "slot print_timing: id  0 | task {task} |       total time =    500.00 ms / 9 tokens"
GARBLED = "slot print_timing: id  0 | task 7 |       total time =    abc ms / 9 tokens"


def running(tmp_path: Path, *names: str) -> tuple[Core, Applier]:
    nodes = tuple(FileNode(n, tmp_path / f"{n}.log") for n in names)
    config = Config(state_dir=tmp_path / "state", since="-1h", nodes=nodes)
    clock = lambda: T0 / SECOND + 1  # noqa: E731  (now: a second after T0)
    core = Core(config, clock, clock)
    return core, Applier(core)


def lines(node: str, *messages: str, pid: int = 7) -> tuple[LogLine, ...]:
    return tuple(LogLine(node, T0 + i * 1000, "", pid, m) for i, m in enumerate(messages))


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "exporter.daemon.daemon"]


def test_a_batch_counts_and_leaves_its_position_of_the_running_kind(tmp_path: Path) -> None:
    core, applier = running(tmp_path, "n0")
    node = core.nodes["n0"]
    node.running_kind = "file"
    applier.apply(Batch("n0", lines("n0", TOTAL.format(task=1)), 1, T0, position="1:2:3"), T0)
    assert sum(c.requests for c in core.acc.nodes["n0"].kinds.values()) == 1
    assert (node.position, node.position_kind) == ("1:2:3", "file")
    applier.apply(Batch("n0", up=True), T0)  # (no position: the last one stays)
    assert node.position == "1:2:3"
    assert [iv.task for iv in core.recent.copy()["n0"]] == [1]


def test_the_rings_keep_only_what_the_pages_hour_shows(tmp_path: Path) -> None:
    """A backlog's requests that ended before the status page's hour are counted, not kept for
    the page; those that end within it are."""
    core, applier = running(tmp_path, "n0")
    hour_ago = T0 - StatusView.window_us  # (applied at T0)
    old = tuple(LogLine("n0", hour_ago - 1, "", 7, TOTAL.format(task=t)) for t in (1, 2))
    new = LogLine("n0", hour_ago + 500_000, "", 7, TOTAL.format(task=3))
    applier.apply(Batch("n0", (*old, new), 3, new.time_us), T0)
    assert sum(c.requests for c in core.acc.nodes["n0"].kinds.values()) == 3
    assert [iv.task for iv in core.recent.rings["n0"]] == [3]


def test_the_batch_saying_a_source_ended_is_told_when_applied(tmp_path: Path) -> None:
    core, applier = running(tmp_path, "n0")
    node = core.nodes["n0"]
    ended, other = Batch("n0", up=False, error="gone"), Batch("n0", up=False, error="gone")
    node.ended = (ended, asyncio.Event())
    applier.apply(other, T0)
    assert not node.ended[1].is_set()
    applier.apply(ended, T0)
    assert node.ended[1].is_set()


def test_a_down_source_shows_its_error_until_it_follows_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.daemon.daemon")
    core, applier = running(tmp_path, "n0")
    applier.apply(Batch("n0", up=False, error="connection refused"), T0)
    assert core.nodes["n0"].down_reason == "connection refused"
    assert not core.acc.nodes["n0"].up
    applier.apply(Batch("n0", up=True, caught_up=True), T0)
    assert core.nodes["n0"].down_reason is None
    assert messages(caplog) == ["node n0: following its journal again"]
    assert applier.caught_up  # (the loop publishes soon)


def test_parse_errors_are_logged_up_to_a_few_and_all_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.daemon.daemon")
    core, applier = running(tmp_path, "n0")
    for _ in range(ERRORS_LOGGED + 3):
        applier.apply(Batch("n0", lines("n0", GARBLED), 1, T0), T0)
    said = messages(caplog)
    assert len(said) == ERRORS_LOGGED and all("parse error" in m for m in said)
    assert said[-1].endswith("(further parse errors are counted, not logged)")
    assert core.acc.nodes["n0"].parse_errors == ERRORS_LOGGED + 3


def test_restarts_are_logged_first_then_in_summary(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.daemon.daemon")
    core, applier = running(tmp_path, "n0")
    for pid in range(100, 105):
        applier.apply(Batch("n0", lines("n0", TOTAL.format(task=pid), pid=pid), 1, T0), T0)
    core.nodes["n0"].repeats.flush(every=True)
    said = messages(caplog)
    assert said[0] == "node n0: llama-server restarted (llama-server PID 100 -> 101)"
    assert "3 llama-server restarts (the last: llama-server PID 103 -> 104)" in said[1]
    assert len(said) == 2 and core.acc.nodes["n0"].restarts == 4


def test_a_clock_skew_is_logged_at_its_start_and_its_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.daemon.daemon")
    _, applier = running(tmp_path, "n0")
    now = T0 - 60 * SECOND
    for task in (1, 2):
        applier.apply(Batch("n0", lines("n0", TOTAL.format(task=task)), 1, T0), now)
    applier.apply(Batch("n0", lines("n0", TOTAL.format(task=3)), 1, T0), T0 + SECOND)
    said = messages(caplog)
    assert len(said) == 2
    assert "60 s ahead of this clock" in said[0]
    assert said[1] == "node n0: its journal times are in line with this clock again"


def test_what_a_removed_node_had_queued_is_dropped(tmp_path: Path) -> None:
    core, applier = running(tmp_path, "n0", "n1")
    del core.nodes["n1"]
    applier.apply(Batch("n1", lines("n1", TOTAL.format(task=1)), 1, T0), T0)
    assert core.acc.nodes["n1"].entries == 0


def test_a_tick_moves_the_watermark_and_logs_what_holds_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.daemon.daemon")
    core, applier = running(tmp_path, "n0", "n1")
    applier.apply(Batch("n0", lines("n0", TOTAL.format(task=1)), 1, T0, caught_up=True), T0)
    applier.tick(T0 + SECOND)
    assert core.acc.watermark_us == core.acc.origin_us  # (n1 has read nothing yet)
    assert (
        [m for m in messages(caplog) if "n1" in m]
        == [m for m in messages(caplog) if m.startswith("node n1 holds the cluster figures back")]
        != []
    )
    applier.apply(Batch("n1", (), 0, None, caught_up=True), T0 + SECOND)
    applier.tick(T0 + SECOND)
    assert core.acc.watermark_us > core.acc.origin_us
    assert messages(caplog)[-1] == "node n1 no longer holds the cluster figures back"
