"""The exporter-toolkit web config: each key checked (and refused with its line), and served by
the real server over real TLS: client certificates, basic auth, headers, rate limit, and the
file re-read per connection (a rotated certificate, a changed password, no restart).

Certificates are made per test (tests/support/certs.py); clients are Python's ssl and
http.client, and a raw socket for plain HTTP sent to the TLS port."""

from __future__ import annotations

import base64
import contextlib
import gzip
import http.client
import logging
import os
import socket
import ssl
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from exporter import preflight, webauth, webconfig, webtls
from exporter.collector import Published, Renderer
from exporter.config import ConfigError
from exporter.http import MAX_PASSWORD_CHECKS, PLAIN_TO_TLS, WRITE_CHUNK

from conftest import Cli
from support.certs import Authority, Pair
from support.exposition import snapshot
from support.served import Served, client_context
from support.tools import REPO, wait_for, yaml_text

PASSWORD = b"s3cret password"
# what a client sees of a refused handshake (asyncio sends no TLS alert: see the README)
REFUSED = (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)
HASH = webauth.hash_password(PASSWORD, 4)  # (cost 4: quick; the timing test uses 10)


def write(directory: Path, text: str, name: str = "web.yml") -> Path:
    path = directory / name
    temp = directory / f".{name}.tmp"
    temp.write_text(text)
    temp.replace(path)  # (atomically, as an operator's tool would)
    return path


def problems(text: str, tmp_path: Path) -> list[str]:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        webtls.load(path)
    return e.value.problems


# -- the keys ----------------------------------------------------------------------------------


def test_an_empty_web_config_is_plain_http(tmp_path: Path) -> None:
    web = webtls.load(write(tmp_path, ""))
    assert web.tls is None and not web.users and web.headers == ()
    assert webtls.context(web) is None


def test_unknown_keys_are_refused_with_their_lines(tmp_path: Path) -> None:
    found = problems(
        yaml_text(
            "tls_server_config:",
            "  cert_fil: a.crt",
            "basic_auth_user:",
            "  alice: x",
        ),
        tmp_path,
    )
    assert any(":2: tls_server_config.cert_fil: unknown key" in p for p in found), found
    assert any("did you mean 'cert_file'" in p for p in found), found
    assert any(":3: basic_auth_user: unknown key" in p for p in found), found


def test_every_problem_at_once_each_with_key_and_line(tmp_path: Path) -> None:
    found = problems(
        yaml_text(
            "tls_server_config:",
            "  cert_file: server.crt",
            "  client_auth_type: RequireAnyClientCert",
            "  min_version: TLS14",
            "  cipher_suites: [TLS_FAKE_WITH_NOTHING]",
            "  curve_preferences: [CurveP256, X25519]",
            "http_server_config:",
            "  headers:",
            "    X-Frame-Options: allow",
            "    X-Powered-By: me",
            "basic_auth_users:",
            "  alice: not-a-hash",
            "rate_limit:",
            "  interval: soon",
        ),
        tmp_path,
    )
    expected = [
        (":1: tls_server_config: missing one of key or key_file", None),
        (":3: tls_server_config.client_auth_type:", "Python's ssl verifies every client"),
        (":4: tls_server_config.min_version: must be one of TLS10", None),
        (":5: tls_server_config.cipher_suites[0]: unknown cipher", None),
        (":6: tls_server_config.curve_preferences: Python's ssl sets one curve", None),
        (":9: http_server_config.headers.X-Frame-Options: must be one of deny, sameorigin", None),
        (":10: http_server_config.headers.X-Powered-By: HTTP header", "can not be configured"),
        (":12: basic_auth_users.alice: must be a bcrypt hash", None),
        (":14: rate_limit.interval: must be a duration", None),
    ]
    for where, also in expected:
        hit = [p for p in found if where in p and (also is None or also in p)]
        assert hit, f"{where} not in {found}"
    assert len(found) == len(expected), found
    assert "not-a-hash" not in "\n".join(found)  # a password pasted by mistake is not shown


