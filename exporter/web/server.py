"""The HTTP server: connections accepted, capped, and handed to a Protocol each (or closed).

What each request gets is routes.py's; whether it is answered, gate.py's (the web config: TLS,
basic auth, the rate limit); how a connection is answered, connection.py's; when it is cut,
deadlines.py's. A published snapshot is rendered when the first scrape asks for it, and
gzipped when the first scrape that accepts gzip does (in a worker thread: other requests are
answered meanwhile), then served from memory; a status page is made once, in the pages' own
thread.

It sheds load instead of falling over. At most `max_connections` are open at once (never more
than the file descriptors left after a reserve for checkpoints and sources). The server accepts
connections itself, at most ACCEPT_BATCH a turn of the event loop, and looks at what each one
has sent (without reading it) before it costs more than its descriptor:

- one that closed without sending a byte is closed at once;
- at the cap, one whose request head is not all in yet is closed at once, and one whose head is
  (a scraper sends its request at once) gets in: cut for it is the connection waiting for a
  head or stalled on its answer that has used the largest share of its deadline, else the one
  idle the longest (but not one whose next request is in already); never one being answered,
  nor one whose whole head came with it (Deadlines.victim).

Its sockets are listen.py's (a deep queue, the accept deferred until data comes). Shed
connections and accept errors are logged at most once per LOG_EVERY_S, with their count.

Why it is built so (tests/hostile/test_hostile_http.py: 2,000 hostile connections, each
re-opened as soon as it is cut, and a scraper timed meanwhile). Served through
asyncio.start_server, which accepts 100 a turn and makes each one a task before it could be
counted, the daemon held 500 descriptors for its cap of 64; its listen queue of 100 stayed
full, so a scraper's connect waited for a SYN retransmit (1 s, 3 s); and a scraper's new
connection, the youngest head, was cut for the next one before its request was read: 347 of
348 scrapes failed. Closing what cannot be answered before it costs a transport keeps the
accept queue short.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import functools
import logging
import resource
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from exporter.config.errors import ConfigError
from exporter.config.schema import DEFAULTS
from exporter.web.connection import Connection
from exporter.web.deadlines import HEAD, HEAD_S, IDLE_S, WRITE_S, Deadlines
from exporter.web.gate import MAX_PASSWORD_CHECKS, REFUSALS_LOG_EVERY_S, Gate
from exporter.web.http1 import MAX_HEAD, holds_head
from exporter.web.listen import listen, metrics_url
from exporter.web.routes import Page, Site
from exporter.web.tally import Tally

log = logging.getLogger(__name__)

MAX_CONNECTIONS = DEFAULTS.http_max_connections  # (the config's http_max_connections)
# File descriptors kept for checkpoints, sources and worker threads, and for the up to
# ACCEPT_BATCH connections over the cap for a moment (the ones cut for them close a turn later).
FD_RESERVE = 64
ACCEPT_BATCH = 16  # a turn of the event loop, a listening socket
ACCEPT_RETRY_S = 1.0  # after the process ran out of descriptors (or memory) to accept with
_OUT_OF = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# What Go's net/http answers plain HTTP sent to its TLS port with (before closing it).
PLAIN_TO_TLS = (
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
    b"Client sent an HTTP request to an HTTPS server.\n"
)
_TLS_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a ClientHello
_TLS_RECORD_HEAD = 5  # bytes before a TLS record's body: type, version, length (the last 2)


def fd_budget(reserve: int = FD_RESERVE) -> int:
    """Connections the process can hold: its soft file-descriptor limit (raised to the hard
    one first, as far as it may be) less a reserve."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
    return max(1, soft - reserve)


