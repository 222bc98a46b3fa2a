"""Web config tests' shared parts: a password and its hash, a PKI, web config files written."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config.errors import ConfigError
from exporter.web import auth as webauth
from exporter.web import tls as webtls

from support.certs import Pair
from support.tools import yaml_text

PASSWORD = b"s3cret password"


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


def tls_config(server: Pair, *more: str) -> str:
    """A web config serving TLS with `server`'s certificate and key, and `more` lines of
    tls_server_config."""
    return yaml_text(
        "tls_server_config:", f"  cert_file: {server.cert}", f"  key_file: {server.key}", *more
    )