def test_relative_paths_resolve_against_the_web_configs_directory(tmp_path: Path) -> None:
    ca = Authority(tmp_path / "pki")
    server = ca.server()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.chdir(elsewhere)  # (not the web config's directory: relative to it, not to the cwd)
    web = webtls.load(
        write(
            tmp_path,
            yaml_text(
                "tls_server_config:",
                "  cert_file: pki/server.crt",
                "  key_file: pki/server.key",
                "  client_ca_file: pki/test-ca.pem",
                "  client_auth_type: RequireAndVerifyClientCert",
            ),
        )
    )
    assert web.tls is not None
    assert web.tls.cert_file == server.cert and web.tls.client_ca_file == ca.path
    assert set(web.files()) == {tmp_path / "web.yml", server.cert, server.key, ca.path}


def test_files_that_cannot_be_used_are_named(tmp_path: Path) -> None:
    ca = Authority(tmp_path)
    server, other = ca.server(), ca.server("other")
    found = problems(
        yaml_text(
            "tls_server_config:",
            f"  cert_file: {server.cert}",
            f"  key_file: {other.key}",  # the wrong key
            "  client_ca_file: missing-ca.pem",
            "  client_auth_type: VerifyClientCertIfGiven",
        ),
        tmp_path,
    )
    assert any("cert_file/key_file: not a matching PEM certificate and key" in p for p in found)
    assert any("client_ca_file: cannot read" in p and "missing-ca.pem" in p for p in found)


def test_a_client_ca_without_a_client_auth_policy_is_refused(tmp_path: Path) -> None:
    ca = Authority(tmp_path)
    server = ca.server()
    found = problems(
        tls_config(
            server,
            f"  client_ca_file: {ca.path}",
        ),
        tmp_path,
    )
    assert any("without a Client Auth Policy" in p for p in found), found


def test_allowed_sans_need_a_verified_certificate(tmp_path: Path) -> None:
    ca = Authority(tmp_path)
    server = ca.server()
    found = problems(
        tls_config(
            server,
            "  client_allowed_sans: [scraper.example]",
        ),
        tmp_path,
    )
    assert any(":4: tls_server_config.client_allowed_sans: needs a verified" in p for p in found)


def test_inline_cert_key_and_client_ca(tmp_path: Path) -> None:
    ca = Authority(tmp_path)
    server = ca.server()

    def block(path: Path) -> list[str]:
        return ["    " + line for line in path.read_text().splitlines()]

    web = webtls.load(
        write(
            tmp_path,
            "\n".join(
                [
                    "tls_server_config:",
                    "  cert: |",
                    *block(server.cert),
                    "  key: |",
                    *block(server.key),
                    "  client_ca: |",
                    *block(ca.path),
                    "  client_auth_type: RequireAndVerifyClientCert",
                ]
            )
            + "\n",
        )
    )
    assert web.tls is not None and web.tls.cert_file is None
    assert "PRIVATE KEY" not in repr(web)  # (the key is never shown)
    assert webtls.context(web) is not None


@pytest.mark.parametrize(
    ("key", "value", "check"),
    [
        ("min_version", "TLS13", lambda c: c.minimum_version == ssl.TLSVersion.TLSv1_3),
        ("max_version", "TLS12", lambda c: c.maximum_version == ssl.TLSVersion.TLSv1_2),
        (
            "cipher_suites",
            "[TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]",
            lambda c: (
                {x["name"] for x in c.get_ciphers() if x["protocol"] == "TLSv1.2"}
                == {"ECDHE-ECDSA-AES128-GCM-SHA256"}
            ),
        ),
        (
            "prefer_server_cipher_suites",
            "false",
            lambda c: not c.options & ssl.OP_CIPHER_SERVER_PREFERENCE,
        ),
        (
            "client_auth_type",
            "VerifyClientCertIfGiven",
            lambda c: c.verify_mode == ssl.CERT_OPTIONAL,
        ),
        (
            "client_auth_type",
            "RequireAndVerifyClientCert",
            lambda c: c.verify_mode == ssl.CERT_REQUIRED,
        ),
        ("client_auth_type", "RequestClientCert", lambda c: c.verify_mode == ssl.CERT_NONE),
        ("curve_preferences", "[CurveP384]", lambda c: True),  # (served: see the TLS tests)
    ],
)
def test_each_tls_key_reaches_the_ssl_context(
    tmp_path: Path, key: str, value: str, check: object
) -> None:
    ca = Authority(tmp_path)
    server = ca.server()
    ca_line = [f"  client_ca_file: {ca.path}"] if key == "client_auth_type" else []
    web = webtls.load(
        write(
            tmp_path,
            tls_config(
                server,
                *ca_line,
                f"  {key}: {value}",
            ),
        )
    )
    ctx = webtls.context(web)
    assert ctx is not None
    assert callable(check) and check(ctx)
    if key == "prefer_server_cipher_suites":
        default = webtls.context(
            webconfig.parse(
                tls_config(
                    server,
                ),
                tmp_path / "x.yml",
            )
        )
        assert default is not None and default.options & ssl.OP_CIPHER_SERVER_PREFERENCE


