"""A small asyncio HTTP server: its connections accepted, capped and timed, TLS, auth, answers sent.

What each request gets is answers.py's (the route, /metrics, the status pages); here, how. A
published snapshot is rendered when the first scrape asks for it, and gzipped when the first
scrape that accepts gzip does (in a worker thread: other requests are answered meanwhile), then
served from memory. TLS and basic auth follow the web config (webtls.py, webauth.py).

It sheds load instead of falling over. At most `max_connections` are open at once (never more
than the file descriptors left after a reserve for checkpoints and sources). The server accepts
connections itself, at most ACCEPT_BATCH a turn of the event loop, and looks at what each one
has sent (without reading it) before it costs more than its descriptor:

- one that closed without sending a byte is closed at once;
- at the cap, one whose request head is not all in yet is closed at once, and one whose head is
  (a scraper sends its request at once) gets in: cut for it is the connection waiting for a
  head or stalled on its answer that has used the largest share of its deadline, else the one
  idle the longest (but not one whose next request is in already); never one being answered,
  nor one whose whole head came with it.

A request head has `head_seconds` to arrive, an answer `write_seconds` to be taken (after a
`Connection: close` too), a kept-alive connection `idle_seconds` between requests. The kernel
holds up to LISTEN_BACKLOG connections not accepted yet and, on Linux, hands one over only once
its first bytes are in (TCP_DEFER_ACCEPT, waiting up to DEFER_ACCEPT_S for them). Shed
connections and accept errors are logged at most once per LOG_EVERY_S, with their count.

Why it is built so (tests/test_hostile_http.py: 2,000 hostile connections, each re-opened as
soon as it is cut, and a scraper timed meanwhile). Served through asyncio.start_server, which
accepts 100 a turn and makes each one a task before it could be counted, the daemon held 500
descriptors for its cap of 64; its listen queue of 100 stayed full, so a scraper's connect
waited for a SYN retransmit (1 s, 3 s); and a scraper's new connection, the youngest head, was
cut for the next one before its request was read: 347 of 348 scrapes failed. Closing what cannot
be answered before it costs a transport keeps the accept queue short; a connection is a Protocol
(no task, no streams), so answering costs little more than the answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import functools
import logging
import math
import re
import resource
import select
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from exporter.config.config import ConfigError
from exporter.web import auth as webauth
from exporter.web import tls as webtls
from exporter.web import webconfig
from exporter.web.routes import (
    REASONS,
    TOO_MANY_CHECKS,
    UNAUTHORIZED,
    Answer,
    Page,
    Pages,
    Render,
    header,
    keep_alive,
    route,
)

log = logging.getLogger(__name__)

MAX_HEAD = 16 * 1024  # request line and headers, bytes: a scraper sends a few hundred
MAX_CONNECTIONS = 64
# File descriptors kept for checkpoints, sources and worker threads, and for the up to
# ACCEPT_BATCH connections over the cap for a moment (the ones cut for them close a turn later).
FD_RESERVE = 64
HEAD_S, WRITE_S, IDLE_S = 5.0, 10.0, 30.0
REQUESTS_PER_CONNECTION = 1000
LOG_EVERY_S = 10.0
# Password checks (bcrypt, tens of milliseconds each, one at a time) waiting or under way at
# once; a request past them gets a 429 at once, so a flood of wrong passwords holds neither
# the connections nor the worker threads that render /metrics and write checkpoints.
MAX_PASSWORD_CHECKS = 8
REFUSALS_LOG_EVERY_S = 60.0  # refused credentials and certificates: logged at most this often
LISTEN_BACKLOG = 4096  # (the kernel caps it at net.core.somaxconn)
ACCEPT_BATCH = 16  # a turn of the event loop, a listening socket
DEFER_ACCEPT_S = 1
WRITE_CHUNK = 64 * 1024
ACCEPT_RETRY_S = 1.0  # after the process ran out of descriptors (or memory) to accept with
_OUT_OF = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# What Go's net/http answers plain HTTP sent to its TLS port with (before closing it).
PLAIN_TO_TLS = (
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
    b"Client sent an HTTP request to an HTTPS server.\n"
)
_TLS_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a ClientHello
# A connection's phase: waiting for a request head, idle between requests, stalled on its
# answer (the client does not take it), being answered (never cut).
_HEAD, _IDLE, _WRITE, _ANSWER = range(4)
# The end of a request head: an empty line (CRLF, or a bare LF: RFC 9112 2.2).
_HEAD_END = re.compile(rb"(?:^|\n)\r*\n")
_POLL = select.POLLIN | getattr(select, "POLLRDHUP", 0)
_HUNG_UP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


@dataclass
class _Tally:
    """Occurrences logged at most once per LOG_EVERY_S, with how many there were."""

    what: str
    clock: Callable[[], float]
    every_s: float = LOG_EVERY_S
    count: int = 0
    logged_at: float | None = None

    def add(self, detail: str = "") -> None:
        self.count += 1
        now = self.clock()
        if self.logged_at is None or now - self.logged_at >= self.every_s:
            suffix = f" ({detail})" if detail else ""
            log.warning("http: %s: %d since the last such line%s", self.what, self.count, suffix)
            self.count, self.logged_at = 0, now


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
    def __init__(
        self,
        pages: Pages,
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
        self.pages = pages
        self.web: webtls.Watched | None = None
        self.web_config = web_config  # (the setter: watched from here on)
        self.auth = webauth.Auth()
        self.rate = webauth.RateLimit(clock)
        self._checking = 0  # password checks waiting or under way
        self._bcrypt: concurrent.futures.ThreadPoolExecutor | None = None
        self._pages: concurrent.futures.ThreadPoolExecutor | None = None
        self.host, self.port = host, port
        self.max_connections = max_connections
        self.head_seconds, self.write_seconds = head_seconds, write_seconds
        self.idle_seconds = idle_seconds
        self.clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listeners: list[socket.socket] = []
        self._open: set[_Connection] = set()  # from accept until its descriptor is closed
        # the connections in each phase but _ANSWER, by when they entered it: oldest first
        self._phases: tuple[dict[_Connection, None], ...] = ({}, {}, {})
        self._sweep: asyncio.TimerHandle | None = None  # at the earliest deadline
        self._sweep_at = math.inf
        self._closing = False
        self._all_gone: asyncio.Future[None] | None = None
        self._shed = _Tally("connections cut at the connection cap", clock)
        self._accept_errors = _Tally("cannot accept a connection", clock)
        self._refused = _Tally(
            "requests refused (401: no, unknown or wrong credentials)", clock, REFUSALS_LOG_EVERY_S
        )
        self._peers_refused = _Tally(
            "TLS clients refused (certificate not allowed)", clock, REFUSALS_LOG_EVERY_S
        )
        self._plain_to_tls = _Tally(
            "plain HTTP sent to the TLS port (answered 400)", clock, REFUSALS_LOG_EVERY_S
        )
        self._handshakes_failed = _Tally("TLS handshakes failed", clock, REFUSALS_LOG_EVERY_S)
        self._web_errors = _Tally(
            "the web config cannot be used: refusing", clock, REFUSALS_LOG_EVERY_S
        )

    @property
    def web_config(self) -> Path | None:
        """The exporter-toolkit web config (webconfig.py) read for every connection and request;
        None: plain HTTP, no auth."""
        return None if self.web is None else self.web.path

    @web_config.setter
    def web_config(self, path: Path | None) -> None:
        """(A new Watched even for the same path: what it protects is taken anew, as on a
        reload.)"""
        self.web = None if path is None else webtls.Watched(path)

    def current_web(self) -> tuple[webconfig.WebConfig, ssl.SSLContext | None] | None:
        """The web config as of now (None: there is none); ConfigError while it is bad (logged
        at most once a minute: connections and requests are refused meanwhile)."""
        if self.web is None:
            return None
        try:
            return self.web.current()
        except ConfigError as e:
            self._web_errors.add("; ".join(e.problems)[:500])
            raise

    @property
    def connections(self) -> int:
        """Connections open now (each holds a file descriptor)."""
        return len(self._open)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "the server is not started"
        return self._loop

    def deadline(self, phase: int) -> float:
        """Seconds a connection may stay in `phase`."""
        if phase == _HEAD:
            return self.head_seconds
        if phase == _IDLE:
            return self.idle_seconds
        return self.write_seconds if phase == _WRITE else math.inf

    async def start(self) -> tuple[str, int]:
        """Bind and serve in the background; returns the address bound (port 0 picks one)."""
        self.max_connections = min(self.max_connections, fd_budget())
        self._loop = asyncio.get_running_loop()
        self._listeners = await _listen(self._loop, self.host, self.port)
        web = self.web.current() if self.web is not None else None  # (checked at start)
        scheme = "https" if web is not None and web[1] is not None else "http"
        for sock in self._listeners:
            self._loop.add_reader(sock.fileno(), self._accept, sock)
            log.info("listening on %s", metrics_url(sock.getsockname(), scheme))
        name = self._listeners[0].getsockname()
        self.port = int(name[1])
        return str(name[0]), int(name[1])

    async def close(self) -> None:
        """Stop accepting and cut every connection (waiting up to 2 s for them to be gone)."""
        self._closing = True
        for sock in self._listeners:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(sock.fileno())
            sock.close()
        self._listeners = []
        if self._sweep is not None:
            self._sweep.cancel()
        for pool in (self._bcrypt, self._pages):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        if not self._open:
            return
        self._all_gone = self.loop.create_future()
        for conn in list(self._open):
            conn.cut()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._all_gone), 2)

    def check_password(
        self, users: Mapping[str, bytes], user: str, password: bytes
    ) -> asyncio.Future[bool] | None:
        """A bcrypt check in the server's own thread (not the default executor: /metrics and
        the checkpoints use that); None when MAX_PASSWORD_CHECKS are under way already."""
        if self._checking >= min(MAX_PASSWORD_CHECKS, max(1, self.max_connections // 2)):
            return None  # (and never more than half the connections)
        if self._bcrypt is None:
            self._bcrypt = concurrent.futures.ThreadPoolExecutor(1, "smllm-bcrypt")
        self._checking += 1
        checking = self.loop.run_in_executor(self._bcrypt, self.auth.check, users, user, password)
        checking.add_done_callback(self._checked)
        return checking

    def _checked(self, _: asyncio.Future[bool]) -> None:
        self._checking -= 1

    def making(self, page: Page) -> asyncio.Future[bytes]:
        """The page being made, in the pages' own thread (one page at a time, and never in the
        default executor, where /metrics is rendered and checkpoints are written), once for
        every request that asks for it."""
        if page.making is None or page.making.cancelled():  # (a server closed meanwhile)
            if self._pages is None:
                self._pages = concurrent.futures.ThreadPoolExecutor(1, "smllm-pages")
            page.making = self.loop.run_in_executor(self._pages, page.made)
        return page.making

    @property
    def password_checks(self) -> int:
        """Password checks waiting or under way now."""
        return self._checking

    def unauthorized(self, transport: asyncio.Transport | None) -> None:
        """A 401: counted, logged at most once a minute (with the last client's address)."""
        peer = None if transport is None else transport.get_extra_info("peername")
        self._refused.add(f"the last from {_address(peer)}")

    def peer_refused(self, peer: object) -> None:
        self._peers_refused.add(f"the last from {_address(peer)}")

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
        if not self._closing:
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
            web = self.current_web()
        except ConfigError:  # served TLS: no handshake can be made; else a 500 per request
            if self.web is not None and self.web.tls:
                sock.close()
                return
            web = None
        tls = None if web is None else web[1]
        if tls is None:
            whole = first is not None and _HEAD_END.search(first) is not None
        elif first is not None and first[0] != _TLS_HANDSHAKE:
            self._plain_to_tls.add()
            with contextlib.suppress(OSError):  # (read, so that closing sends FIN, not RST)
                sock.recv(MAX_HEAD)
                sock.send(PLAIN_TO_TLS)
                sock.shutdown(socket.SHUT_WR)
            sock.close()
            return
        else:  # a whole TLS record: a ClientHello sent at once, as a scraper sends it
            whole = first is not None and len(first) >= 5 + int.from_bytes(first[3:5], "big")
        if len(self._open) >= self.max_connections and not (whole and self._room()):
            self._shed.add(f"cap {self.max_connections}")
            sock.close()
            return
        # (over TLS, a whole ClientHello gets a connection in at the cap, but never protects
        # it: a handshake, then the request head, may be cut for the next one)
        settings = None if web is None or tls is None else web[0].tls
        conn = _Connection(self, whole and tls is None, settings)
        self._open.add(conn)
        self._enter(conn, _HEAD)
        conn.connecting = connecting = self.loop.create_task(
            self.loop.connect_accepted_socket(
                lambda: conn,
                sock,
                ssl=tls,
                ssl_handshake_timeout=self.head_seconds if tls is not None else None,
                ssl_shutdown_timeout=self.write_seconds if tls is not None else None,
            )
        )
        connecting.add_done_callback(functools.partial(self._connected, conn, sock))

    def _connected(
        self,
        conn: _Connection,
        sock: socket.socket,
        task: asyncio.Task[tuple[asyncio.Transport, _Connection]],
    ) -> None:
        error = None if task.cancelled() else task.exception()
        if task.cancelled() or error is not None:  # (the socket was gone already)
            if isinstance(error, (ssl.SSLError, TimeoutError)) and not conn.gone:
                # a refused handshake (no client certificate, one from another CA, a protocol
                # or cipher not allowed) or none in time: logged as Go's server logs it
                why = getattr(error, "reason", None) or type(error).__name__
                self._handshakes_failed.add(f"the last: {why}")
            sock.close()
            self._lost(conn)

    def _room(self) -> bool:
        """At the cap, for a new connection whose whole request head is in: cut the one waiting
        for a head or stalled on its answer that has used the largest share of its deadline,
        else the one idle the longest (a client that took its answers)."""
        now = self.clock()
        victim, most = None, -1.0
        for phase in (_HEAD, _WRITE):
            for conn in self._phases[phase]:  # the oldest that may be cut
                if conn.cuttable and not (phase == _HEAD and conn.whole):
                    share = (now - conn.since) / self.deadline(phase)
                    if share > most:
                        victim, most = conn, share
                    break
        if victim is None:  # the longest idle but one whose next request is in already
            victim = next((c for c in self._phases[_IDLE] if not _sent_more(c)), None)
        if victim is None:
            return False
        self._shed.add(f"cap {self.max_connections}")
        victim.cut()
        return True

    # -- phases and deadlines ------------------------------------------------------------------

    def _enter(self, conn: _Connection, phase: int) -> None:
        """`conn` enters `phase` now (and its deadline starts)."""
        if conn.phase != _ANSWER:
            self._phases[conn.phase].pop(conn, None)
        conn.phase, conn.since = phase, self.clock()
        if phase != _ANSWER:
            waiting = self._phases[phase]
            waiting[conn] = None
            if len(waiting) == 1:
                self._arm(conn.since + self.deadline(phase))

    def _forget(self, conn: _Connection) -> None:
        """`conn` is cut or gone: no phase, no deadline."""
        if conn.phase != _ANSWER:
            self._phases[conn.phase].pop(conn, None)
            conn.phase = _ANSWER

    def _lost(self, conn: _Connection) -> None:
        """`conn`'s descriptor is closed."""
        self._forget(conn)
        self._open.discard(conn)
        if not self._open and self._all_gone is not None and not self._all_gone.done():
            self._all_gone.set_result(None)

    def _arm(self, at: float) -> None:
        if at < self._sweep_at and not self._closing:
            if self._sweep is not None:
                self._sweep.cancel()
            self._sweep_at = at
            self._sweep = self.loop.call_later(max(0.0, at - self.clock()), self._cut_late)

    def _cut_late(self) -> None:
        """Cut every connection past its phase's deadline; then wait for the next one."""
        self._sweep, self._sweep_at = None, math.inf
        now, nearest = self.clock(), math.inf
        for phase, waiting in enumerate(self._phases):
            limit = self.deadline(phase)
            while waiting:
                conn = next(iter(waiting))
                if now - conn.since < limit:
                    nearest = min(nearest, conn.since + limit)
                    break
                conn.cut()  # (which takes it out of `waiting`)
        if math.isfinite(nearest):
            self._arm(nearest)

    # -- answering -----------------------------------------------------------------------------


class _Connection(asyncio.Protocol):
    """One client: its request heads answered in turn, each phase under its deadline."""

    def __init__(self, server: HttpServer, whole: bool, tls: webconfig.Tls | None = None) -> None:
        self.server = server
        self.tls = tls  # the TLS settings it was accepted with (None: plain HTTP)
        self.extra: list[str] = []  # header lines the web config adds to its answers
        self.transport: asyncio.Transport | None = None
        self.whole = whole  # its whole first head came with it: not cut before it is answered
        self.phase, self.since = _ANSWER, 0.0  # (the server enters it in _HEAD)
        self.buffer = bytearray()
        self.served = 0
        self.method = b""
        self.keep = True  # the connection is kept after the answer under way
        self.eof = False  # the client sends no more
        self.writing_paused = self.reading_paused = False
        self.gone = False  # cut or lost: its descriptor is closed (or about to be)
        self.rendering: asyncio.Future[Any] | None = None  # a body made, a password checked
        self.connecting: asyncio.Task[Any] | None = None  # until connected (TLS: handshaken)
        self.unsent = memoryview(b"")  # of the answer under way, what the transport has not had

    @property
    def cuttable(self) -> bool:
        """Connected, or in its TLS handshake (which `cut` ends too)."""
        handshaking = self.connecting is not None and not self.connecting.done()
        return self.transport is not None or (handshaking and self.tls is not None)

    def cut(self) -> None:
        """Closed at once, nothing more sent: a client too slow or gone, or the cap."""
        if self.gone:
            return
        self.gone = True
        if self.transport is not None:
            self.transport.abort()
        elif self.connecting is not None:  # in its TLS handshake: ended, its socket closed
            self.connecting.cancel()
        self.server._forget(self)

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if self.gone or self.server._closing:  # cut while it was on its way
            self.gone = True
            self.transport.abort()
            return
        tls = self.tls
        if tls is not None:  # its ClientHello came whole; whether its request head will is open
            self.whole = False
        if tls is not None and not webtls.allowed_peer(
            tls, self.transport.get_extra_info("peercert")
        ):
            self.server.peer_refused(self.transport.get_extra_info("peername"))
            self.gone = True
            self.transport.abort()
            return
        # paused whenever the kernel does not take all it is handed: see _pump. Over TLS, when
        # the encrypted bytes back up (the socket's transport, below, holds up to its own high
        # water, 64 KiB): at high=0 asyncio's SSL transport pauses at once and never resumes.
        if tls is None:
            self.transport.set_write_buffer_limits(high=0)
        else:
            self.transport.set_write_buffer_limits(high=1, low=0)

    def data_received(self, data: bytes) -> None:
        if self.gone:
            return
        self.buffer += data
        if self.phase in (_HEAD, _IDLE):
            self._next()
        elif len(self.buffer) > MAX_HEAD and self.transport is not None:
            self.transport.pause_reading()  # pipelined while one is answered: enough for now
            self.reading_paused = True

    def eof_received(self) -> bool:
        self.eof = True
        if self.phase in (_HEAD, _IDLE):
            self._next()
        # the transport stays open for the answer, closed after; over TLS it cannot (asyncio's
        # SSL transport closes on the client's close_notify, and warns if asked not to)
        return self.tls is None

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        closing = self.transport is None or self.transport.is_closing()
        if self.phase == _WRITE and not self.gone and not closing:
            self._pump()
            self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        if self.rendering is not None:
            self.rendering.cancel()
        self.server._lost(self)

    # -- the requests --------------------------------------------------------------------------

    def _next(self) -> None:
        """Answer the request heads in the buffer, one at a time, while each is answered at once."""
        while self.phase in (_HEAD, _IDLE) and not self.gone:
            end = _HEAD_END.search(self.buffer)
            if end is None or end.end() > MAX_HEAD:
                if end is not None or len(self.buffer) > MAX_HEAD:
                    self.cut()  # a head too long
                elif self.eof:
                    self._close()  # the client is done: what it has not taken yet, then FIN
                return
            lines = bytes(self.buffer[: end.start()]).split(b"\n")
            del self.buffer[: end.end()]
            self._answer(b"\r\n".join(line.rstrip(b"\r\n") for line in lines))

    def _answer(self, head: bytes) -> None:
        self.served += 1
        self.whole = False
        self.method = head.split(b" ", 1)[0]
        self.keep = keep_alive(head) and self.served < REQUESTS_PER_CONNECTION
        self.extra = []
        try:
            web = self.server.current_web()
        except ConfigError:
            self._send((500, "text/plain", b"the web config cannot be used: see the log\n", []))
            return
        if web is not None:
            config = web[0]
            self.extra = [f"{name}: {value}" for name, value in config.headers]
            if not self.server.rate.allow(config):
                self._send((429, "text/plain", b"too many requests\n", []))
                return
            if config.users:
                authorization = header(head.partition(b"\r\n")[2], b"authorization", False)
                given = webauth.credentials(authorization)
                if given is None:
                    self._unauthorized()
                    return
                verdict = self.server.auth.cached(config.users, *given)
                if verdict is None:  # bcrypt, in the server's own worker thread
                    checking = self.server.check_password(config.users, *given)
                    if checking is None:
                        self._send(TOO_MANY_CHECKS)
                        return
                    self.server._enter(self, _ANSWER)
                    self.rendering = checking
                    self.rendering.add_done_callback(functools.partial(self._checked, head))
                    return
                if not verdict:
                    self._unauthorized()
                    return
        self._route(head)

    def _unauthorized(self) -> None:
        self.server.unauthorized(self.transport)
        self._send(UNAUTHORIZED)

    def _checked(self, head: bytes, checking: asyncio.Future[bool]) -> None:
        self.rendering = None
        if self.gone or checking.cancelled():
            return
        if checking.exception() is not None or not checking.result():
            self._unauthorized()
        else:
            self._route(head)
        self._next()

    def _route(self, head: bytes) -> None:
        answer = route(self.server.pages, head)
        if not isinstance(answer, Render):
            self._send(answer)
            return
        self.server._enter(self, _ANSWER)
        if answer.page is not None:  # (its own future: cancelling it leaves the making alone)
            self.rendering = asyncio.shield(self.server.making(answer.page))
        else:
            self.rendering = asyncio.ensure_future(asyncio.to_thread(answer.make))
        self.rendering.add_done_callback(functools.partial(self._rendered, answer))

    def _rendered(self, render: Render, rendering: asyncio.Future[bytes]) -> None:
        self.rendering = None
        if self.gone:
            return
        if rendering.cancelled():  # (its server closing): nothing to answer with
            self.cut()
            return
        error = rendering.exception()
        if error is not None:
            if render.page is None or not render.page.failed:
                log.error("http: cannot render a page", exc_info=error)
            if render.page is not None:
                render.page.failed = True  # (logged once for this snapshot, 500 each time)
                self._send((500, "text/plain", b"this page cannot be made: see the log\n", []))
                self._next()
            else:
                self.cut()
            return
        self._send(render.answer(rendering.result()))
        self._next()

    def _send(self, answer: Answer) -> None:
        status, ctype, body, extra = answer
        transport = self.transport
        assert transport is not None
        keep = self.keep and not self.eof
        head = [
            f"HTTP/1.1 {status} {REASONS[status]}",
            f"Content-Type: {ctype}",
            f"Content-Length: {len(body)}",
            "Connection: keep-alive" if keep else "Connection: close",
            *extra,
            *self.extra,
        ]
        self.keep = keep
        head_bytes = ("\r\n".join(head) + "\r\n\r\n").encode()
        unsent = memoryview(body if self.method != b"HEAD" else b"")
        piece = max(0, WRITE_CHUNK - len(head_bytes))  # the head goes with the body's start
        transport.write(head_bytes + unsent[:piece])
        self.unsent = unsent[piece:]
        self._pump()

    def _pump(self) -> None:
        """Hand the answer to the transport WRITE_CHUNK at a time while the kernel takes it all
        (the transport pauses us as soon as it holds back any): of an answer the client does
        not read, one piece is copied, not all of it."""
        assert self.transport is not None
        while self.unsent and not self.writing_paused:
            self.transport.write(self.unsent[:WRITE_CHUNK])
            self.unsent = self.unsent[WRITE_CHUNK:]
        if self.unsent or (self.writing_paused and self.keep):
            if self.phase != _WRITE:
                self.server._enter(self, _WRITE)  # until the client takes it: resume_writing
        elif not self.keep:
            self._close()
        else:
            self._taken()

    def _close(self) -> None:
        """Closed once the transport has sent what it holds (in write_seconds, else cut)."""
        assert self.transport is not None
        self.keep = False
        if self.phase != _WRITE:
            self.server._enter(self, _WRITE)
        self.transport.close()

    def _taken(self) -> None:
        """The answer is with the kernel, all of it."""
        self.server._enter(self, _IDLE)
        if self.reading_paused and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()


async def _listen(loop: asyncio.AbstractEventLoop, host: str, port: int) -> list[socket.socket]:
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
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def metrics_url(address: tuple[object, ...], scheme: str = "http") -> str:
    """/metrics's URL on a bound socket's address: http://127.0.0.1:10027/metrics,
    http://[::1]:10027/metrics (https:// with TLS)."""
    host, port = str(address[0]), int(cast(int, address[1]))
    if ":" in host:
        host = f"[{host.replace('%', '%25')}]"  # (a zone: RFC 6874)
    return f"{scheme}://{host}:{port}/metrics"


def _address(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return "an unknown address"


def _sent_more(conn: _Connection) -> bool:
    """Has the client sent more than it was answered (its next request is on its way in)? A
    poll, not a read; a client that has closed its end has sent nothing more."""
    if conn.transport is None:
        return False
    poller = select.poll()
    poller.register(conn.transport.get_extra_info("socket").fileno(), _POLL)
    events = poller.poll(0)
    return bool(events) and not events[0][1] & _HUNG_UP
