"""Listening sockets: bound as asyncio binds them, with a deep queue and the accept deferred.

The kernel holds up to LISTEN_BACKLOG connections not accepted yet and, on Linux, hands one
over only once its first bytes are in (TCP_DEFER_ACCEPT, waiting up to DEFER_ACCEPT_S for them).
"""

from __future__ import annotations

import asyncio
import socket
from typing import cast

LISTEN_BACKLOG = 4096  # (the kernel caps it at net.core.somaxconn)
DEFER_ACCEPT_S = 1


async def listen(loop: asyncio.AbstractEventLoop, host: str, port: int) -> list[socket.socket]:
    """Listening sockets on host:port ("" for every interface), as asyncio binds them, with a
    deeper queue and the accept deferred until data comes."""
    infos = await loop.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            if port == 0 and socks:  # one port for every address: the one the first was given
                address = (address[0], socks[0].getsockname()[1], *address[2:])
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            _bind(sock, family, address)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def _bind(sock: socket.socket, family: int, address: tuple[object, ...]) -> None:
    """`sock` bound to `address` and listening, without blocking."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    if hasattr(socket, "TCP_DEFER_ACCEPT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, DEFER_ACCEPT_S)
    try:
        sock.bind(address)
    except OSError as e:  # worded as asyncio words it
        raise OSError(
            e.errno,
            f"error while attempting to bind on address {address!r}: "
            f"{(e.strerror or str(e)).lower()}",
        ) from None
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)


def metrics_url(address: tuple[object, ...], scheme: str = "http") -> str:
    """/metrics's URL on a bound socket's address: http://127.0.0.1:10027/metrics,
    http://[::1]:10027/metrics (https:// with TLS)."""
    host, port = str(address[0]), int(cast(int, address[1]))
    if ":" in host:
        host = f"[{host.replace('%', '%25')}]"  # (a zone: RFC 6874)
    return f"{scheme}://{host}:{port}/metrics"
