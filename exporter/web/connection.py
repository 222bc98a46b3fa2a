"""One client's connection: its request heads answered in turn, each phase under its deadline.

A connection is an asyncio Protocol (no task, no streams), so answering costs little more than
the answer. Its heads are answered one at a time: the gate admits each (gate.py), the route
gives its answer (routes.py), and a body still to be made is made in a worker thread while the
connection waits in phase ANSWER (never cut). An answer goes to the transport WRITE_CHUNK at a
time while the kernel takes it all; one the client does not take leaves the connection in phase
WRITE until it does (or its deadline cuts it). Requests pipelined behind the one answered wait
in the buffer (reading pauses past MAX_HEAD of them).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import select
from typing import Any, Protocol, cast

from exporter.web.deadlines import ANSWER, HEAD, IDLE, WRITE, Deadlines
from exporter.web.gate import Gate
from exporter.web.http1 import MAX_HEAD, Answer, HeadTooLong, answer_head, keep_alive, take_head
from exporter.web.routes import Page, Render, Site, route
from exporter.web.tls_server_config import Tls

log = logging.getLogger(__name__)

REQUESTS_PER_CONNECTION = 1000
WRITE_CHUNK = 64 * 1024
PAGE_FAILED: Answer = (500, "text/plain", b"this page cannot be made: see the log\n", [])
_POLL = select.POLLIN | getattr(select, "POLLRDHUP", 0)
_HUNG_UP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


class Host(Protocol):
    """What a connection asks of the server that accepted it."""

    site: Site
    gate: Gate
    deadlines: Deadlines
    closing: bool  # the server is closing: a connection on its way in is cut

    def making(self, page: Page) -> asyncio.Future[bytes]:
        """The page being made (once, for every request that asks for it meanwhile)."""

    def lost(self, conn: Connection) -> None:
        """`conn`'s descriptor is closed."""


class Connection(asyncio.Protocol):
    """One client: its request heads answered in turn, each phase under its deadline."""

    def __init__(self, host: Host, whole: bool, tls: Tls | None = None) -> None:
        self.host = host
        self.tls = tls  # the TLS settings it was accepted with (None: plain HTTP)
        self.extra: tuple[str, ...] = ()  # header lines the web config adds to its answers
        self.transport: asyncio.Transport | None = None
        self.whole = whole  # its whole first head came with it: not cut before it is answered
        self.phase, self.since = ANSWER, 0.0  # (the server enters it in HEAD)
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
        self.host.deadlines.forget(self)

    def sent_more(self) -> bool:
        """Has the client sent more than it was answered (its next request is on its way in)? A
        poll, not a read; a client that has closed its end has sent nothing more."""
        if self.transport is None:
            return False
        poller = select.poll()
        poller.register(self.transport.get_extra_info("socket").fileno(), _POLL)
        events = poller.poll(0)
        return bool(events) and not events[0][1] & _HUNG_UP

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if self.gone or self.host.closing:  # cut while it was on its way
            self.gone = True
            self.transport.abort()
            return
        tls = self.tls
        if tls is not None:  # its ClientHello came whole; whether its request head will is open
            self.whole = False
        if tls is not None and not self.host.gate.peer_allowed(tls, self.transport):
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
        if self.phase in (HEAD, IDLE):
            self._next()
        elif len(self.buffer) > MAX_HEAD and self.transport is not None:
            self.transport.pause_reading()  # pipelined while one is answered: enough for now
            self.reading_paused = True

    def eof_received(self) -> bool:
        self.eof = True
        if self.phase in (HEAD, IDLE):
            self._next()
        # the transport stays open for the answer, closed after; over TLS it cannot (asyncio's
        # SSL transport closes on the client's close_notify, and warns if asked not to)
        return self.tls is None

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        # The answer goes on a callback later, not in here: asyncio calls this from its socket
        # transport's _write_ready, which, finding its buffer empty and the transport closing
        # when this returns, calls _call_connection_lost itself; but a close() or abort() made
        # in here (the answer's end all taken, then Connection: close or the client's EOF) saw
        # the buffer empty and scheduled that call already. connection_lost would run twice,
        # the second an AttributeError for the loop's exception handler (CPython gh-156512,
        # unfixed in 3.11).
        asyncio.get_running_loop().call_soon(self._resumed)

    def _resumed(self) -> None:
        closing = self.transport is None or self.transport.is_closing()
        if self.phase == WRITE and not self.gone and not closing and not self.writing_paused:
            self._pump()
            self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        if self.rendering is not None:
            self.rendering.cancel()
        self.host.lost(self)

    # -- the requests --------------------------------------------------------------------------

    def _next(self) -> None:
        """Answer the request heads in the buffer, one at a time, while each is answered at once."""
        while self.phase in (HEAD, IDLE) and not self.gone:
            try:
                head = take_head(self.buffer)
            except HeadTooLong:
                self.cut()
                return
            if head is None:
                if self.eof:
                    self._close()  # the client is done: what it has not taken yet, then FIN
                return
            self._answer(head)

    def _answer(self, head: bytes) -> None:
        self.served += 1
        self.whole = False
        self.method = head.split(b" ", 1)[0]
        self.keep = keep_alive(head) and self.served < REQUESTS_PER_CONNECTION
        admission = self.host.gate.admit(head, self.transport)
        self.extra = admission.headers
        if admission.refusal is not None:
            self._send(admission.refusal)
        elif admission.checking is not None:
            self.host.deadlines.enter(self, ANSWER)
            self.rendering = admission.checking
            self.rendering.add_done_callback(functools.partial(self._checked, head))
        else:
            self._route(head)

    def _checked(self, head: bytes, checking: asyncio.Future[bool]) -> None:
        self.rendering = None
        if self.gone or checking.cancelled():
            return
        if checking.exception() is not None or not checking.result():
            self._send(self.host.gate.unauthorized(self.transport))
        else:
            self._route(head)
        self._next()

    def _route(self, head: bytes) -> None:
        answer = route(self.host.site, head)
        if not isinstance(answer, Render):
            self._send(answer)
            return
        self.host.deadlines.enter(self, ANSWER)
        if answer.page is not None:  # (its own future: cancelling it leaves the making alone)
            self.rendering = asyncio.shield(self.host.making(answer.page))
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
                self._send(PAGE_FAILED)
                self._next()
            else:
                self.cut()
            return
        self._send(render.answer(rendering.result()))
        self._next()

    # -- the answer ------------------------------------------------------------------------------

    def _send(self, answer: Answer) -> None:
        status, ctype, body, extra = answer
        transport = self.transport
        assert transport is not None
        self.keep = keep = self.keep and not self.eof
        head = answer_head(status, ctype, len(body), keep, [*extra, *self.extra])
        unsent = memoryview(body if self.method != b"HEAD" else b"")
        piece = max(0, WRITE_CHUNK - len(head))  # the head goes with the body's start
        transport.write(head + unsent[:piece])
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
            if self.phase != WRITE:  # until the client takes it: resume_writing
                self.host.deadlines.enter(self, WRITE)
        elif not self.keep:
            self._close()
        else:
            self._taken()

    def _close(self) -> None:
        """Closed once the transport has sent what it holds (in write_seconds, else cut)."""
        assert self.transport is not None
        self.keep = False
        if self.phase != WRITE:
            self.host.deadlines.enter(self, WRITE)
        self.transport.close()

    def _taken(self) -> None:
        """The answer is with the kernel, all of it."""
        self.host.deadlines.enter(self, IDLE)
        if self.reading_paused and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()