def test_credentials_are_read_as_go_reads_them() -> None:
    def basic(raw: bytes) -> bytes:
        return b"Basic " + base64.b64encode(raw)

    assert webauth.credentials(basic(b"alice:pa:ss")) == ("alice", b"pa:ss")
    assert webauth.credentials(b"basic " + base64.b64encode(b"a:")) == ("a", b"")
    for bad in (b"", b"Bearer x", b"Basic !!!", basic(b"no colon"), b"Basic"):
        assert webauth.credentials(bad) is None


def test_an_unknown_user_is_checked_against_the_costliest_hash() -> None:
    cheap, dear = (
        webauth.hash_password(b"a", 4).encode(),
        webauth.hash_password(b"b", 6).encode(),
    )
    users = {"alice": cheap, "bob": dear}
    seen: list[tuple[bytes, bytes]] = []

    def checkpw(password: bytes, hashed: bytes) -> bool:
        seen.append((password, hashed))
        return password == b"a" and hashed == cheap

    auth = webauth.Auth(checkpw)
    assert auth.check(users, "alice", b"a")
    assert not auth.check(users, "mallory", b"a")
    assert seen[-1][1] == dear  # the same work as bob's: no user enumeration by timing
    assert not auth.check(users, "alice", b"a" * 73)  # over bcrypt's 72: refused, no exception
    assert seen[-1] == (b"a" * 72, cheap)  # (and as much work as any other check)
    assert auth.cached(users, "alice", b"a") is True
    assert auth.cached(users, "mallory", b"a") is False
    assert auth.cached(users, "alice", b"other") is None
    for i in range(webauth.AUTH_CACHE + 10):  # bounded
        auth.check(users, "alice", str(i).encode())
    assert (
        sum(
            1
            for i in range(webauth.AUTH_CACHE + 10)
            if auth.cached(users, "alice", str(i).encode()) is not None
        )
        == webauth.AUTH_CACHE
    )


def test_an_unknown_user_costs_as_long_as_a_known_one() -> None:
    users = {"alice": webauth.hash_password(PASSWORD, 10).encode()}

    def median_s(user: str) -> float:
        times = []
        for i in range(5):
            began = time.perf_counter()
            assert not webauth.Auth().check(users, user, f"wrong {i}".encode())
            times.append(time.perf_counter() - began)
        return statistics.median(times)

    known, unknown = median_s("alice"), median_s("nobody")
    assert 0.5 < unknown / known < 2.0, (known, unknown)


# -- served ------------------------------------------------------------------------------------


@pytest.fixture
def pki(tmp_path: Path) -> Iterator[tuple[Authority, Pair]]:
    ca = Authority(tmp_path / "pki")
    yield ca, ca.server()


