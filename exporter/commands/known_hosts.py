"""The `known-hosts` command: SSH nodes' host keys fetched untrusted, printed for review."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from exporter.commands.loading import load_config
from exporter.sources.ssh import SshNode

log = logging.getLogger(__name__)


def main(path: Path, names: list[str]) -> int:
    """The known_hosts lines of the named nodes of the config at `path` (every SSH node when
    none is named): 0, 1 when a key could not be fetched, 2 when a name is no node."""
    cfg = load_config(path, as_service=True, hosts_seen="skip")  # (only hosts and ports are used)
    if cfg is None:
        return 1
    unknown = sorted(set(names) - {n.name for n in cfg.nodes})
    if unknown:
        log.error("not nodes of %s: %s", path, ", ".join(unknown))
        return 2
    chosen = [n for n in cfg.nodes if not names or n.name in names]
    if not names and not any(isinstance(n, SshNode) for n in chosen):
        log.warning("%s has no ssh nodes: no host keys to fetch", path)
        return 0
    from exporter.sources.sshconnect import host_keys  # (asyncssh: only for this command)

    lines, problems = asyncio.run(host_keys(chosen, named=bool(names)))
    if lines:
        print("\n".join(lines))
    for problem in problems:
        log.error("%s", problem)
    return 1 if problems else 0
