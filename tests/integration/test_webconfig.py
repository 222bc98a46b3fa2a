"""The exporter-toolkit web config: each key checked (and refused with its line), and served by
the real server over real TLS: client certificates, basic auth, headers, rate limit, and the
file re-read per connection (a rotated certificate, a changed password, no restart).

Certificates are made per test (tests/support/certs.py); clients are Python's ssl and
http.client, and a raw socket for plain HTTP sent to the TLS port."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import logging
import os
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest
from cryptography import x509

from exporter.exposition.published import Published
from exporter.exposition.render import Renderer
from exporter.web import auth as webauth
from exporter.web import tls as webtls
from exporter.web.connection import WRITE_CHUNK
from exporter.web.gate import MAX_PASSWORD_CHECKS
from exporter.web.server import PLAIN_TO_TLS

from support.certs import Authority, Pair
from support.exposition import snapshot
from support.served import Served, client_context
from support.tools import wait_for, yaml_text
from support.webconfigs import HASH, PASSWORD, problems, tls_config, write

# what a client sees of a refused handshake (asyncio sends no TLS alert)
REFUSED = (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)


def test_tls_serves_with_the_configured_certificate(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    ca, server = pki
    with Served(write(tmp_path, tls_config(server))) as s:
        status, _headers, body = s.get(ctx=client_context(ca))
        assert (status, body) == (200, b"OK\n")


def test_a_large_metrics_body_comes_whole_over_tls_and_keep_alive(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    ca, server = pki
    with Served(write(tmp_path, tls_config(server))) as s:
        s.site.metrics = Published(Renderer("1.2.3"), snapshot(requests=3000), 0)
        conn = http.client.HTTPSConnection(
            "127.0.0.1", s.port, context=client_context(ca), timeout=10
        )
        bodies = []
        for encoding in ("identity", "gzip", "identity"):  # one connection, kept alive
            conn.request("GET", "/metrics", headers={"Accept-Encoding": encoding})
            r = conn.getresponse()
            assert r.status == 200
            body = r.read()
            bodies.append(gzip.decompress(body) if encoding == "gzip" else body)
        conn.close()
        assert len(bodies[0]) > WRITE_CHUNK  # (more than one write: paused and resumed)
        assert bodies[0] == bodies[1] == bodies[2]
        assert bodies[0].endswith(b"\n") and b"smllm_node_busy_seconds_total" in bodies[0]


def test_a_tls_handshake_that_never_comes_is_cut(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    _, server = pki
    with Served(write(tmp_path, tls_config(server))) as s:
        s.server.deadlines.head_seconds = 0.5
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
            sock.sendall(b"\x16\x03\x01\x00\x30")  # a ClientHello's record header, no more
            began = time.monotonic()
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(100) == b""  # closed by the server
            assert time.monotonic() - began < 5
        wait_for(lambda: s.server.connections == 0, 5, "the connection to be gone")


def test_http2_is_accepted_and_http_1_1_served(tmp_path: Path, pki: tuple[Authority, Pair]) -> None:
    ca, server = pki
    for http2 in ("true", "false"):
        web = tls_config(server) + yaml_text("http_server_config:", f"  http2: {http2}")
        assert webtls.load(write(tmp_path, web)).http2 is (http2 == "true")
    bad = problems(
        tls_config(server) + yaml_text("http_server_config:", "  http2: maybe"), tmp_path
    )
    assert any("http_server_config.http2: must be true or false" in p for p in bad), bad
    with Served(write(tmp_path, tls_config(server))) as s:
        ctx = client_context(ca)
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        with (
            socket.create_connection(("127.0.0.1", s.port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            assert tls.selected_alpn_protocol() == "http/1.1"


def test_plain_http_to_the_tls_port_gets_go_s_400(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    _, server = pki
    with Served(write(tmp_path, tls_config(server))) as s:
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while chunk := sock.recv(4096):
                got += chunk
        assert got == PLAIN_TO_TLS
        assert got.startswith(b"HTTP/1.0 400 Bad Request\r\n")


def test_require_and_verify_refuses_a_client_without_a_certificate(
    tmp_path: Path, pki: tuple[Authority, Pair], caplog: pytest.LogCaptureFixture
) -> None:
    ca, server = pki
    other = Authority(tmp_path / "other", "other-ca")
    web = tls_config(
        server, f"  client_ca_file: {ca.path}", "  client_auth_type: RequireAndVerifyClientCert"
    )
    with Served(write(tmp_path, web)) as s:
        assert s.get(ctx=client_context(ca, ca.client("scraper")))[0] == 200
        with caplog.at_level(logging.WARNING, "exporter.web.server"):
            for ctx in (client_context(ca), client_context(ca, other.client("stranger"))):
                with pytest.raises(REFUSED):
                    s.get(ctx=ctx)
            wait_for(lambda: "TLS handshakes failed" in caplog.text, 5, "the refusal logged")
    failed = [r.getMessage() for r in caplog.records if "TLS handshakes failed" in r.getMessage()]
    assert len(failed) == 1 and "PEER_DID_NOT_RETURN_A_CERTIFICATE" in failed[0], failed


def test_verify_if_given_admits_no_certificate_but_not_a_stranger(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    ca, server = pki
    other = Authority(tmp_path / "other", "other-ca")
    web = tls_config(
        server, f"  client_ca_file: {ca.path}", "  client_auth_type: VerifyClientCertIfGiven"
    )
    with Served(write(tmp_path, web)) as s:
        assert s.get(ctx=client_context(ca))[0] == 200
        assert s.get(ctx=client_context(ca, ca.client("scraper")))[0] == 200
        with pytest.raises(REFUSED):
            s.get(ctx=client_context(ca, other.client("stranger")))


def test_client_allowed_sans(tmp_path: Path, pki: tuple[Authority, Pair]) -> None:
    ca, server = pki
    web = tls_config(
        server,
        f"  client_ca_file: {ca.path}",
        "  client_auth_type: RequireAndVerifyClientCert",
        "  client_allowed_sans: [prometheus.example]",
    )
    with Served(write(tmp_path, web)) as s:
        allowed = ca.client("prom", "prometheus.example")
        assert s.get(ctx=client_context(ca, allowed))[0] == 200
        with pytest.raises(REFUSED):
            s.get(ctx=client_context(ca, ca.client("intruder", "intruder.example")))


def test_min_version_and_cipher_suites_are_enforced(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    ca, server = pki
    web = tls_config(
        server,
        "  max_version: TLS12",
        "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256]",
        "  curve_preferences: [CurveP384]",
    )
    with Served(write(tmp_path, web)) as s:
        ctx = client_context(ca)
        with (
            socket.create_connection(("127.0.0.1", s.port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            assert tls.version() == "TLSv1.2"
            cipher = tls.cipher()
            assert cipher is not None and cipher[0] == "ECDHE-ECDSA-CHACHA20-POLY1305"
        only_13 = client_context(ca)
        only_13.minimum_version = ssl.TLSVersion.TLSv1_3
        with pytest.raises((ssl.SSLError, ConnectionError)):
            s.get(ctx=only_13)


def test_basic_auth(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    web = write(tmp_path, yaml_text("basic_auth_users:", f"  alice: {HASH}"))
    with Served(web) as s, caplog.at_level(logging.WARNING, "exporter.web.gate"):
        assert s.get(auth=("alice", PASSWORD))[0] == 200
        assert s.get("/-/ready", auth=("alice", PASSWORD))[0] == 200
        for path, auth in [
            ("/-/healthy", None),
            ("/-/ready", None),
            ("/metrics", ("alice", b"b0gus-pw")),
            ("/", ("mallory", PASSWORD)),
            ("/-/healthy", ("alice", PASSWORD + b"x" * (73 - len(PASSWORD)))),
        ]:
            status, headers, body = s.get(path, auth=auth)
            assert (status, headers.get("WWW-Authenticate"), body) == (
                401,
                "Basic",
                b"Unauthorized\n",
            ), (path, auth)
    refusals = [r for r in caplog.records if "requests refused (401" in r.getMessage()]
    assert len(refusals) == 1, [r.getMessage() for r in refusals]  # (at most once a minute)
    assert "b0gus-pw" not in caplog.text and "mallory" not in caplog.text


def test_a_flood_of_wrong_passwords_holds_neither_connections_nor_worker_threads(
    tmp_path: Path,
) -> None:
    """bcrypt runs in the server's own thread, at most MAX_PASSWORD_CHECKS waiting: past them
    a 429 at once, and /metrics is rendered (in the default worker threads) meanwhile."""
    release = threading.Event()

    def checkpw(password: bytes, hashed: bytes) -> bool:
        if password == PASSWORD:
            return True
        release.wait(30)  # (a check that takes as long as the test wants)
        return False

    web = write(tmp_path, yaml_text("basic_auth_users:", f"  alice: {HASH}"))
    with Served(web) as s:
        s.server.gate.auth = webauth.Auth(checkpw)
        s.site.metrics = Published(Renderer("1.2.3"), snapshot(requests=50), 0)
        assert s.get(auth=("alice", PASSWORD))[0] == 200  # (its verdict cached)
        flood = MAX_PASSWORD_CHECKS + 5
        statuses: list[int] = []

        def wrong(i: int) -> None:
            statuses.append(s.get(auth=("alice", f"wrong {i}".encode()))[0])

        threads = [threading.Thread(target=wrong, args=(i,)) for i in range(flood)]
        for t in threads:
            t.start()
        wait_for(lambda: statuses.count(429) == 5, 10, "the checks past the cap refused")
        assert s.server.gate.password_checks == MAX_PASSWORD_CHECKS
        status, _, body = s.get("/metrics", auth=("alice", PASSWORD))  # rendered meanwhile
        assert status == 200 and b"smllm_node_busy_seconds_total" in body
        release.set()
        for t in threads:
            t.join(30)
        assert sorted(statuses) == [401] * MAX_PASSWORD_CHECKS + [429] * 5
        assert s.server.gate.password_checks == 0


def test_headers_are_added_to_every_answer(tmp_path: Path) -> None:
    web = write(
        tmp_path,
        yaml_text(
            "http_server_config:",
            "  headers:",
            "    X-Frame-Options: deny",
            "    X-Content-Type-Options: nosniff",
            "    Content-Security-Policy: default-src 'none'",
            "    Strict-Transport-Security: ''",  # blank: not set
            "basic_auth_users:",
            f"  alice: {HASH}",
        ),
    )
    with Served(web) as s:
        for auth in (("alice", PASSWORD), None):
            _, headers, _ = s.get("/nowhere", auth=auth)
            assert headers["X-Frame-Options"] == "deny"
            assert headers["X-Content-Type-Options"] == "nosniff"
            assert headers["Content-Security-Policy"] == "default-src 'none'"
            assert "Strict-Transport-Security" not in headers


def test_rate_limit(tmp_path: Path) -> None:
    web = write(tmp_path, yaml_text("rate_limit:", "  interval: 1h", "  burst: 3"))
    with Served(web) as s:
        assert [s.get()[0] for _ in range(5)] == [200, 200, 200, 429, 429]


def test_a_changed_password_and_a_rotated_certificate_need_no_restart(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    ca, server = pki
    new_password = b"rotated"

    def web(hashed: str) -> str:
        return tls_config(server) + yaml_text("basic_auth_users:", f"  alice: {hashed}")

    path = write(tmp_path, web(HASH))
    ctx = client_context(ca)
    with Served(path) as s:
        assert s.get(ctx=ctx, auth=("alice", PASSWORD))[0] == 200
        first = peer_serial(s.port, ctx)
        assert first == server.serial()
        write(tmp_path, web(webauth.hash_password(new_password, 4)))
        assert s.get(ctx=ctx, auth=("alice", PASSWORD))[0] == 401
        assert s.get(ctx=ctx, auth=("alice", new_password))[0] == 200
        rotated = ca.server("rotated")  # then moved over the old files, as certbot does
        for name in ("cert", "key"):
            temp = getattr(rotated, name)
            os.replace(temp, getattr(server, name))
        wait_for(lambda: peer_serial(s.port, ctx) != first, 10, "the rotated certificate")
        assert peer_serial(s.port, ctx) == server.serial() != first
        assert s.get(ctx=ctx, auth=("alice", new_password))[0] == 200


def test_a_web_config_gone_bad_refuses_until_it_is_good_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, yaml_text("basic_auth_users:", f"  alice: {HASH}"))
    with Served(path) as s, caplog.at_level(logging.WARNING, "exporter.web.gate"):
        assert s.get(auth=("alice", PASSWORD))[0] == 200
        write(tmp_path, yaml_text("basic_auth_users:", "  alice: [oops"))
        assert s.get(auth=("alice", PASSWORD))[0] == 500  # never served unprotected
        write(tmp_path, yaml_text("basic_auth_users:", f"  alice: {HASH}"))
        assert s.get(auth=("alice", PASSWORD))[0] == 200
    assert "the web config cannot be used" in caplog.text


def peer_serial(port: int, ctx: ssl.SSLContext) -> int:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_a_named_file_fixed_in_place_is_read_again(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    ca, server = pki
    key = server.key.read_bytes()
    with Served(write(tmp_path, tls_config(server))) as s:
        ctx = client_context(ca)
        assert s.get(ctx=ctx)[0] == 200
        server.key.write_bytes(b"")  # (a rotation writing in place, caught half-way)
        with pytest.raises(REFUSED):
            s.get(ctx=ctx)
        server.key.write_bytes(key)  # fixed, the web config itself untouched
        assert s.get(ctx=ctx)[0] == 200


def test_a_web_config_caught_half_written_never_opens_the_door(tmp_path: Path) -> None:
    users = yaml_text("basic_auth_users:", f"  alice: {HASH}")
    path = write(tmp_path, users)
    with Served(path) as s:
        assert s.get()[0] == 401
        path.write_text("")  # truncated by an editor, not yet written
        assert s.get()[0] == 500  # refused: basic auth cannot go off under connections
        path.write_text(users)
        assert s.get()[0] == 401 and s.get(auth=("alice", PASSWORD))[0] == 200
        path.write_text("")
        s.server.web_config = path  # a reload takes what it protects anew
        assert s.get()[0] == 200


def test_tls_cannot_be_turned_off_under_running_connections(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    ca, server = pki
    path = write(tmp_path, tls_config(server) + yaml_text("basic_auth_users:", f"  a: {HASH}"))
    with Served(path) as s:
        assert s.get(ctx=client_context(ca), auth=("a", PASSWORD))[0] == 200
        write(tmp_path, yaml_text("basic_auth_users:", f"  a: {HASH}"))  # TLS gone
        with pytest.raises(REFUSED):
            s.get(ctx=client_context(ca), auth=("a", PASSWORD))
        with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
            s.get(auth=("a", PASSWORD))  # and no password crosses in clear


def test_stalled_tls_handshakes_do_not_lock_a_scraper_out(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    ca, server = pki
    with Served(write(tmp_path, tls_config(server))) as s:
        s.server.max_connections = 4
        stalled = []
        for _ in range(4):  # a ClientHello's record begun, then nothing: a handshake stalled
            sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            sock.sendall(b"\x16\x03\x01\x02\x00" + b"\x01\x00\x01\xfc\x03\x03")
            stalled.append(sock)
        wait_for(lambda: s.server.connections == 4, 5, "the stalled handshakes in")
        try:
            assert s.get(ctx=client_context(ca))[0] == 200  # one of them cut for it
        finally:
            for sock in stalled:
                sock.close()
