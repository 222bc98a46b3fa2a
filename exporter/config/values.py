"""The config's value checks: each takes a YAML value and returns it as kept, or raises ValueError.

A `Checker.get` takes any of them as the kind of a key's value; the message of a ValueError, if
any, is shown after what the value must be.
"""

from __future__ import annotations

import ipaddress
import math
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exporter.base.times import SECOND, since_us
from exporter.parse.tokens import MAX_SLOTS

MAX_ALLOWANCE_S = 7 * 86_400
MAX_START_TIMEOUT_S = 7 * 86_400
MAX_POLL_S = 3600
MIN_POLL_S = 0.1
MAX_PORT = 65535

# systemd.unit(5): ASCII letters, digits, ":", "-", "_", ".", "\" and one "@"; at most 255 bytes
_UNIT = re.compile(
    r"[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]*)?\.(service|socket|target|scope|"
    r"timer|slice|mount|path|swap|device|automount)"
)
_MAX_UNIT = 255
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")
_KIND_NAME = re.compile(r"[a-z][a-z0-9_]*")
_RESERVED_KINDS = frozenset({"idle", "unknown"})  # the mix's names for no kind and a kind unknown
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_MAX_HOST = 253
_ZONE = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # an IPv6 zone: an interface
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def listen_address(value: Any) -> tuple[str, int]:
    """`HOST:PORT` or `:PORT` (IPv6 bracketed) -> (host, port), as `listen:` reads it;
    ValueError when it is not one."""
    if not isinstance(value, str) or ":" not in value:
        raise ValueError("")
    host, _, port = value.rpartition(":")
    if ":" in host:  # an IPv6 address must be bracketed: "[::1]:10027"
        if not (host.startswith("[") and host.endswith("]")):
            raise ValueError("")
        host = host[1:-1]
    if not (port.isascii() and port.isdigit()) or int(port) > MAX_PORT:
        raise ValueError("")
    if host:  # ("" is every interface)
        as_host(host)
    return host, int(port)


def as_host(value: Any) -> str:
    """A host name (RFC 1123 labels) or an IP address (IPv6 with or without brackets): nothing
    a shell or ssh would read as more (`h; touch /x`, `-oProxyCommand=...`, `${VAR}`)."""
    if not isinstance(value, str) or not value:
        raise ValueError("")
    bare = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    address, _, zone = bare.partition("%")
    if zone and not _ZONE.fullmatch(zone):
        raise ValueError("")
    try:
        ipaddress.ip_address(bare)
        return bare
    except ValueError:
        if zone:
            raise
    if address.replace(".", "").isdigit():  # (`10.1` would be read as an IPv4 address)
        raise ValueError("")
    name = value.removesuffix(".")
    if len(name) > _MAX_HOST or not all(_HOST_LABEL.fullmatch(part) for part in name.split(".")):
        raise ValueError("")
    return value


def as_user(value: Any) -> str:
    """A POSIX user name (portable characters; not starting with `-`, where ssh would read an
    option)."""
    if not isinstance(value, str) or not _USER.fullmatch(value):  # (`user: 0700` reads as 448)
        raise ValueError("")
    return value


def as_remote_path(value: Any) -> str:
    """A path on the node, passed to its journalctl quoted (a `$` in it is a `$`: nothing
    expands it): absolute, and nothing unprintable."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError("")
    if not value.isprintable():
        raise ValueError("")
    return value


def as_unit(value: Any) -> str:
    """A systemd unit name; a name without a suffix is a `.service`."""
    if not isinstance(value, str):
        raise ValueError("")
    unit = value if "." in value else value + ".service"
    if len(unit) > _MAX_UNIT or not _UNIT.fullmatch(unit):
        raise ValueError("")
    return unit


def as_positive_int(value: Any) -> int:
    """An integer above 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError("")
    return value


