"""exporter.daemon.supervise: where a node's source starts, and a failing source started again
only once what it handed over is applied (stand-in sources on a real event loop, no process)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from exporter.base.records import Batch
from exporter.base.times import SECOND
from exporter.config.schema import Config
from exporter.daemon import supervise
from exporter.daemon.core import Core
from exporter.daemon.nodes import Node
from exporter.daemon.supervise import Supervisor, start_of
from exporter.sources import registry
from exporter.sources.file import FileNode
from exporter.sources.journal import JournalNode
from exporter.sources.registry import NodeConfig

T0 = 1_790_000_000_000_000
SINCE = T0 - 3600 * SECOND


def core_of(tmp_path: Path) -> Core:
    config = Config(
        state_dir=tmp_path / "state", since="-1h", nodes=(FileNode("n", tmp_path / "n.log"),)
    )
    return Core(config, lambda: T0 / SECOND, lambda: T0 / SECOND)


def node_at(tmp_path: Path, position: str, kind: str | None) -> Node:
    node = core_of(tmp_path).nodes["n"]
    node.since_us, node.position, node.position_kind = SINCE, position, kind
    return node


def test_a_node_without_position_starts_at_its_since(tmp_path: Path) -> None:
    node = node_at(tmp_path, "", None)
    assert start_of(node, node.config, T0, resumes=True) == (SINCE, "")
    assert node.running_kind == "file"


def test_a_position_that_resumes_keeps_since(tmp_path: Path) -> None:
    node = node_at(tmp_path, "1:2:3", "file")
    assert start_of(node, node.config, T0, resumes=True) == (SINCE, "1:2:3")


def test_a_position_that_cannot_resume_starts_after_the_newest_read(tmp_path: Path) -> None:
    node = node_at(tmp_path, "1:2:3", "file")
    assert start_of(node, node.config, T0, resumes=False) == (T0 + 1, "1:2:3")


def test_a_position_of_another_kind_is_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.daemon.daemon")
    node = node_at(tmp_path, "1:2:3", "file")
    journal = JournalNode("n", "sm-llm.service")
    assert start_of(node, journal, T0, resumes=True) == (T0 + 1, "")
    assert node.running_kind == "journal"
    assert "its source is now of kind journal, its saved position of kind file" in caplog.text


def test_a_failed_source_starts_again_after_what_it_handed_over_is_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervise, "RETRY_FIRST_S", 0.01)
    monkeypatch.setattr(registry, "resumes", lambda node, position: True)
    core = core_of(tmp_path)
    starts: list[str] = []

    class Once:
        def __init__(self, config: NodeConfig, since_us: int, position: str) -> None:
            starts.append(position)

        async def run(self, out: asyncio.Queue[Batch]) -> None:
            if len(starts) == 1:
                await out.put(Batch("n", position="p1", up=True))
                raise OSError("connection reset")
            await asyncio.Event().wait()

    async def main() -> list[Batch]:
        queue: asyncio.Queue[Batch] = asyncio.Queue()
        got: list[Batch] = []
        async with asyncio.TaskGroup() as tg:
            Supervisor(core, Once, queue, tg).start(core.nodes["n"])
            for _ in range(3):
                batch = await asyncio.wait_for(queue.get(), 5)
                got.append(batch)
                if batch.position:  # (the ingest loop applies it)
                    core.nodes["n"].position = batch.position
                ended = core.nodes["n"].ended
                if ended is not None and ended[0] is batch:
                    assert starts == [""]  # (not started again before it is applied)
                    ended[1].set()
            task = core.nodes["n"].task
            assert task is not None
            task.cancel()
        return got

    got = asyncio.run(main())
    assert [(b.up, b.error, b.reconnected) for b in got] == [
        (True, "", False),
        (False, "connection reset", False),
        (False, "", True),
    ]
    assert starts == ["", "p1"]  # (the second from the position of the last batch applied)
