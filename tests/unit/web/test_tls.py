"""exporter.web.tls: the web config's files read into an SSLContext (each key reaching it, each
file that cannot be used named), and client_allowed_sans applied to a peer's certificate."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from exporter.web import tls as webtls
from exporter.web import webconfig

from support.certs import Authority, Pair
from support.tools import yaml_text
from support.webconfigs import problems, tls_config, write


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
