"""Nodes' windows and journal dumps read the way the report reads them (through
`exporter.sources.registry.window`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from exporter.base.kinds import Kinds
from exporter.base.records import Batch, LogLine
from exporter.base.times import MAX_TIME_US, SECOND, iso
from exporter.commands.demo import NODES, node_lines, short_iso
from exporter.config.schema import Config
from exporter.report import window as report
from exporter.sources import registry as sources
from exporter.sources.file import FileNode
from exporter.sources.registry import NodeConfig

from support.settings import default_settings

# short-iso-precise request lines of node0, as a real era D llama-server logs them
T0 = 1_790_062_375 * SECOND  # 2026-09-22T07:32:55Z
LAUNCH = "slot launch_slot_: id  {s} | task {t} | processing task, is_child = 0"
TOTAL = "slot print_timing: id  {s} | task {t} |       total time =    {ms:.2f} ms /   {n} tokens"
RELEASE = "slot      release: id  {s} | task {t} | stop processing: n_tokens = {n}, truncated = 0"


def short(t_us: int, msg: str, pid: int = 4242) -> bytes:
    whole, frac = divmod(t_us, SECOND)
    stamp = iso(whole * SECOND).replace("+00:00", f".{frac:06d}+0000")
    return f"{stamp} node0 sm-llm[{pid}]: {msg}".encode()


def window_batches(node: NodeConfig, since_us: int, until_us: int) -> list[Batch]:
    """Every Batch of a node's window, as the report reads it (SourceError when it cannot)."""

    async def read() -> list[Batch]:
        return [b async for b in sources.window(node, since_us, until_us)]

    return asyncio.run(read())


def dump_batches(path: Path, node: str, since_us: int = 0) -> list[Batch]:
    """Every Batch the report's reader makes of a dump."""
    return window_batches(FileNode(node, path), since_us, MAX_TIME_US)


def dump_lines(path: Path, node: str, since_us: int = 0) -> list[LogLine]:
    """The lines of a dump that may matter, as the report reads them."""
    return [line for b in dump_batches(path, node, since_us) for line in b.lines]


def report_of_dumps(
    dumps: Mapping[str, Path],
    kinds: Kinds,
    since_us: int,
    until_us: int,
    max_request_us: int = 600 * SECOND,
) -> report.Report:
    """The report of dump files, one per node, as `report --input` makes it."""
    builder = report.Builder(
        list(dumps), default_settings(kinds, max_request_us=max_request_us), since_us, until_us
    )
    nodes = [FileNode(n, p) for n, p in dumps.items()]
    failed = asyncio.run(
        sources.read_windows(nodes, since_us, until_us + max_request_us, builder.add)
    )
    assert not failed, failed
    return builder.finish()


START = 1_790_000_000 * SECOND  # the dumps' window: two hours, long past


END = START + 7200 * SECOND


def write_dumps(directory: Path) -> dict[str, Path]:
    paths = {}
    for node in NODES:
        path = directory / f"{node}.log"
        path.write_text(
            "".join(short_iso(node, line) + "\n" for line in node_lines(node, 7, START, END))
        )
        paths[node] = path
    return paths


SINCE = datetime.fromtimestamp(START // SECOND, UTC).isoformat()


def config_for(paths: dict[str, Path]) -> Config:
    """File nodes over `paths`; the checkpoint beside the first of them."""
    state_dir = next(iter(paths.values())).parent / "state"
    return Config(
        state_dir=state_dir,
        listen_host="127.0.0.1",
        listen_port=0,
        since=SINCE,
        nodes=tuple(FileNode(n, p) for n, p in paths.items()),
    )
