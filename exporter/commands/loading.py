"""Loads the config for a command run from a shell: the service's credentials stood in.

In the service, `${CREDENTIALS_DIRECTORY}` names where systemd put the unit's credentials. A
command an operator runs from a shell (`check-config --as-service`, `known-hosts`, `report`)
reads it as the service will (SERVICE_CREDENTIALS) when it is not set, and says so when the
config names it; a report also reads each credential from the file the unit takes it from
(`preflight.seen_here`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from exporter.base import logs
from exporter.commands import preflight
from exporter.commands.seen import with_hosts_seen
from exporter.config.document import document, read_text
from exporter.config.errors import ConfigError
from exporter.config.load import parse
from exporter.config.schema import Config
from exporter.sources import registry as sources
from exporter.sources.inittimeline import InitTimelineNode
from exporter.sources.registry import NodeConfig

log = logging.getLogger(__name__)

_Node = TypeVar("_Node", bound=NodeConfig | InitTimelineNode)
# Where systemd puts the service's credentials: what `${CREDENTIALS_DIRECTORY}` in a config's
# paths means in the service, for the commands an operator runs from a shell.
SERVICE_CREDENTIALS = str(preflight.SERVICE_CREDENTIALS)
CREDENTIALS_VARIABLE = "CREDENTIALS_DIRECTORY"
_CREDENTIALS_NAMED = re.compile(r"\$(\{CREDENTIALS_DIRECTORY\}|CREDENTIALS_DIRECTORY\b)")


class ServiceEnv(Mapping[str, str]):
    """The environment, with `$CREDENTIALS_DIRECTORY` the service's where it is not set; tells
    whether that stand-in was read."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env, self.stood_in = env, False

    def __getitem__(self, name: str) -> str:
        if name == CREDENTIALS_VARIABLE and name not in self.env:
            self.stood_in = True
            return SERVICE_CREDENTIALS
        return self.env[name]

    def __contains__(self, name: object) -> bool:
        return name == CREDENTIALS_VARIABLE or name in self.env

    def __iter__(self) -> Iterator[str]:
        return iter({*self.env, CREDENTIALS_VARIABLE})

    def __len__(self) -> int:
        return len({*self.env, CREDENTIALS_VARIABLE})


def load_config(
    path: Path,
    *,
    as_service: bool = False,
    from_shell: bool = False,
    hosts_seen: Literal["refuse", "warn", "skip"] = "refuse",
) -> Config | None:
    """The config at `path`, or None with its problems logged. `as_service`: read an unset
    `${CREDENTIALS_DIRECTORY}` as the service will see it (for checks run from a shell);
    `from_shell`: that too, and the service's credentials read where the unit takes them from
    (for a report run from a shell). `hosts_seen`: a `hosts: seen` directory that cannot be
    read refuses the config, or is logged (a daemon starting), or no node is made from those
    entries at all (a command that needs none of them)."""
    env = ServiceEnv(os.environ) if as_service or from_shell else os.environ
    try:
        text = read_text(path)
        cfg = parse(text, str(path), env, available=sources.AVAILABLE)
        if hosts_seen != "skip":
            cfg = with_hosts_seen(cfg, str(path), refuse=hosts_seen == "refuse")
    except ConfigError as e:
        log.error("%s", e, extra=logs.LINES)
        return None
    if isinstance(env, ServiceEnv) and env.stood_in and names_credentials(text, str(path)):
        log.info(
            "$CREDENTIALS_DIRECTORY is not set: read as the service's, %s%s",
            SERVICE_CREDENTIALS,
            f" (its credentials read from their sources: {_credential_sources()})"
            if from_shell
            else "",
        )
    return _credentials_at_their_sources(cfg) if from_shell else cfg


def _credential_sources() -> str:
    """Where the unit takes its credentials from: `ssh_FILE from /etc/sm-llm-exporter/ssh/FILE`,
    ..."""
    return ", ".join(f"{p}FILE from {d}/FILE" for p, d in preflight.CREDENTIAL_DIRECTORIES)


def names_credentials(text: str, source: str) -> bool:
    """Whether some value of the config (not a comment) names `$CREDENTIALS_DIRECTORY`."""
    todo: list[object] = [document(text, source)[0]]
    while todo:
        value = todo.pop()
        if isinstance(value, str) and _CREDENTIALS_NAMED.search(value):
            return True
        if isinstance(value, dict):
            todo += value.values()
        elif isinstance(value, list):
            todo += value
    return False


def names_credentials_at(path: Path) -> bool:
    """Whether the config file at `path` names `$CREDENTIALS_DIRECTORY` (False for `-`, or
    when it cannot be read again)."""
    if str(path) == "-":
        return False
    try:
        return names_credentials(read_text(path), str(path))
    except ConfigError:
        return False


def _credentials_at_their_sources(cfg: Config) -> Config:
    """Every path of the nodes that is a service's credential (under its credentials directory,
    which is not here) as the file the unit takes it from (preflight.seen_here)."""
    nodes = tuple(_seen_here(n) for n in cfg.nodes)
    timelines = tuple(_seen_here(t) for t in cfg.init_timelines)
    return dataclasses.replace(cfg, nodes=nodes, init_timelines=timelines)


def _seen_here(node: _Node) -> _Node:
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, Path):
            changes[f.name] = preflight.seen_here(value)
        elif isinstance(value, tuple) and value and all(isinstance(v, Path) for v in value):
            changes[f.name] = tuple(preflight.seen_here(v) for v in value)
    return dataclasses.replace(node, **changes)