def tls_config(server: Pair, *more: str) -> str:
    """A web config serving TLS with `server`'s certificate and key, and `more` lines of
    tls_server_config."""
    return yaml_text(
        "tls_server_config:", f"  cert_file: {server.cert}", f"  key_file: {server.key}", *more
    )


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
        s.pages.metrics = Published(Renderer("1.2.3"), snapshot(requests=3000), 0)
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
        s.server.head_seconds = 0.5
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
        with caplog.at_level(logging.WARNING, "exporter.http"):
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
    with Served(web) as s, caplog.at_level(logging.WARNING, "exporter.http"):
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
        s.server.auth = webauth.Auth(checkpw)
        s.pages.metrics = Published(Renderer("1.2.3"), snapshot(requests=50), 0)
        assert s.get(auth=("alice", PASSWORD))[0] == 200  # (its verdict cached)
        flood = MAX_PASSWORD_CHECKS + 5
        statuses: list[int] = []

        def wrong(i: int) -> None:
            statuses.append(s.get(auth=("alice", f"wrong {i}".encode()))[0])

        threads = [threading.Thread(target=wrong, args=(i,)) for i in range(flood)]
        for t in threads:
            t.start()
        wait_for(lambda: statuses.count(429) == 5, 10, "the checks past the cap refused")
        assert s.server.password_checks == MAX_PASSWORD_CHECKS
        status, _, body = s.get("/metrics", auth=("alice", PASSWORD))  # rendered meanwhile
        assert status == 200 and b"smllm_node_busy_seconds_total" in body
        release.set()
        for t in threads:
            t.join(30)
        assert sorted(statuses) == [401] * MAX_PASSWORD_CHECKS + [429] * 5
        assert s.server.password_checks == 0


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
    with Served(path) as s, caplog.at_level(logging.WARNING, "exporter.http"):
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


# -- the commands ------------------------------------------------------------------------------


def a_config(tmp_path: Path, *more: str) -> Path:
    dump = tmp_path / "n1.log"
    dump.write_text("")
    path = tmp_path / f"config{len(list(tmp_path.glob('config*.yaml')))}.yaml"
    path.write_text(
        yaml_text(
            f"state_dir: {tmp_path / 'state'}",
            "nodes:",
            f"  - {{name: n1, source: file, path: {dump}}}",
            *more,
        )
    )
    return path


def test_check_config_lists_every_problem_of_the_web_config(tmp_path: Path, cli: Cli) -> None:
    web = write(
        tmp_path,
        yaml_text(
            "tls_server_config:",
            "  cert_file: nowhere.crt",
            "  key_file: nowhere.key",
            "basic_auth_users:",
            "  alice: plain-text-password",
        ),
    )
    config = a_config(tmp_path, f"web_config_file: {web}")
    code, out, err = cli("check-config", str(config))
    assert code == 1, (out, err)
    assert f"{web}:5: basic_auth_users.alice: must be a bcrypt hash" in err
    assert "plain-text-password" not in err
    code, out, err = cli("check-config", str(a_config(tmp_path)), "--web.config.file", str(web))
    assert code == 1 and "basic_auth_users.alice" in err
    web.write_text(yaml_text("tls_server_config:", "  cert_file: nowhere.crt", "  key_file: k"))
    code, out, err = cli("check-config", str(config))
    assert code == 1
    assert "tls_server_config.cert_file: cannot read" in err and "nowhere.crt" in err
    web.write_text(yaml_text("basic_auth_users:", f"  alice: {HASH}"))
    code, out, err = cli("check-config", str(config))
    assert code == 0, err
    assert f"{web}: valid web config: plain HTTP; basic auth: 1 user(s)" in out


def test_run_refuses_a_bad_web_config_at_start(tmp_path: Path, cli: Cli) -> None:
    web = write(tmp_path, yaml_text("tls_server_config:", "  cert_file: a.crt"))
    code, _, err = cli("run", "--config", str(a_config(tmp_path)), "--web.config.file", str(web))
    assert code == 1
    assert "missing one of key or key_file" in err and "Traceback" not in err


def test_the_example_web_config_is_valid(tmp_path: Path) -> None:
    example = REPO / "deploy" / "web-config.example.yml"
    text = example.read_text()
    web = webconfig.parse(text, tmp_path / "web-config.yml")
    assert web.tls is not None and web.tls.client_auth_type == "RequireAndVerifyClientCert"
    uncommented = text.replace("# basic_auth_users:", "basic_auth_users:").replace(
        "#   prometheus:", "  prometheus:"
    )
    assert set(webconfig.parse(uncommented, tmp_path / "w.yml").users) == {"prometheus"}


