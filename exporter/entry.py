"""The `sm-llm-exporter` command's first step: SIGHUP caught, then the command line read.

Importing the rest of the exporter takes a while (asyncssh, prometheus_client, the config's
YAML); SIGHUP's default action would end a process reloaded in that time (systemd's
`ExecReload`, logrotate): it is caught first, and the daemon takes it up (`exporter.daemon.hup`).
"""

from __future__ import annotations

from exporter.daemon import hup


def main() -> int:
    hup.catch()
    from exporter import cli

    return cli.main()
