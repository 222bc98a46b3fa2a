"""The config as checked: a frozen dataclass, each top-level default said once, the key sets."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from exporter.accounting.settings import (
    CLOCK_ALLOWANCE_US,
    DEFAULT_BUCKETS_S,
    DEFAULT_PHASE_BUCKETS_S,
)
from exporter.base.kinds import DEFAULT_RULES, Kinds
from exporter.base.times import SECOND
from exporter.base.times import since_us as _since_us
from exporter.parse.parser import DEFAULT_SLOTS
from exporter.sources.inittimeline import InitTimelineNode
from exporter.sources.registry import NodeConfig
from exporter.sources.registry import describe as describe_node
from exporter.sources.remote import RemoteHosts

DEFAULT_PATH = Path("/etc/sm-llm-exporter/config.yaml")


@dataclass(frozen=True)
class Config:
    """Every setting of the config file, checked; each at its default unless the file gives it."""

    listen_host: str = ""
    listen_port: int = 10027
    http_max_connections: int = 64  # open at once; see web/server.py
    state_dir: Path = Path("/var/lib/sm-llm-exporter")
    unit: str = "sm-llm.service"
    max_request_seconds: int = 600
    stall_seconds: int = 300
    since: str = "now"
    duration_buckets: tuple[float, ...] = DEFAULT_BUCKETS_S
    prompt_duration_buckets: tuple[float, ...] = DEFAULT_PHASE_BUCKETS_S
    generation_duration_buckets: tuple[float, ...] = DEFAULT_PHASE_BUCKETS_S
    # the histograms per node and kind (True), or per kind only: at fleet scale they are most
    # of /metrics
    histograms_per_node: bool = True
    slots: int = DEFAULT_SLOTS  # a node's slot count until its llama-server logs n_slots
    # how far ahead of this clock a node's journal may run
    clock_allowance_seconds: int = CLOCK_ALLOWANCE_US // SECOND
    kinds: Kinds = field(default_factory=lambda: Kinds(DEFAULT_RULES))
    nodes: tuple[NodeConfig, ...] = ()
    init_timelines: tuple[InitTimelineNode, ...] = ()  # `source: init-timeline` nodes
    # `journal-remote` entries with `hosts: seen`: their nodes are made when the config is read
    # (`commands/seen.py`), and are in `nodes` from then on
    hosts_seen: tuple[RemoteHosts, ...] = ()
    # every node's name by its place in `nodes:` ("" where a node has no valid name): for key
    # paths, no setting of its own
    node_order: tuple[str, ...] = field(default=(), compare=False)
    # the unit's TimeoutStartSec (systemd's default), and the share of it past which a
    # start-up is slow (SmLlmServerSlowStart)
    start_timeout_seconds: int = 90
    slow_start_share: float = 0.8
    web_config_file: Path | None = None  # TLS and basic auth (web/webconfig.py); None: plain HTTP

    def since_us(self, now_us: int) -> int:
        """Where a node with no checkpoint starts reading."""
        return since_us(self.since, now_us)


DEFAULTS = Config()  # every top-level setting at its default


def since_us(text: str, now_us: int) -> int:
    """`since` (now, ISO 8601, or relative like -24h) -> microseconds; see `times.since_us`."""
    return _since_us(text, now_us)


TOP_KEYS = frozenset(
    {
        "listen",
        "http_max_connections",
        "state_dir",
        "unit",
        "max_request_seconds",
        "stall_seconds",
        "since",
        "duration_buckets",
        "prompt_duration_buckets",
        "generation_duration_buckets",
        "histograms_per_node",
        "slots",
        "clock_allowance_seconds",
        "start_timeout_seconds",
        "slow_start_share",
        "kinds",
        "nodes",
        "web_config_file",
    }
)
KIND_KEYS = frozenset({"name", "min_tokens", "max_tokens"})
MAX_KINDS = 8  # every mix of kinds is a series: 2**kinds of them


def describe(config: Config) -> Iterator[str]:
    """One line per node, for logs and check-config."""
    for node in (*config.nodes, *config.init_timelines):
        yield describe_node(node)
