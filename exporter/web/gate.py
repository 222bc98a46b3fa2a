"""Who is answered: the web config in force, its rate limit, basic auth and allowed client names.

Every request asks the web config as it is now (watched.py, as exporter-toolkit reads it for
every one). A web config that cannot be used gets a 500 (and is logged at most once a minute);
past the rate limit, a 429; without the credentials basic auth wants, a 401 (counted, logged at
most once a minute with the last client's address). A password not seen lately is checked by
bcrypt in the gate's own thread, never in the default executor (where /metrics is rendered and
checkpoints are written): at most MAX_PASSWORD_CHECKS wait or run at once (and never more than
half the connections), and a request past them gets a 429 at once, so a flood of wrong
passwords holds neither the connections nor the worker threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from exporter.config.errors import ConfigError
from exporter.web import auth as webauth
from exporter.web import tls as webtls
from exporter.web.http1 import Answer, header
from exporter.web.tally import Tally
from exporter.web.tls_server_config import Tls
from exporter.web.watched import Watched
from exporter.web.webconfig import WebConfig

log = logging.getLogger(__name__)

# Password checks (bcrypt, tens of milliseconds each, one at a time) waiting or under way at
# once: the default, lowered to half the connection cap when that is smaller.
MAX_PASSWORD_CHECKS = 8
REFUSALS_LOG_EVERY_S = 60.0  # refused credentials and certificates: logged at most this often

WEB_CONFIG_UNUSABLE: Answer = (
    500,
    "text/plain",
    b"the web config cannot be used: see the log\n",
    [],
)
TOO_MANY_REQUESTS: Answer = (429, "text/plain", b"too many requests\n", [])
TOO_MANY_CHECKS: Answer = (
    429,
    "text/plain",
    b"too many password checks under way: try again\n",
    ["Retry-After: 1"],
)
UNAUTHORIZED: Answer = (
    401,
    "text/plain; charset=utf-8",
    b"Unauthorized\n",
    ["WWW-Authenticate: Basic"],
)


class Admission(NamedTuple):
    """What the gate says of a request: the header lines the web config adds to every answer,
    and the answer that refuses it, or the password check it waits for (neither: answer it)."""

    headers: tuple[str, ...] = ()
    refusal: Answer | None = None
    checking: asyncio.Future[bool] | None = None


ADMITTED = Admission()  # without a web config: every request


class Gate:
    """The web config (None: plain HTTP, no auth), read anew as it changes, and what it asks of
    each connection and request."""

    def __init__(
        self, web_config: Path | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.web: Watched | None = None
        self.web_config = web_config  # (the setter: watched from here on)
        self.auth = webauth.Auth()
        self.rate = webauth.RateLimit(clock)
        self.max_checks = MAX_PASSWORD_CHECKS  # password checks waiting or under way at most
        self._checking = 0  # password checks waiting or under way
        self._bcrypt: concurrent.futures.ThreadPoolExecutor | None = None
        self._refused = Tally(
            log,
            "requests refused (401: no, unknown or wrong credentials)",
            clock,
            REFUSALS_LOG_EVERY_S,
        )
        self._peers_refused = Tally(
            log, "TLS clients refused (certificate not allowed)", clock, REFUSALS_LOG_EVERY_S
        )
        self._web_errors = Tally(
            log, "the web config cannot be used: refusing", clock, REFUSALS_LOG_EVERY_S
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
        self.web = None if path is None else Watched(path)

    @property
    def tls(self) -> bool:
        """Is it served over TLS (as the web config was first read)?"""
        return self.web is not None and self.web.tls

    def current_web(self) -> tuple[WebConfig, ssl.SSLContext | None] | None:
        """The web config as of now (None: there is none); ConfigError while it is bad (logged
        at most once a minute: connections and requests are refused meanwhile)."""
        if self.web is None:
            return None
        try:
            return self.web.current()
        except ConfigError as e:
            self._web_errors.add("; ".join(e.problems)[:500])
            raise

    def peer_allowed(self, tls: Tls, transport: asyncio.Transport) -> bool:
        """Does the client certificate of a TLS connection pass client_allowed_sans (a refusal
        is counted and logged at most once a minute)?"""
        if webtls.allowed_peer(tls, transport.get_extra_info("peercert")):
            return True
        self._peers_refused.add(f"the last from {address(transport.get_extra_info('peername'))}")
        return False

    def admit(self, head: bytes, transport: asyncio.Transport | None) -> Admission:
        """What the web config as of now says of the request `head` on `transport`."""
        try:
            web = self.current_web()
        except ConfigError:
            return Admission(refusal=WEB_CONFIG_UNUSABLE)
        if web is None:
            return ADMITTED
        config = web[0]
        headers = tuple(f"{name}: {value}" for name, value in config.headers)
        if not self.rate.allow(config):
            return Admission(headers, TOO_MANY_REQUESTS)
        if not config.users:
            return Admission(headers)
        authorization = header(head.partition(b"\r\n")[2], b"authorization", False)
        given = webauth.credentials(authorization)
        if given is None:
            return Admission(headers, self.unauthorized(transport))
        verdict = self.auth.cached(config.users, *given)
        if verdict is None:  # bcrypt, in the gate's own worker thread
            checking = self.check_password(config.users, *given)
            if checking is None:
                return Admission(headers, TOO_MANY_CHECKS)
            return Admission(headers, checking=checking)
        return Admission(headers, None if verdict else self.unauthorized(transport))

    def check_password(
        self, users: Mapping[str, bytes], user: str, password: bytes
    ) -> asyncio.Future[bool] | None:
        """A bcrypt check in the gate's own thread (on the running loop); None when
        `max_checks` are waiting or under way already."""
        if self._checking >= self.max_checks:
            return None
        loop = asyncio.get_running_loop()
        if self._bcrypt is None:
            self._bcrypt = concurrent.futures.ThreadPoolExecutor(1, "smllm-bcrypt")
        self._checking += 1
        checking = loop.run_in_executor(self._bcrypt, self.auth.check, users, user, password)
        checking.add_done_callback(self._checked)
        return checking

    def _checked(self, _: asyncio.Future[bool]) -> None:
        self._checking -= 1

    @property
    def password_checks(self) -> int:
        """Password checks waiting or under way now."""
        return self._checking

    def unauthorized(self, transport: asyncio.Transport | None) -> Answer:
        """A 401: counted, logged at most once a minute (with the last client's address)."""
        peer = None if transport is None else transport.get_extra_info("peername")
        self._refused.add(f"the last from {address(peer)}")
        return UNAUTHORIZED

    def close(self) -> None:
        """No more password checks (those waiting are cancelled)."""
        if self._bcrypt is not None:
            self._bcrypt.shutdown(wait=False, cancel_futures=True)


def address(peer: object) -> str:
    """A client's address as logs give it: `127.0.0.1:41234`."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return "an unknown address"
