"""The daemon's HTTP server on the config's listen address, moved to a new one by a reload."""

from __future__ import annotations

import asyncio
import dataclasses

from exporter.config.errors import ConfigError
from exporter.daemon.core import Core
from exporter.daemon.logger import log
from exporter.web.routes import Site
from exporter.web.server import HttpServer, fd_budget


class Listener:
    """Serves `site` on the address `core.config` says (see `rebind`)."""

    def __init__(self, core: Core, site: Site) -> None:
        self.core = core
        self.site = site
        c = core.config
        self.server = self._server(c.listen_host, c.listen_port)
        self.address: tuple[str, int] | None = None  # once bound
        self._rebinding = asyncio.Lock()

    def _server(self, host: str, port: int) -> HttpServer:
        c = self.core.config
        return HttpServer(
            self.site,
            host,
            port,
            max_connections=c.http_max_connections,
            web_config=c.web_config_file,
        )

    async def start(self) -> tuple[str, int]:
        self.address = await self.server.start()
        return self.address

    async def close(self) -> None:
        await self.server.close()

    def take_limits(self, max_connections: int) -> None:
        """The connections allowed at once, from the next connection on."""
        self.server.max_connections = min(max_connections, fd_budget())

    async def rebind(self) -> None:
        """Serve on the reloaded listen address (one rebind at a time; the old server closed
        first, as the address may be the same). When the new address cannot be bound, the old
        one is served again: a reload never takes /metrics down."""
        async with self._rebinding:
            c, old = self.core.config, self.server
            if (c.listen_host, c.listen_port) == (old.host, old.port):
                return
            await old.close()
            for host, port in ((c.listen_host, c.listen_port), (old.host, old.port)):
                server = self._server(host, port)
                try:
                    self.address = await server.start()
                except (OSError, ConfigError) as e:  # (taken; a web config not read in time)
                    log.error("reload: cannot serve on %s:%d: %s", host, port, e)
                    continue
                self.server = server
                if (host, port) != (c.listen_host, c.listen_port):
                    log.warning("reload: serving on %s:%d as before", host, port)
                    # (so that a later reload with the new address tries it again)
                    self.core.config = dataclasses.replace(c, listen_host=host, listen_port=port)
                return
            log.error("reload: /metrics is not served (both addresses refused)")
