"""exporter.web.server over real sockets, the server and its client on one event loop (the client
a non-blocking socket read between the loop's turns): what asyncio's transports do with the
connections it hands them."""

from __future__ import annotations

import asyncio
import socket

from exporter.web.deadlines import WRITE
from exporter.web.server import HttpServer

from support.served import made_site, take
from support.tools import turn, until

# More than the kernel holds for a client that does not read (the server's send buffer, at most
# net.ipv4.tcp_wmem's 4 MiB by default, and the client's receive buffer), so the answer stalls.
BODY = 8 << 20
CLIENT_RCVBUF = 64 * 1024


async def _answered_then_lost_once() -> list[dict[str, object]]:
    """A keep-alive GET /metrics whose answer stalls, the client's EOF, then the whole answer
    read; what reached the loop's exception handler meanwhile."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    server = HttpServer(made_site(BODY), "127.0.0.1", 0)
    port = (await server.start())[1]
    client = socket.socket()
    try:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_RCVBUF)
        client.settimeout(5)
        client.connect(("127.0.0.1", port))  # (the kernel's handshake: no turn of the loop)
        client.setblocking(False)
        client.send(b"GET /metrics HTTP/1.1\r\n\r\n")
        conn = await until(lambda: next(iter(server._open), None), 5, "the connection taken")
        await until(lambda: conn.phase == WRITE and conn.writing_paused, 5, "the answer stalled")
        client.shutdown(socket.SHUT_WR)  # the client is done: the server closes after the answer
        await until(lambda: conn.eof, 5, "the client's EOF in")
        got = bytearray()
        await until(lambda: take(client, got), 10, "the whole answer, then the server's FIN")
        await until(lambda: server.connections == 0, 5, "the connection lost")
        await turn()  # (a second connection_lost, scheduled already, has run by now)
        head, _, body = bytes(got).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and len(body) == BODY
        return reported
    finally:
        client.close()
        await server.close()


def test_a_close_made_as_writing_resumes_loses_the_connection_once() -> None:
    """An answer's end taken as asyncio resumes writing, then the connection closed (the
    client's EOF came meanwhile; or it asked for Connection: close, as urllib does, and the
    kernel took the end in one go): connection_lost runs once, nothing reaches the loop's
    exception handler.

    A CPython bug (gh-156512, in 3.11) that the server avoids: _SelectorSocketTransport.
    _write_ready calls the protocol's resume_writing (`self._maybe_resume_protocol()`), then,
    its buffer empty, `if self._closing: self._call_connection_lost(None)`. A close() made inside
    resume_writing found the buffer empty too and had scheduled `_call_connection_lost` already
    (`self._conn_lost += 1; self._loop.call_soon(self._call_connection_lost, None)`): it ran
    again on a transport whose protocol and socket were cleared, "AttributeError: 'NoneType'
    object has no attribute 'close'" in the loop's exception handler. The connection goes on
    writing after resume_writing has returned."""
    reported = asyncio.run(_answered_then_lost_once())
    assert not reported, [f"{c.get('message')}: {c.get('exception')!r}" for c in reported]