def test_check_config_as_the_service_reads_credentials_from_their_sources(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unit hands /etc/sm-llm-exporter/tls/ over as tls_ credentials: a web config there
    names its files by their credential names; check-config reads them from the sources."""
    sources = tmp_path / "etc-tls"  # (standing in for /etc/sm-llm-exporter/tls)
    ca = Authority(sources)
    server = ca.server("exporter")
    monkeypatch.setattr(preflight, "CREDENTIAL_DIRECTORIES", (("tls_", sources),))
    write(
        sources,
        yaml_text(
            "tls_server_config:",
            f"  cert_file: tls_{server.cert.name}",
            f"  key_file: tls_{server.key.name}",
            "  client_ca_file: tls_test-ca.pem",
            "  client_auth_type: RequireAndVerifyClientCert",
        ),
        "web-config.yml",
    )
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    config = a_config(tmp_path, "web_config_file: ${CREDENTIALS_DIRECTORY}/tls_web-config.yml")
    code, out, err = cli("check-config", str(config))
    assert code == 0, err
    assert f"{preflight.SERVICE_CREDENTIALS}/tls_web-config.yml: valid web config" in out
    (sources / server.key.name).unlink()
    code, _, err = cli("check-config", str(config))
    assert code == 1
    assert f"key_file: cannot read {sources / server.key.name}" in err


# -- what a review found (each a test) ---------------------------------------------------------


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


def test_a_flood_of_wrong_passwords_evicts_no_good_verdict() -> None:
    users = {"alice": HASH.encode()}
    calls: list[bytes] = []

    def checkpw(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return password == PASSWORD

    auth = webauth.Auth(checkpw)
    assert auth.check(users, "alice", PASSWORD)
    for i in range(3 * webauth.AUTH_CACHE):
        assert not auth.check(users, "alice", f"wrong {i}".encode())
    assert auth.cached(users, "alice", PASSWORD) is True  # no bcrypt for the scraper
    changed = {"alice": webauth.hash_password(b"new", 4).encode()}
    assert auth.cached(changed, "alice", PASSWORD) is None  # (a new hash: checked again)


def test_an_empty_client_ca_file_is_refused_not_the_system_store(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    _, server = pki
    empty = tmp_path / "empty-ca.pem"
    empty.write_text("")
    found = problems(
        tls_config(
            server, f"  client_ca_file: {empty}", "  client_auth_type: RequireAndVerifyClientCert"
        ),
        tmp_path,
    )
    assert any("client_ca_file: no PEM CA certificate in it" in p for p in found), found


def test_a_key_pasted_under_key_file_is_refused_and_not_shown(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    _, server = pki
    pem = server.key.read_text()
    text = yaml_text("tls_server_config:", f"  cert_file: {server.cert}", "  key_file: |")
    found = problems(text + "".join(f"    {line}\n" for line in pem.splitlines()), tmp_path)
    assert any("key_file: looks like PEM text, not a path: give it as key" in p for p in found)
    body = pem.splitlines()[1]
    assert all(body not in p for p in found)


def test_allowed_ip_sans_are_compared_as_addresses(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    _, server = pki
    web = webconfig.parse(
        tls_config(
            server,
            f"  client_ca_file: {server.cert}",
            "  client_auth_type: RequireAndVerifyClientCert",
            "  client_allowed_sans: ['2001:db8::1']",
        ),
        tmp_path / "w.yml",
    )
    assert web.tls is not None
    python_says = {"subjectAltName": (("IP Address", "2001:DB8:0:0:0:0:0:1\n"),)}
    assert webtls.allowed_peer(web.tls, python_says)
    other = {"subjectAltName": (("IP Address", "2001:DB8:0:0:0:0:0:2\n"),)}
    assert not webtls.allowed_peer(web.tls, other)


def test_check_config_warns_of_hashes_of_different_costs(tmp_path: Path, cli: Cli) -> None:
    dear = webauth.hash_password(b"x", 5)
    web = write(tmp_path, yaml_text("basic_auth_users:", f"  alice: {HASH}", f"  bob: {dear}"))
    code, _, err = cli("check-config", str(a_config(tmp_path)), "--web.config.file", str(web))
    assert code == 0
    assert "hashes of different costs (4, 5)" in err
    assert "basic auth without tls_server_config: passwords cross the network in clear" in err
