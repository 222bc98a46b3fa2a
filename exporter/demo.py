"""The embedded demo: a seeded, realistic sm-llm workload on three nodes, as journal lines.

The seed's workload: extraction calls of 600-1,000 tokens taking 20-60 s, reconcile calls under
600 tokens taking 2-15 s, one request at a time per node, each with its launch line, its era D
timing block and its release line; the last node sometimes sits idle for minutes.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

NODES = ("node0", "node1", "node2")
SECOND = 1_000_000


@dataclass(frozen=True)
class DemoLine:
    time_us: int
    pid: int
    message: str


def node_lines(node: str, seed: int, start_us: int, end_us: int) -> Iterator[DemoLine]:
    """Journal lines of one node's requests that end in [start_us, end_us), in journal order."""
    rng = random.Random(f"{seed}:{node}")
    pid = 4000 + rng.randrange(1000)
    idle_prone = node == NODES[-1]
    t = start_us + rng.randrange(5 * SECOND)
    task = rng.randrange(100, 5000)
    while True:
        if idle_prone and rng.random() < 0.02:
            t += rng.randrange(120, 600) * SECOND  # the node sits idle for minutes
        t += rng.randrange(200_000, 5 * SECOND)
        if rng.random() < 0.45:
            prompt, generated = rng.randrange(560, 940), rng.randrange(40, 120)
            total_ms = rng.randrange(20_000_00, 60_000_00) / 100
        else:
            prompt, generated = rng.randrange(120, 540), rng.randrange(3, 50)
            total_ms = rng.randrange(2_000_00, 15_000_00) / 100
        total_us = round(total_ms * 1000)
        end = t + total_us
        if end >= end_us:
            return
        prompt_ms = round(total_ms * rng.uniform(0.15, 0.4), 2)
        gen_ms = round(total_ms - prompt_ms, 2)
        prefix = f"slot print_timing: id  0 | task {task} | "
        yield DemoLine(
            t + rng.randrange(50, 900),
            pid,
            f"slot launch_slot_: id  0 | task {task} | processing task, is_child = 0",
        )
        yield DemoLine(
            end,
            pid,
            prefix + f"prompt eval time = {prompt_ms:10.2f} ms / {prompt:5d}"
            f" tokens ({prompt_ms / prompt:8.2f} ms per token,"
            f" {1e3 / prompt_ms * prompt:8.2f} tokens per second)",
        )
        yield DemoLine(
            end,
            pid,
            prefix + f"       eval time = {gen_ms:10.2f} ms / {generated:5d}"
            f" tokens ({gen_ms / generated:8.2f} ms per token,"
            f" {1e3 / gen_ms * generated:8.2f} tokens per second)",
        )
        yield DemoLine(
            end,
            pid,
            prefix + f"      total time = {total_ms:10.2f} ms / {prompt + generated:5d} tokens",
        )
        yield DemoLine(
            end + 30,
            pid,
            f"slot      release: id  0 | task {task} | stop processing:"
            f" n_tokens = {prompt + generated}, truncated = 0",
        )
        t = end
        task += 1 + rng.randrange(3)


def short_iso(node: str, line: DemoLine) -> str:
    """The line as `journalctl -o short-iso-precise` prints it."""
    stamp = datetime.fromtimestamp(line.time_us // SECOND, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{line.time_us % SECOND:06d}+0000 {node} sm-llm[{line.pid}]: {line.message}"


def write_dumps(directory: Path, seed: int, start_us: int, end_us: int) -> dict[str, Path]:
    """Each demo node's journal over [start_us, end_us) as a short-iso-precise dump file."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for node in NODES:
        path = directory / f"{node}.log"
        with path.open("w", encoding="utf-8") as f:
            f.writelines(
                short_iso(node, line) + "\n" for line in node_lines(node, seed, start_us, end_us)
            )
        paths[node] = path
    return paths


if __name__ == "__main__":  # python -m exporter.demo DIR: the last hour of the demo, as dumps
    import sys
    import time

    now = int(time.time()) * SECOND
    for node, path in write_dumps(Path(sys.argv[1]), 1, now - 3600 * SECOND, now).items():
        print(f"--input {node}={path}", end=" ")
    print()
