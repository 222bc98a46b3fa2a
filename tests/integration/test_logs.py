"""The logs of the daemon as a process: priorities under journald, ISO times elsewhere, and the
node that holds the figures back named once."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.accounting.watermark import HOLD_US
from exporter.base.records import Batch
from exporter.base.times import iso
from exporter.config.schema import Config
from exporter.daemon.daemon import Daemon
from exporter.sources.base import Source, SourceError
from exporter.sources.file import FileNode
from exporter.sources.registry import NodeConfig
from exporter.sources.registry import follow as real_follow

from support.daemon_thread import DaemonThread
from support.tools import REPO, now_us, wait_for

EMIT = (
    "import logging; from exporter.base import logs; logs.setup({level!r}); "
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


class Down:
    """A source that cannot reach its node (a fake: the daemon's retry path is what is tested)."""

    async def run(self, out: asyncio.Queue[Batch]) -> None:
        raise SourceError("node down: connection refused")


def test_the_daemon_logs_once_which_node_holds_the_figures_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.daemon.daemon")
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
