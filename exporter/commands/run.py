"""The `run` command: the config loaded with the command's options over it, then the daemon."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from pathlib import Path

from exporter import __version__
from exporter.base import logs
from exporter.commands.loading import load_config
from exporter.commands.seen import with_hosts_seen
from exporter.config.errors import ConfigError
from exporter.config.load import load
from exporter.config.schema import Config, describe
from exporter.sources import registry as sources
from exporter.web import tls as webtls
from exporter.web import webconfig

log = logging.getLogger(__name__)


def with_options(cfg: Config, listen: tuple[str, int] | None, web_config: Path | None) -> Config:
    """The config with run's options over it; ConfigError when its web config is bad."""
    if listen is not None:
        cfg = dataclasses.replace(cfg, listen_host=listen[0], listen_port=listen[1])
    if web_config is not None:
        cfg = dataclasses.replace(cfg, web_config_file=web_config)
    if cfg.web_config_file is not None:
        web = webtls.load(cfg.web_config_file)
        log.info("web config %s: %s", web.path, webconfig.describe(web))
        for warning in webconfig.warnings(web):
            log.warning("%s", warning)
    return cfg


def main(path: Path, listen: tuple[str, int] | None = None, web_config: Path | None = None) -> int:
    """The daemon on the config at `path` until SIGTERM or SIGINT: 0, or 1 when it cannot
    start (a bad config, the port taken, the state directory not writable)."""
    loaded = load_config(path, hosts_seen="warn")
    if loaded is None:
        return 1
    try:
        cfg = with_options(loaded, listen, web_config)
    except ConfigError as e:
        log.error("%s", e, extra=logs.LINES)
        return 1

    def reloader() -> Config:
        """The config re-read (SIGHUP), the options still over it; ConfigError else."""
        new = load(path, os.environ, available=sources.AVAILABLE)
        return with_options(with_hosts_seen(new, str(path)), listen, web_config)

    from exporter.daemon import daemon  # (the report and the checks need none of it

    log.info("sm-llm-exporter %s starting with %s", __version__, path)
    for line in describe(cfg):
        log.info("%s", line)
    try:
        asyncio.run(daemon.Daemon(cfg, reloader=reloader).run_until_signalled())
    except (OSError, ConfigError) as e:  # the port taken, the state directory not
        # writable, the web config not read in time (a hung mount): one line, no traceback
        log.error("cannot run: %s", e)
        return 1
    return 0