class HttpServer:
    """Serves `site` on host:port: its listening sockets, the connections open (at most
    `max_connections`), their gate and deadlines, and the thread that makes the pages."""

    def __init__(
        self,
        site: Site,
        host: str,
        port: int,
        *,
        max_connections: int = MAX_CONNECTIONS,
        head_seconds: float = HEAD_S,
        write_seconds: float = WRITE_S,
        idle_seconds: float = IDLE_S,
        web_config: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.site = site
        self.gate = Gate(web_config, clock)
        self.deadlines = Deadlines(clock, head_seconds, write_seconds, idle_seconds)
        self.host, self.port = host, port
        self.max_connections = max_connections
        self.clock = clock
        self.closing = False
        self._pages: concurrent.futures.ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listeners: list[socket.socket] = []
        self._open: set[Connection] = set()  # from accept until its descriptor is closed
        self._all_gone: asyncio.Future[None] | None = None
        self._shed = Tally(log, "connections cut at the connection cap", clock)
        self._accept_errors = Tally(log, "cannot accept a connection", clock)
        self._plain_to_tls = Tally(
            log, "plain HTTP sent to the TLS port (answered 400)", clock, REFUSALS_LOG_EVERY_S
        )
        self._handshakes_failed = Tally(log, "TLS handshakes failed", clock, REFUSALS_LOG_EVERY_S)

    @property
    def web_config(self) -> Path | None:
        """The exporter-toolkit web config (Gate.web_config); None: plain HTTP, no auth."""
        return self.gate.web_config

    @web_config.setter
    def web_config(self, path: Path | None) -> None:
        self.gate.web_config = path

    @property
    def max_connections(self) -> int:
        """Connections open at once at most (the cap)."""
        return self._max_connections

    @max_connections.setter
    def max_connections(self, count: int) -> None:
        """(And password checks at once: never more than half the connections.)"""
        self._max_connections = count
        self.gate.max_checks = min(MAX_PASSWORD_CHECKS, max(1, count // 2))

    @property
    def connections(self) -> int:
        """Connections open now (each holds a file descriptor)."""
        return len(self._open)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "the server is not started"
        return self._loop

    async def start(self) -> tuple[str, int]:
        """Bind and serve in the background; returns the address bound (port 0 picks one)."""
        self.max_connections = min(self.max_connections, fd_budget())
        self._loop = self.deadlines.loop = asyncio.get_running_loop()
        self._listeners = await listen(self._loop, self.host, self.port)
        web = self.gate.web.current() if self.gate.web is not None else None  # (checked at start)
        scheme = "https" if web is not None and web[1] is not None else "http"
        for sock in self._listeners:
            self._loop.add_reader(sock.fileno(), self._accept, sock)
            log.info("listening on %s", metrics_url(sock.getsockname(), scheme))
        name = self._listeners[0].getsockname()
        self.port = int(name[1])
        return str(name[0]), int(name[1])

    async def close(self) -> None:
        """Stop accepting and cut every connection (waiting up to 2 s for them to be gone)."""
        self.closing = True
        for sock in self._listeners:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(sock.fileno())
            sock.close()
        self._listeners = []
        self.deadlines.close()
        self.gate.close()
        if self._pages is not None:
            self._pages.shutdown(wait=False, cancel_futures=True)
        if not self._open:
            return
        self._all_gone = self.loop.create_future()
        for conn in list(self._open):
            conn.cut()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._all_gone), 2)

    def making(self, page: Page) -> asyncio.Future[bytes]:
        """The page being made, in the pages' own thread (one page at a time, and never in the
        default executor, where /metrics is rendered and checkpoints are written), once for
        every request that asks for it."""
        if page.making is None or page.making.cancelled():  # (a server closed meanwhile)
            if self._pages is None:
                self._pages = concurrent.futures.ThreadPoolExecutor(1, "smllm-pages")
            page.making = self.loop.run_in_executor(self._pages, page.made)
        return page.making

    def lost(self, conn: Connection) -> None:
        """`conn`'s descriptor is closed."""
        self.deadlines.forget(conn)
        self._open.discard(conn)
        if not self._open and self._all_gone is not None and not self._all_gone.done():
            self._all_gone.set_result(None)

    # -- accepting -----------------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):  # then the other callbacks (and closes) get a turn
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as e:
                self._accept_errors.add(str(e))
                if e.errno in _OUT_OF:  # a pause, or the loop would spin on the listener
                    self.loop.remove_reader(listener.fileno())
                    self.loop.call_later(ACCEPT_RETRY_S, self._accept_again, listener)
                return
            self._take(sock)

    def _accept_again(self, listener: socket.socket) -> None:
        if not self.closing:
            self.loop.add_reader(listener.fileno(), self._accept, listener)

    def _take(self, sock: socket.socket) -> None:
        """A connection just accepted: closed at once, or on its way to a Protocol."""
        try:
            sock.setblocking(False)
            first: bytes | None = sock.recv(MAX_HEAD, socket.MSG_PEEK)  # read by the Protocol
        except (BlockingIOError, InterruptedError):
            first = None  # nothing sent yet
        except OSError:
            sock.close()  # reset already
            return
        if first == b"":  # closed before sending a byte: nothing to answer
            sock.close()
            return
        try:
            web = self.gate.current_web()
        except ConfigError:  # served TLS: no handshake can be made; else a 500 per request
            if self.gate.tls:
                sock.close()
                return
            web = None
        tls = None if web is None else web[1]
        if tls is not None and first is not None and first[0] != _TLS_HANDSHAKE:
            self._refuse_plain(sock)
            return
        whole = _whole(first, tls is not None)
        if len(self._open) >= self.max_connections and not (whole and self._room()):
            self._shed.add(f"cap {self.max_connections}")
            sock.close()
            return
        # (over TLS, a whole ClientHello gets a connection in at the cap, but never protects
        # it: a handshake, then the request head, may be cut for the next one)
        settings = None if web is None or tls is None else web[0].tls
        conn = Connection(self, whole and tls is None, settings)
        self._open.add(conn)
        self.deadlines.enter(conn, HEAD)
        conn.connecting = connecting = self.loop.create_task(
            self.loop.connect_accepted_socket(
                lambda: conn,
                sock,
                ssl=tls,
                ssl_handshake_timeout=self.deadlines.head_seconds if tls is not None else None,
                ssl_shutdown_timeout=self.deadlines.write_seconds if tls is not None else None,
            )
        )
        connecting.add_done_callback(functools.partial(self._connected, conn, sock))

    def _refuse_plain(self, sock: socket.socket) -> None:
        """Plain HTTP sent to the TLS port: answered as Go's server answers it, then closed."""
        self._plain_to_tls.add()
        with contextlib.suppress(OSError):  # (read, so that closing sends FIN, not RST)
            sock.recv(MAX_HEAD)
            sock.send(PLAIN_TO_TLS)
            sock.shutdown(socket.SHUT_WR)
        sock.close()

    def _connected(
        self,
        conn: Connection,
        sock: socket.socket,
        task: asyncio.Task[tuple[asyncio.Transport, Connection]],
    ) -> None:
        error = None if task.cancelled() else task.exception()
        if task.cancelled() or error is not None:  # (the socket was gone already)
            if isinstance(error, (ssl.SSLError, TimeoutError)) and not conn.gone:
                # a refused handshake (no client certificate, one from another CA, a protocol
                # or cipher not allowed) or none in time: logged as Go's server logs it
                why = getattr(error, "reason", None) or type(error).__name__
                self._handshakes_failed.add(f"the last: {why}")
            sock.close()
            self.lost(conn)

    def _room(self) -> bool:
        """At the cap, for a new connection whose whole request head is in: cut the one
        Deadlines.victim names, if any."""
        victim = self.deadlines.victim()
        if victim is None:
            return False
        self._shed.add(f"cap {self.max_connections}")
        victim.cut()
        return True


def _whole(first: bytes | None, tls: bool) -> bool:
    """Did a client send its first request head whole with its connection (over TLS: its
    ClientHello, a whole TLS record, as a scraper sends it)?"""
    if first is None:
        return False
    if not tls:
        return holds_head(first)
    return len(first) >= _TLS_RECORD_HEAD + int.from_bytes(first[3:_TLS_RECORD_HEAD], "big")
