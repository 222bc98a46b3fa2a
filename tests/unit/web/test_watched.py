"""exporter.web.watched: the web config in force, read again only when a file changed, a bad
version refused until a good one comes, and what it protects (TLS, basic auth) never dropped
under running connections. (Reads that hang: tests/hostile/test_webconfig_files.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config.errors import ConfigError
from exporter.web.watched import Watched

from support.certs import Authority, Pair
from support.tools import yaml_text
from support.webconfigs import HASH, tls_config, write

DENY = yaml_text("http_server_config:", "  headers: {X-Frame-Options: deny}")
NOSNIFF = yaml_text("http_server_config:", "  headers: {X-Content-Type-Options: nosniff}")


def test_it_is_read_again_only_when_it_changed(tmp_path: Path) -> None:
    watched = Watched(write(tmp_path, DENY))
    first = watched.current()
    assert first[0].headers == (("X-Frame-Options", "deny"),) and first[1] is None
    assert watched.current() is first and watched.loads == 1
    write(tmp_path, NOSNIFF)
    assert watched.current()[0].headers == (("X-Content-Type-Options", "nosniff"),)
    assert watched.loads == 2 and not watched.tls


def test_a_bad_version_is_refused_until_a_good_one_comes(tmp_path: Path) -> None:
    watched = Watched(write(tmp_path, DENY))
    watched.current()
    write(tmp_path, yaml_text("http_server_config:", "  headers: [oops"))
    with pytest.raises(ConfigError):
        watched.current()
    with pytest.raises(ConfigError):
        watched.current()  # (not read again: refused as it is)
    write(tmp_path, NOSNIFF)
    assert watched.current()[0].headers == (("X-Content-Type-Options", "nosniff"),)


def test_basic_auth_is_never_turned_off_under_it(tmp_path: Path) -> None:
    watched = Watched(write(tmp_path, yaml_text("basic_auth_users:", f"  alice: {HASH}")))
    assert set(watched.current()[0].users) == {"alice"}
    write(tmp_path, "")  # (caught half-written: empty)
    with pytest.raises(ConfigError, match="would turn basic auth off"):
        watched.current()
    write(tmp_path, yaml_text("basic_auth_users:", f"  bob: {HASH}"))
    assert set(watched.current()[0].users) == {"bob"}


def test_tls_is_neither_turned_on_nor_off_under_it(
    tmp_path: Path, pki: tuple[Authority, Pair]
) -> None:
    _, server = pki
    plain = Watched(write(tmp_path, DENY, "plain.yml"))
    plain.current()
    write(tmp_path, tls_config(server), "plain.yml")
    with pytest.raises(ConfigError, match="would turn TLS on"):
        plain.current()
    served = Watched(write(tmp_path, tls_config(server), "tls.yml"))
    assert served.current()[1] is not None and served.tls
    write(tmp_path, DENY, "tls.yml")
    with pytest.raises(ConfigError, match="would turn TLS off"):
        served.current()
