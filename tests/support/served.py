"""The real HTTP server (exporter.web.server) on 127.0.0.1 in a thread of its own, with a web config,
and clients for it: plain HTTP, or TLS with the test CA (and a client certificate); a /metrics
of any size, made already (`made_site`), and what a non-blocking client has been sent (`take`)."""

from __future__ import annotations

import asyncio
import base64
import http.client
import socket
import ssl
import threading
from pathlib import Path
from typing import cast

from exporter.exposition.published import Published
from exporter.web.routes import Site
from exporter.web.server import HttpServer

from support.certs import Authority, Pair


class Served:
    """An HttpServer on 127.0.0.1 with `web` as its web config, in a thread of its own."""

    def __init__(self, web: Path | None = None) -> None:
        self.site = Site(ready=lambda: True)
        self.server = HttpServer(self.site, "127.0.0.1", 0, web_config=web)
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        started = asyncio.run_coroutine_threadsafe(self.server.start(), self.loop)
        self.port = started.result(10)[1]
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def get(
        self,
        path: str = "/-/healthy",
        *,
        ctx: ssl.SSLContext | None = None,
        auth: tuple[str, bytes] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        if ctx is None:
            conn: http.client.HTTPConnection = http.client.HTTPConnection(
                "127.0.0.1", self.port, timeout=10
            )
        else:
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=10)
        headers = {}
        if auth is not None:
            token = base64.b64encode(auth[0].encode() + b":" + auth[1]).decode()
            headers["Authorization"] = f"Basic {token}"
        try:
            conn.request("GET", path, headers=headers)
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()


def client_context(ca: Authority, client: Pair | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca.path))
    if client is not None:
        ctx.load_cert_chain(client.cert, client.key)
    return ctx


class Made:
    """A published /metrics of `size` bytes, made already (as a Published whose body is rendered)."""

    def __init__(self, size: int) -> None:
        self.made = b"x" * size

    def ready(self, gzipped: bool, openmetrics: bool = False) -> bytes:
        return self.made

    def body(self, gzipped: bool, openmetrics: bool = False) -> bytes:
        return self.made


def made_site(size: int) -> Site:
    """A site whose /metrics is `size` bytes, made already."""
    return Site(metrics=cast(Published, Made(size)), ready=lambda: True)


def take(sock: socket.socket, into: bytearray) -> bool:
    """What the non-blocking `sock` has been sent so far, added to `into`; True once the server's
    end (a FIN) is in too."""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            return False
        if not chunk:
            return True
        into += chunk
