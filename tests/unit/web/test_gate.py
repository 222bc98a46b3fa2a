"""exporter.web.gate: what the web config as of now says of each request (no socket): the header
lines it adds, the rate limit's 429, basic auth's 401 and its bcrypt checks (at most
`max_checks` at once), a bad web config's 500, and client_allowed_sans."""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from exporter.web import auth as webauth
from exporter.web.gate import (
    TOO_MANY_CHECKS,
    TOO_MANY_REQUESTS,
    UNAUTHORIZED,
    WEB_CONFIG_UNUSABLE,
    Admission,
    Gate,
)

from support.certs import Authority, Pair
from support.tools import yaml_text
from support.webconfigs import HASH, PASSWORD, tls_config, write


def head(user: str = "", password: bytes = b"") -> bytes:
    lines = [b"GET /metrics HTTP/1.1", b"Host: x"]
    if user:
        token = base64.b64encode(user.encode() + b":" + password)
        lines.append(b"Authorization: Basic " + token)
    return b"\r\n".join(lines)


class Peer:
    """A transport as far as the gate looks at it."""

    def __init__(self, peercert: Mapping[str, Any] | None = None) -> None:
        self.peercert = peercert

    def get_extra_info(self, name: str, default: object = None) -> object:
        if name == "peercert":
            return self.peercert
        return ("192.0.2.7", 40000) if name == "peername" else default


def transport(peer: Peer | None = None) -> asyncio.Transport:
    return cast(asyncio.Transport, cast(Any, peer or Peer()))


def test_without_a_web_config_everything_is_admitted() -> None:
    gate = Gate()
    assert gate.admit(head(), None) == Admission()
    assert gate.web_config is None and not gate.tls


def test_headers_and_the_rate_limit(tmp_path: Path) -> None:
    now = [0.0]
    web = write(
        tmp_path,
        yaml_text(
            "http_server_config:",
            "  headers: {X-Frame-Options: deny}",
            "rate_limit: {interval: 1s, burst: 2}",
        ),
    )
    gate = Gate(web, lambda: now[0])
    admitted = Admission(("X-Frame-Options: deny",))
    assert [gate.admit(head(), None) for _ in range(3)] == [
        admitted,
        admitted,
        Admission(("X-Frame-Options: deny",), TOO_MANY_REQUESTS),
    ]
    now[0] += 1
    assert gate.admit(head(), None) == admitted


def test_basic_auth(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    gate = Gate(write(tmp_path, yaml_text("basic_auth_users:", f"  alice: {HASH}")))
    assert gate.auth.check({"alice": HASH.encode()}, "alice", PASSWORD)  # (its verdict cached)
    with caplog.at_level(logging.WARNING, "exporter.web.gate"):
        assert gate.admit(head("alice", PASSWORD), transport()) == Admission()
        assert gate.admit(head(), transport()) == Admission(refusal=UNAUTHORIZED)

        async def wrong() -> bool:
            checking = gate.admit(head("alice", b"wrong"), transport()).checking
            assert checking is not None  # (not seen before: bcrypt, in the gate's thread)
            return await checking

        try:
            assert asyncio.run(wrong()) is False
        finally:
            gate.close()
    refused = [r.getMessage() for r in caplog.records]
    assert len(refused) == 1 and "the last from 192.0.2.7:40000" in refused[0], refused


def test_password_checks_past_max_checks_are_refused_at_once(tmp_path: Path) -> None:
    gate = Gate(write(tmp_path, yaml_text("basic_auth_users:", f"  alice: {HASH}")))
    release = threading.Event()

    def checkpw(password: bytes, hashed: bytes) -> bool:
        release.wait(30)
        return password == PASSWORD

    gate.auth = webauth.Auth(checkpw)
    gate.max_checks = 2

    async def flood() -> list[Admission]:
        got = [gate.admit(head("alice", f"wrong {i}".encode()), None) for i in range(3)]
        assert gate.password_checks == 2
        release.set()
        await asyncio.gather(*(a.checking for a in got if a.checking is not None))
        return got

    try:
        admissions = asyncio.run(flood())
    finally:
        release.set()
        gate.close()
    assert [a.refusal for a in admissions] == [None, None, TOO_MANY_CHECKS]
    assert gate.password_checks == 0


def test_a_web_config_that_turns_bad_refuses_every_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, yaml_text("http_server_config:", "  headers: {X-Frame-Options: deny}"))
    gate = Gate(path)
    assert gate.admit(head(), None).refusal is None
    write(tmp_path, yaml_text("http_server_config:", "  headers: [oops"))
    with caplog.at_level(logging.WARNING, "exporter.web.gate"):
        assert gate.admit(head(), None) == Admission(refusal=WEB_CONFIG_UNUSABLE)
        assert gate.admit(head(), None) == Admission(refusal=WEB_CONFIG_UNUSABLE)
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and "the web config cannot be used" in logged[0], logged


def test_client_allowed_sans(tmp_path: Path, pki: tuple[Authority, Pair]) -> None:
    ca, server = pki
    web = write(
        tmp_path,
        tls_config(
            server,
            f"  client_ca_file: {ca.path}",
            "  client_auth_type: RequireAndVerifyClientCert",
            "  client_allowed_sans: [scraper.example]",
        ),
    )
    gate = Gate(web)
    current = gate.current_web()
    assert gate.tls and current is not None and current[0].tls is not None
    tls = current[0].tls
    assert gate.peer_allowed(
        tls, transport(Peer({"subjectAltName": (("DNS", "scraper.example"),)}))
    )
    assert not gate.peer_allowed(tls, transport(Peer({"subjectAltName": (("DNS", "other"),)})))
    assert not gate.peer_allowed(tls, transport(Peer(None)))
