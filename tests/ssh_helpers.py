"""What the SSH source's two test modules (test_ssh, test_ssh_faults) share: nodes and daemons on
127.0.0.1, the clock, waiting for the served figures to be right, and counting requests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from test_journal_source import UNIT, iso

from exporter.accounting import SECOND
from exporter.config import Config, SshNode
from exporter.kinds import DEFAULT_RULES, Kinds

from conftest import Samples

REPO = Path(__file__).resolve().parent.parent
KINDS = Kinds(DEFAULT_RULES)
MINUTE = 60 * SECOND


def local_node(
    name: str, port: int, known_hosts: Path, client_key: Path, directory: str, /, **kw: object
) -> SshNode:
    """A node on 127.0.0.1:`port`, root logging in with `client_key`, reading `UNIT` from the
    journal directory `directory`; `kw` replaces any field (these too: `port=1`)."""
    node = SshNode(
        name=name,
        host="127.0.0.1",
        unit=UNIT,
        port=port,
        user="root",
        known_hosts=known_hosts,
        client_keys=(client_key,),
        journal_directory=directory,
    )
    return replace(node, **kw)  # type: ignore[arg-type]


def local_config(tmp_path: Path, since_us: int, *nodes: SshNode) -> Config:
    """A daemon's config: its state in `tmp_path`, listening on a free port of 127.0.0.1."""
    return Config(
        state_dir=tmp_path / "state",
        listen_host="127.0.0.1",
        listen_port=0,
        since=iso(since_us),
        nodes=nodes,
    )


def now_us() -> int:
    return int(time.time()) * SECOND


def until_right(
    check: Callable[[], list[str]], timeout: float, what: str, pause: float = 0.1
) -> None:
    """Wait until `check` finds no problem (`pause` seconds between checks); fail with the last
    ones it found."""
    deadline = time.monotonic() + timeout
    problems = check()
    while problems and time.monotonic() < deadline:
        time.sleep(pause)
        problems = check()
    if problems:
        pytest.fail(f"{what}: still wrong after {timeout} s: {problems[:8]}")


def requests(samples: Samples, node: str = "a") -> float:
    return sum(
        v
        for (n, labels), v in samples.items()
        if n == "smllm_requests_total" and ("node", node) in labels
    )