def as_count(value: Any) -> int:
    """An integer 0 or more (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("")
    return value


def as_positive_float(value: Any) -> float:
    """A number above 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError("")
    return float(value)


def as_bool(value: Any) -> bool:
    """true or false."""
    if not isinstance(value, bool):
        raise ValueError("")
    return value


def _at_most(limit: int, value: Any) -> int:
    if as_positive_int(value) > limit:
        raise ValueError("")
    return int(value)


def as_port(value: Any) -> int:
    """A TCP port 1..65535."""
    return _at_most(MAX_PORT, value)


def as_slots(value: Any) -> int:
    """A slot count 1..MAX_SLOTS."""
    return _at_most(MAX_SLOTS, value)


def as_allowance(value: Any) -> int:
    """A clock allowance in seconds, 1..MAX_ALLOWANCE_S."""
    return _at_most(MAX_ALLOWANCE_S, value)


def as_start_timeout(value: Any) -> int:
    """A start timeout in seconds, 1..MAX_START_TIMEOUT_S."""
    return _at_most(MAX_START_TIMEOUT_S, value)


def as_share(value: Any) -> float:
    """A share above 0 and at most 1."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ValueError("")
    return float(value)


def as_poll(value: Any) -> float:
    """A poll interval in seconds, MIN_POLL_S..MAX_POLL_S."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("")
    if not MIN_POLL_S <= value <= MAX_POLL_S:
        raise ValueError("")
    return float(value)


def as_env_name(value: Any) -> str:
    """An environment variable's name."""
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value):
        raise ValueError("")
    return value


def as_node_name(value: Any) -> str:
    """A node's name: letters, digits, `_ . : -`, not starting with a sign (a number reads as
    its digits)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, str | int)
        or not _NODE_NAME.fullmatch(str(value))
    ):
        raise ValueError("")
    return str(value)


def as_kind_name(value: Any) -> str:
    """A kind's name: lower case, not one of the mix's own names."""
    if not isinstance(value, str) or not _KIND_NAME.fullmatch(value) or value in _RESERVED_KINDS:
        raise ValueError("")
    return value


def as_since(value: Any) -> str:
    """`now`, an ISO 8601 time or a relative time like -24h (see `times.since_us`)."""
    if not isinstance(value, str):
        raise ValueError("")
    since_us(value, int(time.time() * SECOND))  # (as the daemon will read it now)
    return value


def as_buckets(value: Any) -> tuple[float, ...]:
    """Bucket bounds in seconds: finite, increasing by whole microseconds (how they are kept);
    +Inf is always added."""
    if not isinstance(value, list) or not value:
        raise ValueError("")
    out = tuple(as_positive_float(v) for v in value)
    if not all(math.isfinite(b) for b in out):
        raise ValueError("+Inf is always there: list the finite bounds")
    if not all(math.isfinite(b * SECOND) for b in out):  # 1.0e+308 s: no microseconds
        raise ValueError("")
    us = [round(b * SECOND) for b in out]
    if us[0] < 1 or any(b >= a for a, b in zip(us[1:], us, strict=False)):
        raise ValueError("")
    return out


class Unset(ValueError):
    """A path names a $VARIABLE that is not set."""

    def __init__(self, name: str) -> None:
        super().__init__(f"${name} is not set")
        self.name = name


def expand_path(value: Any, env: Mapping[str, str]) -> Path:
    """A path; `$CREDENTIALS_DIRECTORY` and other variables expand from `env` (Unset when one
    is not there)."""
    if not isinstance(value, str) or not value:
        raise ValueError("")

    def variable(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in env:
            raise Unset(name)
        return env[name]

    return Path(_VARIABLE.sub(variable, value))


def expand_paths(value: Any, env: Mapping[str, str]) -> tuple[Path, ...]:
    """A list of paths, each as `expand_path` reads it."""
    if not isinstance(value, list):
        raise ValueError("")
    return tuple(expand_path(v, env) for v in value)
