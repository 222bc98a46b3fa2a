"""The exporter-toolkit web config: each key checked (and refused with its line), and served by
the real server over real TLS: client certificates, basic auth, headers, rate limit, and the
file re-read per connection (a rotated certificate, a changed password, no restart).

Certificates are made per test (tests/support/certs.py); clients are Python's ssl and
http.client, and a raw socket for plain HTTP sent to the TLS port."""

from __future__ import annotations

import base64
import os
import ssl
import statistics
import time
from pathlib import Path

import pytest

from exporter.commands import preflight
from exporter.web import auth as webauth
from exporter.web import tls as webtls
from exporter.web import webconfig

from support.certs import Authority, Pair
from support.cli import Cli
from support.tools import REPO, yaml_text
from support.webconfigs import HASH, PASSWORD, problems, tls_config, write


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
