"""The logs as an operator reads them: priorities under journald, ISO times elsewhere, quiet
libraries, and one line each when a node starts and stops holding the cluster figures back."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exporter import logs
from exporter.accounting import HOLD_US, SECOND, Accounting
from exporter.config import Config, FileNode, NodeConfig
from exporter.daemon import Daemon
from exporter.kinds import DEFAULT_RULES, Kinds
from exporter.logline import Batch
from exporter.sources import SourceError
from exporter.sources import follow as real_follow
from exporter.sources.base import Source
from exporter.times import iso

from support.daemon_thread import DaemonThread
from support.tools import REPO, now_us, wait_for

EMIT = (
    "import logging; from exporter import logs; logs.setup({level!r}); "
    "log = logging.getLogger('exporter.x'); "
    "log.debug('d'); log.info('i'); log.warning('w'); log.error('e\\nsecond', extra=logs.LINES); "
    "logging.getLogger('asyncssh').info('chatty'); logging.getLogger('asyncssh').warning('loud')"
)


def emitted(level: str, *, journal: bool) -> list[str]:
    """What a process that set its logging up with `logs.setup(level)` wrote to its stderr (a
    pipe; named in JOURNAL_STREAM as systemd names the service's journal stream, or not)."""
    r, w = os.pipe()
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    if journal:
        st = os.fstat(w)
        env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
    else:
        env["JOURNAL_STREAM"] = "1:1"  # (a parent's stream: not this one)
    proc = subprocess.Popen(
        [sys.executable, "-c", EMIT.format(level=level)], stderr=w, env=env, cwd=REPO
    )
    os.close(w)
    with os.fdopen(r, encoding="utf-8") as f:
        out = f.read()
    assert proc.wait(30) == 0, out
    return out.splitlines()


def test_under_journald_every_line_carries_its_priority_and_no_time() -> None:
    assert emitted("debug", journal=True) == [
        "<7>exporter.x: d",
        "<6>exporter.x: i",
        "<4>exporter.x: w",
        "<3>exporter.x: e",
        "<3>second",  # (journald makes each line an entry: each its priority)
        "<6>asyncssh: chatty",  # (asyncssh's INFO, shown at debug only)
        "<4>asyncssh: loud",
    ]


def test_elsewhere_every_line_carries_an_iso_utc_time() -> None:
    lines = emitted("info", journal=False)
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    assert [re.sub(stamp, "T", line) for line in lines] == [
        "T INFO exporter.x: i",
        "T WARNING exporter.x: w",
        "T ERROR exporter.x: e",
        "second",
        "T WARNING asyncssh: loud",  # (asyncssh's INFO only at debug)
    ]
    assert all(re.match(stamp, line) for line in lines if line != "second")


def test_priorities_of_every_level() -> None:
    assert [logs.priority(level) for level in (10, 15, 20, 30, 40, 50, 60)] == [7, 6, 6, 4, 3, 2, 2]


# -- holding the cluster figures back -----------------------------------------------------------

KINDS = Kinds(DEFAULT_RULES)


def test_the_node_that_holds_the_figures_back_says_what_for_and_until_when() -> None:
    now = 1_790_000_000 * SECOND
    acc = Accounting(["a", "b"], KINDS, origin_us=now - 10 * 60 * SECOND, stall_us=300 * SECOND)
    for node in ("a", "b"):
        acc.source_state(node, up=True, caught_up=True, now_us=now)
    acc.advance(now)
    assert acc.holder(now) is None  # (both caught up: the figures are at now - 2 s)
    acc.source_state("b", up=False, caught_up=False, now_us=now)
    acc.line_read("b", now - 2 * HOLD_US)  # (what it read last)
    later = now + SECOND
    holder = acc.holder(later)
    assert holder is not None and holder[:2] == ("b", "source down")
    assert iso(now + 300 * SECOND) in holder[2] and iso(now) in holder[2]
    # once it has been down longer than stall_seconds it holds nothing
    assert acc.holder(now + 301 * SECOND) is None
    acc.source_state("b", up=True, caught_up=True, now_us=later)
    assert acc.holder(later) is None


class Down:
    """A source that cannot reach its node (a fake: the daemon's retry path is what is tested)."""

    async def run(self, out: asyncio.Queue[Batch]) -> None:
        raise SourceError("node down: connection refused")


def test_the_daemon_logs_once_which_node_holds_the_figures_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.daemon")
    dump = tmp_path / "up.log"
    dump.write_text("")
    since = now_us() - 2 * HOLD_US

    def factory(node: NodeConfig, since_us: int, position: str) -> Source:
        return Down() if node.name == "down" else real_follow(node, since_us, position)

    cfg = Config(
        state_dir=tmp_path / "state",
        listen_host="127.0.0.1",
        listen_port=0,
        since=iso(since),
        nodes=(FileNode("up", dump), FileNode("down", tmp_path / "unused.log")),
    )
    held = "node down holds the cluster figures back: its source is down"
    with DaemonThread(Daemon(cfg, source_factory=factory, tick_seconds=0.05)):
        wait_for(lambda: held in caplog.text, 20, "the line saying what holds the figures")
        # (ticks go on: it is said once)
        wait_for(lambda: caplog.text.count("trying again") >= 2, 20, "a retry")
    assert caplog.text.count(held) == 1
