"""exporter.startup.vllmwatch: an init-timeline node's files followed, read again as they change."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from exporter.sources.inittimeline import InitTimelineNode
from exporter.startup import vllmwatch
from exporter.startup.phases import Figures


def test_the_watcher_reads_again_after_a_failed_read_though_nothing_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "worker_1.jsonl").write_text('{"name": "a", "start": 1.0, "end": 2.0}\n')
    real, calls = vllmwatch.read, []

    def flaky(node: InitTimelineNode) -> object:
        calls.append(node.name)
        return "EMFILE, once" if len(calls) == 1 else real(node)

    monkeypatch.setattr(vllmwatch, "read", flaky)
    seen: list[Figures] = []

    async def main() -> None:
        node = InitTimelineNode("omni", run, None, 0.1)
        task = asyncio.create_task(vllmwatch.watch(node, seen.append, lambda: 5.0))
        try:
            async with asyncio.timeout(10):
                while not any(f.up for f in seen):
                    await asyncio.sleep(0.02)
        finally:
            task.cancel()

    asyncio.run(main())
    assert [f.up for f in seen[:2]] == [False, True] and seen[0].error == "EMFILE, once"
