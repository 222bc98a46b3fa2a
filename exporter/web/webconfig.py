"""The exporter-toolkit web config (--web.config.file): its keys read and checked, with lines.

The file has the format and the meaning of prometheus/exporter-toolkit's
docs/web-configuration.md, so one file serves node_exporter and this exporter alike. Here it is
parsed into a frozen WebConfig: its TLS section by tls_server_config.py, its files not read
(tls.py reads them into the TLS context, watched.py reads it all again as it changes; auth.py
checks passwords). `http2` is accepted and HTTP/1.1 served.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.config.checker import Checker
from exporter.config.document import document
from exporter.config.errors import ConfigError
from exporter.config.redact import show
from exporter.config.values import as_bool, as_count
from exporter.web import tls_server_config
from exporter.web.tls_server_config import TLS_KEYS, TLS_WHERE, Tls

TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}
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
MAX_USERS = 10_000  # basic_auth_users at most (exporter-toolkit: "a few users")
_BCRYPT_HASH = re.compile(rb"\$2[abxy]?\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
_DURATION = re.compile(r"(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+|0")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
# no CR, LF or other controls: \t, \x20-\x7e and \x80-\uffff only (said as what it refuses: the
# ranges allowed take 2.5 ms to compile, at every start)
_HEADER_VALUE = re.compile(r"[^\x00-\x08\x0a-\x1f\x7f\U00010000-\U0010ffff]*")


@dataclass(frozen=True)
class WebConfig:
    """A web config, checked (its files not read)."""

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
    tls_section = checker.mapping(top.get(TLS_WHERE), TLS_WHERE, TLS_KEYS)
    tls = tls_server_config.check(checker, tls_section, base)
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
