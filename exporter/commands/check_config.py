"""The `check-config` command: every problem of a config, its paths and web configs, at once."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from exporter.base import logs
from exporter.commands import preflight
from exporter.commands.loading import SERVICE_CREDENTIALS, ServiceEnv, names_credentials_at
from exporter.commands.seen import with_hosts_seen
from exporter.config.errors import ConfigError
from exporter.config.schema import describe
from exporter.sources import registry as sources

log = logging.getLogger(__name__)


def main(path: Path, *, as_service: bool = False, web_config: Path | None = None) -> int:
    """Every problem of the config at `path` (`-`: standard input), its paths and its web
    configs, in one list; 0 only when there is none."""
    env = ServiceEnv(os.environ)
    checked = preflight.check(
        path, env, sources.AVAILABLE, as_service=as_service, web_config=web_config
    )
    if env.stood_in and (as_service or names_credentials_at(path)):
        log.info(
            "$CREDENTIALS_DIRECTORY is not set: read as the service's, %s", SERVICE_CREDENTIALS
        )
    found = checked.problems
    if checked.config is None and len(found) == 1:  # (it cannot be read, or is no YAML)
        log.error("%s", found[0])
    elif found:
        log.error(
            "%s: %d problem(s):\n%s",
            checked.source,
            len(found),
            "\n".join(found),
            extra=logs.LINES,  # (one a line, each escaped)
        )
    for warning in checked.warnings:
        log.warning("%s", warning)
    if found or checked.config is None:
        return 1
    try:
        cfg = with_hosts_seen(checked.config, checked.source)
    except ConfigError as e:
        log.error("%s", e, extra=logs.LINES)
        return 1
    print(f"{checked.source}: valid, {len(cfg.nodes) + len(cfg.init_timelines)} node(s)")
    for line in describe(cfg):
        print(f"  {line}")
    for line in checked.web:
        print(line)
    return 0
