"""SSH nodes for the tests: nodes and daemons on 127.0.0.1, the clock in whole seconds, and
counting requests.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.times import SECOND, iso
from exporter.config.schema import Config
from exporter.sources.ssh import SshNode

from support.journals import UNIT
from support.scrape import Samples, total

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
    """A daemon's config: its state in `tmp_path`, listening on a free port of 127.0.0.1. The
    tests' journals grow by entries stamped up to an hour ahead of the clock (so what comes
    later is never behind what was accounted): the allowance takes them as in line."""
    return Config(
        state_dir=tmp_path / "state",
        listen_host="127.0.0.1",
        listen_port=0,
        since=iso(since_us),
        nodes=nodes,
        clock_allowance_seconds=AHEAD_ALLOWANCE_S,
    )


AHEAD_ALLOWANCE_S = 2 * 86_400  # (the test journals' entries ahead of the clock)


def now_us() -> int:
    """The clock in whole seconds (as a config's `since` gives them)."""
    return int(time.time()) * SECOND


def requests(samples: Samples, node: str = "a") -> float:
    return total(samples, "smllm_requests_total", node=node)
