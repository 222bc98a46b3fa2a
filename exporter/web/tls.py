"""The web config's files read into the server's TLS context, and its client names checked.

`load` reads and checks a web config and the files it names (what `run` and check-config do at
start); `context` builds the server's SSLContext; `allowed_peer` applies client_allowed_sans.
Every read opens without blocking and refuses what is no regular file (a FIFO, a device).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import ssl
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from exporter.config.document import read_text
from exporter.config.errors import ConfigError
from exporter.config.files import read_small_file
from exporter.config.redact import printable
from exporter.web.tls_server_config import CLIENT_AUTH, Tls
from exporter.web.webconfig import WebConfig, parse

_T = TypeVar("_T")
log = logging.getLogger(__name__)


def load(path: Path, where: Callable[[Path], Path] = lambda p: p) -> WebConfig:
    """Read and check the web config at `path`, and the files it names (the certificate and key
    load, the CA reads); ConfigError lists every problem, each with its key and line. `where`:
    the file to read for each path (check-config reads a service credential's source)."""
    web = parse(read_text(where(path)), path)
    if web.tls is not None:
        tls = web.tls
        files = (tls.cert_file, tls.key_file, tls.client_ca_file)
        cert, key, ca = (None if p is None else where(p) for p in files)
        tls = dataclasses.replace(tls, cert_file=cert, key_file=key, client_ca_file=ca)
        web = dataclasses.replace(web, tls=tls)
    context(web)
    return web


def context(web: WebConfig) -> ssl.SSLContext | None:
    """The server's SSLContext for `web` (None for plain HTTP), its files read now;
    ConfigError naming the key whose file cannot be used."""
    tls = web.tls
    if tls is None:
        return None
    where = f"{printable(str(web.path))}: tls_server_config"
    ctx = _settings(tls)
    problems = _load_pair(ctx, tls, where)
    ctx.verify_mode = CLIENT_AUTH[tls.client_auth_type]
    if ctx.verify_mode != ssl.CERT_NONE:
        problems += _load_client_ca(ctx, tls, where)
    if problems:
        raise ConfigError(str(web.path), problems)
    return ctx


def _settings(tls: Tls) -> ssl.SSLContext:
    """A server context with the versions, ciphers and curve of `tls` (no file read yet)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version, ctx.maximum_version = tls.min_version, tls.max_version
    ctx.set_alpn_protocols(["http/1.1"])
    if tls.ciphers:
        ctx.set_ciphers(":".join(tls.ciphers))
    if tls.prefer_server_cipher_suites:  # (Python's server default)
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.curve is not None:
        ctx.set_ecdh_curve(tls.curve)
    return ctx


def _load_pair(ctx: ssl.SSLContext, tls: Tls, where: str) -> list[str]:
    """The certificate and key loaded into `ctx`; the problems that stopped it."""
    problems: list[str] = []
    pems = {}
    for name, path, inline in (("cert", tls.cert_file, tls.cert), ("key", tls.key_file, tls.key)):
        try:
            pems[name] = _pem(path, inline)
        except OSError as e:
            shown = printable(str(path))
            problems.append(f"{where}.{name}_file: cannot read {shown}: {e.strerror or e}")
    if len(pems) == 2:
        try:
            _load_chain(ctx, pems["cert"], pems["key"])
        except (ssl.SSLError, ValueError) as e:
            problems.append(
                f"{where}.cert_file/key_file: not a matching PEM certificate and key ({_why(e)})"
            )
    return problems


def _load_client_ca(ctx: ssl.SSLContext, tls: Tls, where: str) -> list[str]:
    """The CA that verifies client certificates loaded into `ctx` (the system's when none is
    named, as Go's nil ClientCAs); the problems that stopped it."""
    try:
        ca = _pem(tls.client_ca_file, tls.client_ca)
    except OSError as e:
        shown = printable(str(tls.client_ca_file))
        return [f"{where}.client_ca_file: cannot read {shown}: {e.strerror or e}"]
    named = tls.client_ca_file is not None or bool(tls.client_ca)
    key = "client_ca_file" if tls.client_ca_file is not None else "client_ca"
    try:
        if named and b"-----BEGIN CERTIFICATE-----" not in ca:
            # (Go makes an empty pool of it, which verifies no one; never the system's)
            return [f"{where}.{key}: no PEM CA certificate in it"]
        if named:
            ctx.load_verify_locations(cadata=ca.decode("ascii", "replace"))
        else:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except (ssl.SSLError, ValueError) as e:
        return [f"{where}.{key}: no usable PEM CA certificate in it ({_why(e)})"]
    return []


def _pem(path: Path | None, inline: str) -> bytes:
    return read_small_file(path) if path is not None else inline.encode()


def _load_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """load_cert_chain from memory: through memfd files (the key never on a disk)."""
    fds = [
        os.memfd_create("smllm-cert", os.MFD_CLOEXEC),
        os.memfd_create("smllm-key", os.MFD_CLOEXEC),
    ]
    try:
        for fd, data in zip(fds, (cert, key), strict=True):
            os.write(fd, data)
        ctx.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}", password=b"")
    finally:
        for fd in fds:
            os.close(fd)


def _why(e: Exception) -> str:
    return getattr(e, "reason", None) or str(e) or type(e).__name__


def allowed_peer(tls: Tls, peercert: Mapping[str, Any] | None) -> bool:
    """Does a connection's verified client certificate pass client_allowed_sans (one of its
    DNS, IP, e-mail or URI names is listed)? True when the list is not set."""
    if tls.client_allowed_sans is None:
        return True
    if not peercert:
        return False
    names = {
        _ip_or(v) if kind == "IP Address" else v
        for kind, v in peercert.get("subjectAltName", ())
        if kind in _SAN_KINDS
    }
    return any(_ip_or(name) in names for name in tls.client_allowed_sans)


def _ip_or(name: str) -> str:
    """An IP address in Go's form (2001:db8::1, as ip.String() gives it; Python's peercert
    says 2001:DB8:0:0:0:0:0:1), any other name as it is."""
    try:
        return str(ipaddress.ip_address(name.strip()))
    except ValueError:
        return name


_SAN_KINDS = {"DNS", "IP Address", "email", "URI"}
