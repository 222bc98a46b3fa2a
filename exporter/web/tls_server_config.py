"""tls_server_config, the web config's TLS section: its keys checked into a frozen Tls.

Its names are Go's (crypto/tls, as exporter-toolkit takes them): TLS versions, cipher suites,
curves and client auth types, each mapped to what Python's ssl (OpenSSL) calls it. What Python's
ssl cannot do is refused, naming the key, instead of done otherwise:
`client_auth_type: RequireAnyClientCert` (a client certificate of any issuer, unverified: Python
verifies every certificate it asks for) and more than one `curve_preferences` (it sets one
curve). `RequestClientCert` is served as `NoClientCert` (an unverified certificate grants
nothing in either), and TLS 1.3 cipher suites are accepted and not configurable, as in Go.
Its files are not read here: tls.py reads them into the server's SSLContext.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.config.checker import Checker
from exporter.config.redact import show
from exporter.config.values import as_bool

TLS_KEYS = {
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
}
VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
MIN_VERSION, MAX_VERSION = ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3  # (exporter-toolkit's)
# Go's tls.CipherSuites() by name: OpenSSL's name for it ("" for TLS 1.3's, which neither Go
# nor Python's ssl configures: accepted, and always on)
CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_AES_128_GCM_SHA256": "",
    "TLS_AES_256_GCM_SHA384": "",
    "TLS_CHACHA20_POLY1305_SHA256": "",
}
CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1"}
CURVES["X25519"] = "X25519"
CLIENT_AUTH = {
    "": ssl.CERT_NONE,
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_NONE,  # (see the module docstring)
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
UNVERIFIED = ("RequireAnyClientCert", "RequireClientCert")  # refused: see the docstring


@dataclass(frozen=True)
class Tls:
    """tls_server_config, checked; paths absolute (relative ones resolve against the web
    config's directory)."""

    cert_file: Path | None = None
    key_file: Path | None = None
    cert: str = ""
    key: str = field(default="", repr=False)
    client_ca_file: Path | None = None
    client_ca: str = ""
    client_auth_type: str = "NoClientCert"
    client_allowed_sans: tuple[str, ...] | None = None
    min_version: ssl.TLSVersion = MIN_VERSION
    max_version: ssl.TLSVersion = MAX_VERSION
    ciphers: tuple[str, ...] = ()  # OpenSSL's names
    prefer_server_cipher_suites: bool = True
    curve: str | None = None  # OpenSSL's name


TLS_WHERE = "tls_server_config"  # the key every tls_server_config problem is named under
_VERSIONS_WHAT = f"must be one of {', '.join(VERSIONS)}"


def check(checker: Checker, d: dict[str, Any], base: Path) -> Tls | None:
    """tls_server_config (`d`) checked, key by key, every problem told to `checker`; relative
    paths resolve against `base` (None: the section is absent or empty)."""
    if not d:
        return None
    cert_file = _tls_path(checker, d, "cert_file", base)
    key_file = _tls_path(checker, d, "key_file", base)
    ca_file = _tls_path(checker, d, "client_ca_file", base)
    cert = _pem(checker, d, "cert")
    key = _pem(checker, d, "key", secret=True)
    ca = _pem(checker, d, "client_ca")
    _files_or_inline(
        checker, (("cert", cert_file, cert), ("key", key_file, key), ("client_ca", ca_file, ca))
    )
    auth = _client_auth(checker, d)
    if (ca_file is not None or ca) and auth in ("", "NoClientCert"):
        checker.problem(
            f"{TLS_WHERE}.client_ca_file" if ca_file is not None else f"{TLS_WHERE}.client_ca",
            "client CA's have been configured without a Client Auth Policy (client_auth_type)",
        )
    allowed = _allowed_sans(checker, d, CLIENT_AUTH.get(auth, ssl.CERT_NONE) != ssl.CERT_NONE)
    low = checker.get(d, "min_version", TLS_WHERE, _version, MIN_VERSION, _VERSIONS_WHAT)
    high = checker.get(d, "max_version", TLS_WHERE, _version, MAX_VERSION, _VERSIONS_WHAT)
    if low > high:
        checker.problem(f"{TLS_WHERE}.min_version", "is above max_version")
    ciphers = _ciphers(checker, d)
    curve = _curve(checker, d)
    prefer = checker.get(
        d, "prefer_server_cipher_suites", TLS_WHERE, as_bool, True, "must be true or false"
    )
    return Tls(
        cert_file, key_file, cert, key, ca_file, ca, auth, allowed, low, high, ciphers, prefer,
        curve,
    )  # fmt: skip


def _tls_path(checker: Checker, d: dict[str, Any], key: str, base: Path) -> Path | None:
    """A `*_file` key: a path (relative to `base`), never PEM text (which is not shown: it may
    be a private key)."""
    value = d.get(key)
    if isinstance(value, str) and ("\n" in value or "-----BEGIN" in value):
        inline = key.removesuffix("_file")
        checker.problem(
            f"{TLS_WHERE}.{key}", f"looks like PEM text, not a path: give it as {inline}"
        )
        return None
    value = checker.get(d, key, TLS_WHERE, _text, None, "must be a path")
    return None if value is None else base / value


def _pem(checker: Checker, d: dict[str, Any], key: str, secret: bool = False) -> str:
    """An inline PEM key ("" when absent); a `secret` one is never shown, even when wrong."""
    value = d.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        checker.problem(
            f"{TLS_WHERE}.{key}", "must be PEM text" + ("" if secret else f", got {show(value)}")
        )
        return ""
    return value


def _files_or_inline(checker: Checker, given: tuple[tuple[str, Path | None, str], ...]) -> None:
    """Each of cert, key and client_ca given as a file or inline, not both; cert and key given."""
    for inline_key, path, text in given:
        if path is not None and text:
            checker.problem(
                f"{TLS_WHERE}.{inline_key}", f"give {inline_key}_file or {inline_key}, not both"
            )
    for inline_key, path, text in given[:2]:
        if path is None and not text:
            checker.problem(TLS_WHERE, f"missing one of {inline_key} or {inline_key}_file")


def _client_auth(checker: Checker, d: dict[str, Any]) -> str:
    """client_auth_type, one Python's ssl can honour (NoClientCert when unset or not a name)."""
    auth = d.get("client_auth_type") or "NoClientCert"
    if not isinstance(auth, str):
        checker.problem(f"{TLS_WHERE}.client_auth_type", f"must be a name, got {show(auth)}")
        return "NoClientCert"
    if auth in UNVERIFIED:
        checker.problem(
            f"{TLS_WHERE}.client_auth_type",
            f"{auth} (a client certificate of any issuer, unverified) cannot be honoured: "
            "Python's ssl verifies every client certificate it asks for; use "
            "RequireAndVerifyClientCert with client_ca_file",
        )
    elif auth not in CLIENT_AUTH:
        choices = ", ".join(k for k in CLIENT_AUTH if k)
        checker.problem(
            f"{TLS_WHERE}.client_auth_type", f"must be one of {choices}, got {show(auth)}"
        )
    return auth


def _allowed_sans(checker: Checker, d: dict[str, Any], verifying: bool) -> tuple[str, ...] | None:
    """client_allowed_sans (None: not set), which needs verified client certificates."""
    where = f"{TLS_WHERE}.client_allowed_sans"
    sans = d.get("client_allowed_sans")
    if sans is None:
        return None
    if not isinstance(sans, list) or not all(isinstance(s, str) for s in sans):
        checker.problem(where, f"must be a list of names, got {show(sans)}")
        return None
    if not verifying:
        checker.problem(
            where,
            "needs a verified client certificate: client_auth_type "
            "RequireAndVerifyClientCert (or VerifyClientCertIfGiven)",
        )
    return tuple(sans)


def _ciphers(checker: Checker, d: dict[str, Any]) -> tuple[str, ...]:
    """cipher_suites by Go's names, as OpenSSL names them (TLS 1.3's left out: always on)."""
    ciphers: list[str] = []
    for i, name in enumerate(_list(checker, d, "cipher_suites", TLS_WHERE)):
        openssl = CIPHERS.get(name) if isinstance(name, str) else None
        if openssl is None:
            checker.problem(
                f"{TLS_WHERE}.cipher_suites[{i}]",
                f"unknown cipher {show(name)} (Go's tls.CipherSuites() names, e.g. "
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)",
            )
        elif openssl and not _available(openssl):
            checker.problem(
                f"{TLS_WHERE}.cipher_suites[{i}]",
                f"{name} is not available in this OpenSSL ({ssl.OPENSSL_VERSION})",
            )
        elif openssl:
            ciphers.append(openssl)
    return tuple(ciphers)


