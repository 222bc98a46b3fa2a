"""The exporter-toolkit web config (--web.config.file): its keys read and checked, with lines.

The file has the format and the meaning of prometheus/exporter-toolkit's
docs/web-configuration.md, so one file serves node_exporter and this exporter alike. Here it is
parsed into a frozen WebConfig (its files are not read: webtls.py reads them, builds the TLS
context and watches it all as it changes; webauth.py checks passwords).

What Python's ssl cannot do is refused, naming the key, instead of done otherwise:
`client_auth_type: RequireAnyClientCert` (a client certificate of any issuer, unverified: Python
verifies every certificate it asks for) and more than one `curve_preferences` (it sets one
curve). `RequestClientCert` is served as `NoClientCert` (an unverified certificate grants
nothing in either), `http2` is accepted and HTTP/1.1 served, and TLS 1.3 cipher suites are
accepted and not configurable, as in Go.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.config.config import Checker, ConfigError, as_bool, as_count, document, show

TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}
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
HTTP_KEYS = {"http2", "headers"}
RATE_KEYS = {"interval", "burst"}
# exporter-toolkit's extraHTTPHeaders: the headers that may be set, and their allowed values
HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
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
MAX_USERS = 10_000  # basic_auth_users at most (exporter-toolkit: "a few users")
_BCRYPT_HASH = re.compile(rb"\$2[abxy]?\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
_DURATION = re.compile(r"(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+|0")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\uffff]*")  # no CR, LF or other controls


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
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    ciphers: tuple[str, ...] = ()  # OpenSSL's names
    prefer_server_cipher_suites: bool = True
    curve: str | None = None  # OpenSSL's name


@dataclass(frozen=True)
class WebConfig:
    path: Path
    tls: Tls | None = None  # None: plain HTTP
    headers: tuple[tuple[str, str], ...] = ()
    users: Mapping[str, bytes] = field(default_factory=dict, repr=False)  # user -> bcrypt hash
    http2: bool = True
    rate_interval_s: float = 0.0  # 0: no rate limit
    rate_burst: int = 0

    def files(self) -> tuple[Path, ...]:
        """The file itself and the files it names: what `Watched` looks at."""
        tls = self.tls
        named = [] if tls is None else [tls.cert_file, tls.key_file, tls.client_ca_file]
        return (self.path, *(p for p in named if p is not None))


def parse(text: str, path: Path) -> WebConfig:
    """`text` as the web config at `path` (its files are not read: `context` reads them)."""
    data, checker = document(text, str(path))
    top = checker.mapping(data, "", TOP_KEYS)
    base = path.parent
    tls = _tls(
        checker, checker.mapping(top.get("tls_server_config"), "tls_server_config", TLS_KEYS), base
    )
    http = checker.mapping(top.get("http_server_config"), "http_server_config", HTTP_KEYS)
    http2 = checker.get(http, "http2", "http_server_config", as_bool, True, "must be true or false")
    headers = _headers(checker, http.get("headers"))
    users = _users(checker, top.get("basic_auth_users"))
    rate = checker.mapping(top.get("rate_limit"), "rate_limit", RATE_KEYS)
    interval = checker.get(
        rate, "interval", "rate_limit", _duration, 0.0, 'must be a duration like "1s" or "250ms"'
    )
    burst = checker.get(rate, "burst", "rate_limit", as_count, 0, "must be an integer 0 or more")
    if interval and not burst:
        checker.problem("rate_limit.burst", "must be at least 1 when an interval is set")
    if checker.problems:
        raise ConfigError(str(path), checker.problems)
    return WebConfig(path, tls, headers, users, http2, interval, burst)


def _tls(checker: Checker, d: dict[str, Any], base: Path) -> Tls | None:
    if not d:
        return None
    where = "tls_server_config"

    def path(key: str) -> Path | None:
        value = d.get(key)
        if isinstance(value, str) and ("\n" in value or "-----BEGIN" in value):
            inline = key.removesuffix("_file")
            checker.problem(
                f"{where}.{key}", f"looks like PEM text, not a path: give it as {inline}"
            )  # (and not shown: it may be a private key)
            return None
        value = checker.get(d, key, where, _text, None, "must be a path")
        return None if value is None else base / value

    def text(key: str, secret: bool = False) -> str:
        value = d.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            checker.problem(
                f"{where}.{key}", "must be PEM text" + ("" if secret else f", got {show(value)}")
            )
            return ""
        return value

    cert_file, key_file, ca_file = path("cert_file"), path("key_file"), path("client_ca_file")
    cert, key, ca = text("cert"), text("key", secret=True), text("client_ca")
    for file_key, inline_key, a, b in (
        ("cert_file", "cert", cert_file, cert),
        ("key_file", "key", key_file, key),
        ("client_ca_file", "client_ca", ca_file, ca),
    ):
        if a is not None and b:
            checker.problem(f"{where}.{inline_key}", f"give {file_key} or {inline_key}, not both")
    if cert_file is None and not cert:
        checker.problem(where, "missing one of cert or cert_file")
    if key_file is None and not key:
        checker.problem(where, "missing one of key or key_file")
    auth = d.get("client_auth_type") or "NoClientCert"
    if not isinstance(auth, str):
        checker.problem(f"{where}.client_auth_type", f"must be a name, got {show(auth)}")
        auth = "NoClientCert"
    if auth in UNVERIFIED:
        checker.problem(
            f"{where}.client_auth_type",
            f"{auth} (a client certificate of any issuer, unverified) cannot be honoured: "
            "Python's ssl verifies every client certificate it asks for; use "
            "RequireAndVerifyClientCert with client_ca_file",
        )
    elif auth not in CLIENT_AUTH:
        choices = ", ".join(k for k in CLIENT_AUTH if k)
        checker.problem(f"{where}.client_auth_type", f"must be one of {choices}, got {show(auth)}")
    verifying = CLIENT_AUTH.get(auth, ssl.CERT_NONE) != ssl.CERT_NONE
    if (ca_file is not None or ca) and auth in ("", "NoClientCert"):
        checker.problem(
            f"{where}.client_ca_file" if ca_file is not None else f"{where}.client_ca",
            "client CA's have been configured without a Client Auth Policy (client_auth_type)",
        )
    sans = d.get("client_allowed_sans")
    allowed: tuple[str, ...] | None = None
    if sans is not None:
        if not isinstance(sans, list) or not all(isinstance(s, str) for s in sans):
            checker.problem(
                f"{where}.client_allowed_sans", f"must be a list of names, got {show(sans)}"
            )
        else:
            allowed = tuple(sans)
            if not verifying:
                checker.problem(
                    f"{where}.client_allowed_sans",
                    "needs a verified client certificate: client_auth_type "
                    "RequireAndVerifyClientCert (or VerifyClientCertIfGiven)",
                )
    low = checker.get(d, "min_version", where, _version, ssl.TLSVersion.TLSv1_2, _VERSIONS_WHAT)
    high = checker.get(d, "max_version", where, _version, ssl.TLSVersion.TLSv1_3, _VERSIONS_WHAT)
    if low > high:
        checker.problem(f"{where}.min_version", "is above max_version")
    ciphers: list[str] = []
    for i, name in enumerate(_list(checker, d, "cipher_suites", where)):
        openssl = CIPHERS.get(name) if isinstance(name, str) else None
        if openssl is None:
            checker.problem(
                f"{where}.cipher_suites[{i}]",
                f"unknown cipher {show(name)} (Go's tls.CipherSuites() names, e.g. "
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)",
            )
        elif openssl:
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(openssl)
            except ssl.SSLError:
                checker.problem(
                    f"{where}.cipher_suites[{i}]",
                    f"{name} is not available in this OpenSSL ({ssl.OPENSSL_VERSION})",
                )
                continue
            ciphers.append(openssl)
    curves = _list(checker, d, "curve_preferences", where)
    curve = None
    for i, name in enumerate(curves):
        if not isinstance(name, str) or name not in CURVES:
            checker.problem(
                f"{where}.curve_preferences[{i}]",
                f"unknown curve {show(name)} (one of {', '.join(CURVES)})",
            )
    if len(curves) > 1:
        checker.problem(
            f"{where}.curve_preferences",
            "Python's ssl sets one curve, not a preference order: give one",
        )
    elif curves and isinstance(curves[0], str):
        curve = CURVES.get(curves[0])
    prefer = checker.get(
        d, "prefer_server_cipher_suites", where, as_bool, True, "must be true or false"
    )
    return Tls(
        cert_file, key_file, cert, key, ca_file, ca, str(auth), allowed, low, high,
        tuple(ciphers), prefer, curve,
    )  # fmt: skip


_VERSIONS_WHAT = f"must be one of {', '.join(VERSIONS)}"


def _list(checker: Checker, d: dict[str, Any], key: str, where: str) -> list[Any]:
    value = d.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        checker.problem(f"{where}.{key}", f"must be a list, got {show(value)}")
        return []
    return value


def _headers(checker: Checker, value: Any) -> tuple[tuple[str, str], ...]:
    where = "http_server_config.headers"
    if value is None:
        return ()
    if not isinstance(value, dict):
        checker.problem(where, f"must be a mapping, got {show(value)}")
        return ()
    out = []
    for name, v in value.items():
        if name not in HEADERS:
            checker.problem(
                f"{where}.{name}",
                f"HTTP header {show(name)} can not be configured (one of {', '.join(HEADERS)})",
            )
            continue
        if v is None or v == "":
            continue  # blank: unset
        if not isinstance(v, str) or not _HEADER_VALUE.fullmatch(v):
            checker.problem(f"{where}.{name}", f"must be a header value on one line, got {show(v)}")
            continue
        allowed = HEADERS[name]
        if allowed and v not in allowed:
            checker.problem(
                f"{where}.{name}", f"must be one of {', '.join(allowed)}, got {show(v)}"
            )
            continue
        out.append((name, v))
    return tuple(out)


def _users(checker: Checker, value: Any) -> dict[str, bytes]:
    where = "basic_auth_users"
    if value is None:
        return {}
    if not isinstance(value, dict):
        checker.problem(where, "must be a mapping of user names to bcrypt hashes")
        return {}
    users = {}
    if len(value) > MAX_USERS:
        checker.problem(
            where, f"{len(value)} users: at most {MAX_USERS:,} (use client certificates)"
        )
        return {}
    for user, hashed in value.items():
        if not isinstance(user, str) or not user or ":" in user:
            checker.problem(where, "a user name must be text without ':'", f"{where}.(a user)")
            continue
        raw = hashed.encode() if isinstance(hashed, str) else b""
        if not _BCRYPT_HASH.fullmatch(raw):
            checker.problem(
                f"{where}.{user}",
                'must be a bcrypt hash ($2y$10$..., e.g. from `htpasswd -nBC 10 "" | tr -d '
                "':\\n'`); the value is not shown",
            )
            continue
        users[user] = raw
    return users


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("")
    return value


def _version(value: Any) -> ssl.TLSVersion:
    if not isinstance(value, str) or value not in VERSIONS:
        raise ValueError("")
    return VERSIONS[value]


def _duration(value: Any) -> float:
    """A Go duration ("1s", "1m30s", "250ms", "0") in seconds."""
    if not isinstance(value, str) or not _DURATION.fullmatch(value):
        raise ValueError("")
    return sum(float(n) * _UNIT_S[u] for n, u in _DURATION_PART.findall(value))


def warnings(web: WebConfig) -> list[str]:
    """What is allowed but weakens it, for check-config and the start-up log."""
    costs = sorted({int(h.split(b"$")[2]) for h in web.users.values()})
    out = []
    if len(costs) > 1:
        out.append(
            f"{web.path}: basic_auth_users: hashes of different costs "
            f"({', '.join(map(str, costs))}): a user with a cheaper hash is answered faster "
            "than an unknown one (which costs "
            f"as much as the costliest, {costs[-1]}), so a timing tells that user exists; "
            "hash them all at one cost"
        )
    if web.tls is None and web.users:
        out.append(
            f"{web.path}: basic auth without tls_server_config: passwords cross the network "
            "in clear"
        )
    return out


def describe(web: WebConfig) -> str:
    """One line for logs and check-config: what it turns on (never a secret)."""
    parts = []
    tls = web.tls
    if tls is None:
        parts.append("plain HTTP")
    else:
        parts.append(f"TLS {tls.min_version.name}..{tls.max_version.name}")
        parts.append(f"client certificates: {tls.client_auth_type}")
        if tls.client_allowed_sans is not None:
            parts.append(f"{len(tls.client_allowed_sans)} allowed SAN(s)")
    parts.append(f"basic auth: {len(web.users)} user(s)" if web.users else "no basic auth")
    if web.headers:
        parts.append("headers: " + ", ".join(name for name, _ in web.headers))
    if web.rate_interval_s:
        parts.append(f"rate limit: {web.rate_burst} per {web.rate_interval_s:g} s")
    return "; ".join(parts)
