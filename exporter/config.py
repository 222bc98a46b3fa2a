"""YAML config -> frozen dataclasses, checked once; every problem with its key path and line."""

from __future__ import annotations

import difflib
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter.accounting import DEFAULT_BUCKETS_S
from exporter.kinds import DEFAULT_RULES, KindRule, Kinds
from exporter.times import since_us as _since_us

DEFAULT_PATH = Path("/etc/sm-llm-exporter/config.yaml")
# systemd.unit(5): ASCII letters, digits, ":", "-", "_", ".", "\" and one "@"; at most 255 bytes
_UNIT = re.compile(
    r"[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]*)?\.(service|socket|target|scope|"
    r"timer|slice|mount|path|swap|device|automount)"
)
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")
_KIND_NAME = re.compile(r"[a-z][a-z0-9_]*")


class ConfigError(Exception):
    """The config cannot be used; `problems` lists every one, each with its place."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: {len(problems)} problem(s):\n" + "\n".join(problems))


@dataclass(frozen=True)
class FileNode:
    name: str
    path: Path
    source: str = "file"


@dataclass(frozen=True)
class JournalNode:
    name: str
    unit: str
    directory: Path | None = None
    files: tuple[Path, ...] = ()
    source: str = "journal"


@dataclass(frozen=True)
class SshNode:
    name: str
    host: str
    unit: str
    port: int = 22
    user: str = "root"
    known_hosts: Path | None = Path("/etc/sm-llm-exporter/known_hosts")
    verify_host_key: bool = True
    client_keys: tuple[Path, ...] = ()
    password_file: Path | None = None
    password_env: str | None = None
    journal_directory: str | None = None
    keepalive_interval: float = 15.0
    keepalive_count_max: int = 3
    source: str = "ssh"


NodeConfig = FileNode | JournalNode | SshNode


@dataclass(frozen=True)
class Config:
    listen_host: str = ""
    listen_port: int = 10027
    http_max_connections: int = 64  # open at once; see http.py
    state_dir: Path = Path("/var/lib/sm-llm-exporter")
    unit: str = "sm-llm.service"
    max_request_seconds: int = 600
    stall_seconds: int = 300
    since: str = "now"
    duration_buckets: tuple[float, ...] = DEFAULT_BUCKETS_S
    kinds: Kinds = field(default_factory=lambda: Kinds(DEFAULT_RULES))
    nodes: tuple[NodeConfig, ...] = ()

    def since_us(self, now_us: int) -> int:
        """Where a node with no checkpoint starts reading."""
        return since_us(self.since, now_us)


def since_us(text: str, now_us: int) -> int:
    """`since` (now, ISO 8601, or relative like -24h) -> microseconds; see `times.since_us`."""
    return _since_us(text, now_us)


# -- reading ---------------------------------------------------------------------------------

TOP_KEYS = {
    "listen",
    "http_max_connections",
    "state_dir",
    "unit",
    "max_request_seconds",
    "stall_seconds",
    "since",
    "duration_buckets",
    "kinds",
    "nodes",
}
NODE_KEYS = {
    "file": {"name", "source", "path"},
    "journal": {"name", "source", "unit", "directory", "files"},
    "ssh": {
        "name",
        "source",
        "unit",
        "host",
        "port",
        "user",
        "known_hosts",
        "verify_host_key",
        "client_keys",
        "password_file",
        "password_env",
        "journal_directory",
        "keepalive_interval",
        "keepalive_count_max",
    },
}
KIND_KEYS = {"name", "min_tokens", "max_tokens"}
_SECRET_KEYS = {"password", "passphrase", "secret", "token"}


ALL_SOURCES = frozenset(NODE_KEYS)


class _Loader(yaml.SafeLoader):
    """SafeLoader that leaves timestamps as text: `since` is checked like every other value."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load(
    path: Path, env: Mapping[str, str] = os.environ, available: frozenset[str] = ALL_SOURCES
) -> Config:
    """Read and check `path`; ConfigError lists every problem found. `available`: the kinds of
    source the running program can follow (the others are problems too)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(str(path), [f"{path}: cannot read: {e}"]) from None
    return parse(text, str(path), env, available)


def parse(
    text: str,
    source: str = "<config>",
    env: Mapping[str, str] = os.environ,
    available: frozenset[str] = ALL_SOURCES,
) -> Config:
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else {}
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        what = " ".join(
            str(x) for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x
        ) or str(e)
        raise ConfigError(source, [f"{where}: not valid YAML: {what}"]) from None
    lines: dict[str, int] = {}
    if node is not None:
        _index_lines(node, "", lines)
    checker = _Checker(source, lines, env, available)
    config = checker.config(data)
    if checker.problems:
        raise ConfigError(source, checker.problems)
    return config


def _index_lines(node: yaml.Node, path: str, out: dict[str, int]) -> None:
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = f"{path}.{key.value}" if path else str(key.value)
            out[sub] = key.start_mark.line + 1
            _index_lines(value, sub, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index_lines(item, f"{path}[{i}]", out)


class _Checker:
    """Collects every problem instead of stopping at the first."""

    def __init__(
        self, source: str, lines: dict[str, int], env: Mapping[str, str], available: frozenset[str]
    ) -> None:
        self.source, self.lines, self.env, self.available = source, lines, env, available
        self._found: list[tuple[int, str]] = []

    def problem(self, path: str, text: str) -> None:
        probe = path
        while probe and probe not in self.lines:  # the nearest enclosing key that has a line
            shorter = re.sub(r"(\.[^.\[]*|\[\d+\])$", "", probe)
            probe = shorter if shorter != probe else ""
        line = self.lines.get(probe, 0)
        where = f"{self.source}:{line}" if line else self.source
        self._found.append((line, f"{where}: {path or '(top)'}: {text}"))

    @property
    def problems(self) -> list[str]:
        """Every problem found, in the order of their lines."""
        return [text for _, text in sorted(self._found, key=lambda p: p[0])]

    def mapping(self, value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(path, f"must be a mapping, got {_show(value)}")
            return {}
        for key in value:
            sub = f"{path}.{key}" if path else str(key)
            if key in allowed:
                continue
            if not path.startswith("kinds") and str(key).lower() in _SECRET_KEYS:
                self.problem(sub, "secrets are never inline: use password_file or password_env")
                continue
            near = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            self.problem(sub, f"unknown key {key!r}{hint}")
        return value

    def get(
        self,
        d: dict[str, Any],
        key: str,
        path: str,
        kind: Callable[[Any], Any],
        default: Any,
        what: str,
    ) -> Any:
        if key not in d or d[key] is None:
            return default
        sub = f"{path}.{key}" if path else key
        try:
            return kind(d[key])
        except (TypeError, ValueError) as e:
            shown = "" if key in _MAY_HOLD_A_SECRET else f", got {_show(d[key])}"
            self.problem(sub, f"{what}{shown}" + (f" ({e})" if str(e) else ""))
            return default

    def config(self, data: Any) -> Config:
        top = self.mapping(data, "", TOP_KEYS)
        d = Config()
        host, port = self.get(
            top,
            "listen",
            "",
            _listen,
            (d.listen_host, d.listen_port),
            'must be "HOST:PORT" or ":PORT" with a port 0..65535',
        )
        unit = self.get(top, "unit", "", _unit, d.unit, "must be a systemd unit name")
        return Config(
            listen_host=host,
            listen_port=port,
            http_max_connections=self.get(
                top,
                "http_max_connections",
                "",
                _positive_int,
                d.http_max_connections,
                "must be a positive integer",
            ),
            state_dir=self.get(top, "state_dir", "", self._path, d.state_dir, "must be a path"),
            unit=unit,
            max_request_seconds=self.get(
                top,
                "max_request_seconds",
                "",
                _positive_int,
                d.max_request_seconds,
                "must be a positive integer",
            ),
            stall_seconds=self.get(
                top,
                "stall_seconds",
                "",
                _positive_int,
                d.stall_seconds,
                "must be a positive integer",
            ),
            since=self.get(
                top,
                "since",
                "",
                _since,
                d.since,
                "must be now, an ISO 8601 time or a relative time like -24h",
            ),
            duration_buckets=self.get(
                top,
                "duration_buckets",
                "",
                _buckets,
                d.duration_buckets,
                "must be a list of increasing positive seconds",
            ),
            kinds=self.kinds(top.get("kinds")) if "kinds" in top else d.kinds,
            nodes=self.nodes(top.get("nodes"), unit),
        )

    def kinds(self, value: Any) -> Kinds:
        if not isinstance(value, list) or not value:
            self.problem("kinds", f"must be a non-empty list of rules, got {_show(value)}")
            return Kinds(DEFAULT_RULES)
        rules: list[KindRule] = []
        for i, item in enumerate(value):
            path = f"kinds[{i}]"
            k = self.mapping(item, path, KIND_KEYS)
            name = self.get(
                k,
                "name",
                path,
                _kind_name,
                None,
                "must be a lower-case name (a-z, 0-9, _), not idle or unknown",
            )
            lo = self.get(k, "min_tokens", path, _count, None, "must be an integer >= 0")
            hi = self.get(k, "max_tokens", path, _count, None, "must be an integer >= 0")
            if "name" not in k:
                self.problem(path, "a kind needs a name")
            if lo is not None and hi is not None and lo > hi:
                self.problem(path, f"min_tokens {lo} is above max_tokens {hi}")
            if name is not None:
                if any(r.name == name for r in rules):
                    self.problem(f"{path}.name", f"kind {name!r} is defined twice")
                rules.append(KindRule(name, lo, hi))
        return Kinds(tuple(rules)) if rules else Kinds(DEFAULT_RULES)

    def nodes(self, value: Any, unit: str) -> tuple[NodeConfig, ...]:
        if not isinstance(value, list) or not value:
            self.problem("nodes", f"must be a non-empty list of nodes, got {_show(value)}")
            return ()
        out: list[NodeConfig] = []
        names: set[str] = set()
        for i, item in enumerate(value):
            path = f"nodes[{i}]"
            source = item.get("source") if isinstance(item, dict) else None
            if not isinstance(source, str) or source not in NODE_KEYS:
                near = difflib.get_close_matches(str(source), sorted(NODE_KEYS), n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                self.problem(
                    f"{path}.source",
                    f"must be one of file, journal, ssh, got {_show(source)}{hint}",
                )
                continue
            if source not in self.available:
                self.problem(
                    f"{path}.source",
                    f"source {source!r} is not available in this "
                    f"version (available: {', '.join(sorted(self.available))})",
                )
            n = self.mapping(item, path, NODE_KEYS[source])
            name = self.get(
                n, "name", path, _node_name, None, "must be a name of letters, digits, _ . : -"
            )
            if name is None:
                if "name" not in n:
                    self.problem(path, "a node needs a name")
                continue
            if name in names:
                self.problem(f"{path}.name", f"node {name!r} is defined twice")
            names.add(name)
            node = self.node(source, n, path, name, unit)
            if node is not None:
                out.append(node)
        return tuple(out)

    def node(
        self, source: str, n: dict[str, Any], path: str, name: str, unit: str
    ) -> NodeConfig | None:
        node_unit = self.get(n, "unit", path, _unit, unit, "must be a systemd unit name")
        if source == "file":
            file_path = self.get(n, "path", path, self._path, None, "must be a path")
            if file_path is None:
                if n.get("path") is None:
                    self.problem(path, "a file node needs a path")
                return None
            return FileNode(name, file_path)
        if source == "journal":
            directory = self.get(n, "directory", path, self._path, None, "must be a path")
            files = self.get(n, "files", path, self._paths, (), "must be a list of paths")
            if directory is not None and files:
                self.problem(path, "give directory or files, not both")
            return JournalNode(name, node_unit, directory, files)
        host = self.get(n, "host", path, _nonempty, None, "must be a host name or address")
        if host is None:
            if n.get("host") is None:
                self.problem(path, "an ssh node needs a host")
            return None
        d = SshNode(name, host, node_unit)
        password_file = self.get(n, "password_file", path, self._path, None, "must be a path")
        password_env = self.get(
            n, "password_env", path, _env_name, None, "must be an environment variable name"
        )
        if password_file is not None and password_env is not None:
            self.problem(path, "give password_file or password_env, not both")
        return SshNode(
            name=name,
            host=host,
            unit=node_unit,
            port=self.get(n, "port", path, _port, d.port, "must be a port 1..65535"),
            user=self.get(n, "user", path, _nonempty, d.user, "must be a user name"),
            known_hosts=self.get(
                n, "known_hosts", path, self._path, d.known_hosts, "must be a path"
            ),
            verify_host_key=self.get(
                n, "verify_host_key", path, _bool, True, "must be true or false"
            ),
            client_keys=self.get(
                n, "client_keys", path, self._paths, (), "must be a list of paths"
            ),
            password_file=password_file,
            password_env=password_env,
            journal_directory=self.get(
                n, "journal_directory", path, _nonempty, None, "must be a path on the node"
            ),
            keepalive_interval=self.get(
                n,
                "keepalive_interval",
                path,
                _positive_float,
                d.keepalive_interval,
                "must be positive seconds",
            ),
            keepalive_count_max=self.get(
                n,
                "keepalive_count_max",
                path,
                _positive_int,
                d.keepalive_count_max,
                "must be a positive integer",
            ),
        )

    def _path(self, value: Any) -> Path:
        """A path; `$CREDENTIALS_DIRECTORY` and other variables expand from the environment."""
        if not isinstance(value, str) or not value:
            raise ValueError("")
        expanded = re.sub(r"\$\{(\w+)\}|\$(\w+)", self._var, value)
        return Path(expanded)

    def _var(self, m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in self.env:
            raise ValueError(f"${name} is not set")
        return self.env[name]

    def _paths(self, value: Any) -> tuple[Path, ...]:
        if not isinstance(value, list):
            raise ValueError("")
        return tuple(self._path(v) for v in value)


# Keys whose bad value may be a secret pasted by mistake (a password, key material): never
# echoed in a problem (the problem still names the key, its line and what it must be).
_MAY_HOLD_A_SECRET = frozenset({"password_env", "password_file", "client_keys"})


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _listen(value: Any) -> tuple[str, int]:
    if not isinstance(value, str) or ":" not in value:
        raise ValueError("")
    host, _, port = value.rpartition(":")
    if ":" in host:  # an IPv6 address must be bracketed: "[::1]:10027"
        if not (host.startswith("[") and host.endswith("]")):
            raise ValueError("")
        host = host[1:-1]
    if not port.isdigit() or int(port) > 65535:
        raise ValueError("")
    return host, int(port)


def _unit(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("")
    unit = value if "." in value else value + ".service"
    if len(unit) > 255 or not _UNIT.fullmatch(unit):
        raise ValueError("")
    return unit


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError("")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("")
    return value


def _positive_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError("")
    return float(value)


def _port(value: Any) -> int:
    port = _positive_int(value)
    if port > 65535:
        raise ValueError("")
    return port


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("")
    return value


def _nonempty(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        raise ValueError("")
    return str(value)


def _env_name(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError("")
    return value


def _node_name(value: Any) -> str:
    if (
        isinstance(value, bool)
        or not isinstance(value, str | int)
        or not _NODE_NAME.fullmatch(str(value))
    ):
        raise ValueError("")
    return str(value)


def _kind_name(value: Any) -> str:
    if (
        not isinstance(value, str)
        or not _KIND_NAME.fullmatch(value)
        or value in {"idle", "unknown"}
    ):
        raise ValueError("")
    return value


def _since(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("")
    since_us(value, int(time.time() * 1_000_000))  # (as the daemon will read it now)
    return value


def _buckets(value: Any) -> tuple[float, ...]:
    """Bucket bounds in seconds: finite, increasing by whole microseconds (how they are kept);
    +Inf is always added."""
    if not isinstance(value, list) or not value:
        raise ValueError("")
    out = tuple(_positive_float(v) for v in value)
    if not all(math.isfinite(b) for b in out):
        raise ValueError("+Inf is always there: list the finite bounds")
    us = [round(b * 1_000_000) for b in out]
    if us[0] < 1 or any(b >= a for a, b in zip(us[1:], us, strict=False)):
        raise ValueError("")
    return out


def describe(config: Config) -> Iterator[str]:
    """One line per node, for logs and check-config."""
    for n in config.nodes:
        if isinstance(n, FileNode):
            yield f"node {n.name}: file {n.path}"
        elif isinstance(n, JournalNode):
            where = n.directory or (", ".join(map(str, n.files)) or "the local journal")
            yield f"node {n.name}: journal {where}, unit {n.unit}"
        else:
            yield f"node {n.name}: ssh {n.user}@{n.host}:{n.port}, unit {n.unit}"
