"""exporter.web.webconfig: the exporter-toolkit web config, each key checked (and refused with its
line, a secret never shown), and as check-config and `run` report it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.commands import preflight
from exporter.config.redact import show
from exporter.web import auth as webauth
from exporter.web import tls as webtls
from exporter.web import webconfig

from support.certs import Authority, Pair
from support.cli import Cli
from support.tools import REPO, yaml_text
from support.webconfigs import HASH, problems, tls_config, write


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


def test_check_config_warns_of_hashes_of_different_costs(tmp_path: Path, cli: Cli) -> None:
    dear = webauth.hash_password(b"x", 5)
    web = write(tmp_path, yaml_text("basic_auth_users:", f"  alice: {HASH}", f"  bob: {dear}"))
    code, _, err = cli("check-config", str(a_config(tmp_path)), "--web.config.file", str(web))
    assert code == 0
    assert "hashes of different costs (4, 5)" in err
    assert "basic auth without tls_server_config: passwords cross the network in clear" in err


@pytest.mark.parametrize(
    ("char", "allowed"),
    [
        ("\t", True),
        (" ", True),
        ("~", True),
        ("\x80", True),
        ("é", True),
        ("\ud7ff", True),
        ("\uffff", True),
        ("\x00", False),
        ("\x08", False),
        ("\n", False),
        ("\r", False),
        ("\x1f", False),
        ("\x7f", False),
        ("\U00010000", False),
        ("\U0010ffff", False),
    ],
)
def test_a_header_value_holds_no_control_and_nothing_past_the_basic_plane(
    tmp_path: Path, char: str, allowed: bool
) -> None:
    escaped = char.encode("unicode_escape").decode("ascii")  # (as YAML's double quotes escape)
    text = yaml_text(
        "http_server_config:", f'  headers: {{Content-Security-Policy: "a{escaped}b"}}'
    )
    path = write(tmp_path, text)
    if allowed:
        web = webconfig.parse(path.read_text(), path)
        assert web.headers == (("Content-Security-Policy", f"a{char}b"),)
    else:
        assert problems(text, tmp_path) == [
            f"{path}:2: http_server_config.headers.Content-Security-Policy: "
            f"must be a header value on one line, got {show(f'a{char}b')}"
        ]
