"""exporter.daemon.watch: a unit that logs nothing is said once; a dump has no unit to watch."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from exporter.base.times import SECOND
from exporter.config.schema import Config
from exporter.daemon.core import Core
from exporter.daemon.watch import UnitWatch
from exporter.sources.file import FileNode
from exporter.sources.journal import JournalNode

T0_S = 1_790_000_000.0
QUIET_S = 600.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def core_of(tmp_path: Path) -> Core:
    nodes = (JournalNode("j", "sm-llm.servce"), FileNode("f", tmp_path / "f.log"))
    config = Config(state_dir=tmp_path / "state", since="-1h", nodes=nodes)
    core = Core(config, lambda: T0_S, lambda: T0_S)
    for name in ("j", "f"):  # both followed, caught up, nothing read
        core.acc.source_state(name, up=True, caught_up=True, now_us=int(T0_S * SECOND))
    return core


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "exporter.daemon.daemon"]


def test_a_unit_silent_while_followed_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="exporter.daemon.daemon")
    core, clock = core_of(tmp_path), Clock()
    watch = UnitWatch(QUIET_S, clock)
    for clock.now in (0.0, QUIET_S - 1, QUIET_S, 2 * QUIET_S):
        watch.watch(core.nodes.values(), core.acc)
    (line,) = said(caplog)
    assert line.startswith("node j: no entry of unit sm-llm.servce read in 600 s")
    assert core.nodes["j"].quiet_said and not core.nodes["f"].quiet_said


def test_an_entry_or_a_source_not_caught_up_starts_the_wait_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="exporter.daemon.daemon")
    core, clock = core_of(tmp_path), Clock()
    watch = UnitWatch(QUIET_S, clock)
    watch.watch(core.nodes.values(), core.acc)
    clock.now = QUIET_S / 2
    core.acc.source_state("j", up=True, caught_up=False, now_us=int(T0_S * SECOND))
    watch.watch(core.nodes.values(), core.acc)  # (reading a backlog: not quiet)
    core.acc.source_state("j", up=True, caught_up=True, now_us=int(T0_S * SECOND))
    for clock.now in (QUIET_S / 2 + 1, QUIET_S + 1):
        watch.watch(core.nodes.values(), core.acc)
    assert said(caplog) == []
    core.acc.line_read("j", int(T0_S * SECOND), 1)  # (an entry of its unit)
    clock.now = 3 * QUIET_S
    watch.watch(core.nodes.values(), core.acc)
    assert said(caplog) == [] and core.nodes["j"].quiet_since is None