def _available(openssl: str) -> bool:
    """Does this OpenSSL offer the cipher of that (OpenSSL) name?"""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(openssl)
    except ssl.SSLError:
        return False
    return True


def _curve(checker: Checker, d: dict[str, Any]) -> str | None:
    """curve_preferences: one curve (Python's ssl sets one), as OpenSSL names it."""
    curves = _list(checker, d, "curve_preferences", TLS_WHERE)
    for i, name in enumerate(curves):
        if not isinstance(name, str) or name not in CURVES:
            checker.problem(
                f"{TLS_WHERE}.curve_preferences[{i}]",
                f"unknown curve {show(name)} (one of {', '.join(CURVES)})",
            )
    if len(curves) > 1:
        checker.problem(
            f"{TLS_WHERE}.curve_preferences",
            "Python's ssl sets one curve, not a preference order: give one",
        )
        return None
    if curves and isinstance(curves[0], str):
        return CURVES.get(curves[0])
    return None


def _list(checker: Checker, d: dict[str, Any], key: str, where: str) -> list[Any]:
    value = d.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        checker.problem(f"{where}.{key}", f"must be a list, got {show(value)}")
        return []
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("")
    return value


def _version(value: Any) -> ssl.TLSVersion:
    if not isinstance(value, str) or value not in VERSIONS:
        raise ValueError("")
    return VERSIONS[value]
