"""YAML config -> frozen dataclasses, checked once; every problem with its key path and line."""

from __future__ import annotations

import difflib
import errno
import ipaddress
import math
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter.accounting.accounting import CLOCK_ALLOWANCE_US, DEFAULT_BUCKETS_S
from exporter.base.kinds import DEFAULT_RULES, KindRule, Kinds
from exporter.base.times import since_us as _since_us
from exporter.parse.parser import DEFAULT_SLOTS, MAX_SLOTS

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
    known_hosts: Path | None = Path("/etc/sm-llm-exporter/ssh/known_hosts")
    verify_host_key: bool = True
    client_keys: tuple[Path, ...] = ()
    password_file: Path | None = None
    password_env: str | None = None
    passphrase_file: Path | None = None  # of encrypted client_keys
    passphrase_env: str | None = None
    journal_directory: str | None = None
    keepalive_interval: float = 15.0
    keepalive_count_max: int = 3
    source: str = "ssh"


NodeConfig = FileNode | JournalNode | SshNode


@dataclass(frozen=True)
class InitTimelineNode:
    """A vllm-omni engine's init timeline: its run directory (`worker_*.jsonl`) and/or dump."""

    name: str
    path: Path  # the run directory, or the dump
    dump: Path | None = None  # the dump, beside a run directory
    poll_seconds: float = 5.0
    source: str = "init-timeline"


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
    slots: int = DEFAULT_SLOTS  # a node's slot count until its llama-server logs n_slots
    # how far ahead of this clock a node's journal may run
    clock_allowance_seconds: int = CLOCK_ALLOWANCE_US // 1_000_000
    kinds: Kinds = field(default_factory=lambda: Kinds(DEFAULT_RULES))
    nodes: tuple[NodeConfig, ...] = ()
    init_timelines: tuple[InitTimelineNode, ...] = ()  # `source: init-timeline` nodes
    # every node's name by its place in `nodes:` ("" where a node has no valid name): for key
    # paths, no setting of its own
    node_order: tuple[str, ...] = field(default=(), compare=False)
    # the unit's TimeoutStartSec (systemd's default), and the share of it past which a
    # start-up is slow (SmLlmServerSlowStart)
    start_timeout_seconds: int = 90
    slow_start_share: float = 0.8
    web_config_file: Path | None = None  # TLS and basic auth (webconfig.py); None: plain HTTP

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
    "slots",
    "clock_allowance_seconds",
    "start_timeout_seconds",
    "slow_start_share",
    "kinds",
    "nodes",
    "web_config_file",
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
        "passphrase_file",
        "passphrase_env",
        "journal_directory",
        "keepalive_interval",
        "keepalive_count_max",
    },
    "init-timeline": {"name", "source", "path", "dump", "poll_seconds"},
}
KIND_KEYS = {"name", "min_tokens", "max_tokens"}
_SECRET_KEYS = {"password", "passphrase", "secret", "token"}


ALL_SOURCES = frozenset(NODE_KEYS)
_ANY_NODE_KEY = set().union(*NODE_KEYS.values())


def _misspelled_source(item: dict[Any, Any]) -> bool:
    """Whether an unknown key of a node is `source` misspelled (its problem says so)."""
    allowed = sorted(_ANY_NODE_KEY)
    return any(
        difflib.get_close_matches(str(key), allowed, n=1) == ["source"]
        for key in item
        if key not in _ANY_NODE_KEY and _key_shown(key)
    )


# A config is a few KiB and a few hundred values; these bound what a hostile or mistaken one can
# make the loader do (issue 14): past them the document is one problem, never a hang, an
# exhausted memory or a RecursionError from PyYAML's recursive composer.
MAX_BYTES = 1 << 20
MAX_DEPTH = 64  # collections inside collections, through aliases too
MAX_VALUES = 100_000  # every scalar and collection, an alias counting as all it stands for
_MAX_INT_CHARS = 100  # longer, YAML 1.1's base-60 ints (1:2:3...) take quadratic time


class _Refused(yaml.MarkedYAMLError):
    """A document past one of the bounds above, at the mark where it went past."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class _Loader(yaml.SafeLoader):
    """SafeLoader that leaves timestamps as text (`since` is checked like every other value),
    refuses a document past MAX_DEPTH or MAX_VALUES, or with an alias inside the collection it
    names, while composing it (before it recurses any deeper), and turns a tag's constructor
    choking on its text (`!!int x`) into a ConstructorError at the node's line."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._open_anchors: set[str] = set()
        # node -> (values, depth) as its aliases expand: a post-order memo, so each node of the
        # composed graph is measured once, however often an alias repeats it
        self._measured: dict[yaml.Node, tuple[int, int]] = {}

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]  # (untyped in the stubs)
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:
                raise _Refused(
                    "an alias inside the collection it names (a cycle)", event.start_mark
                )
            return super().compose_node(parent, index)  # a node measured already
        opens = isinstance(event, yaml.CollectionStartEvent)
        if opens:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
            if event.anchor is not None:
                self._open_anchors.add(event.anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            if opens:
                self._depth -= 1
                self._open_anchors.discard(event.anchor)
        if node is not None:
            self._measure(node)
        return node

    def _measure(self, node: yaml.Node) -> None:
        """Record `node`'s expanded size and depth; its children, composed before it, are
        measured already (an alias names a finished collection: cycles are refused)."""
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            self._measured[node] = (1, 0)
            return
        sizes = [self._measured[child] for child in children]
        values = 1 + sum(v for v, _ in sizes)
        depth = 1 + max((d for _, d in sizes), default=0)
        if values > MAX_VALUES:
            raise _Refused(
                f"expands to more than {MAX_VALUES:,} values "
                "(an alias counts as all it stands for)",
                node.start_mark,
            )
        if depth > MAX_DEPTH:
            raise _Refused(
                f"nested deeper than {MAX_DEPTH} levels through its aliases", node.start_mark
            )
        self._measured[node] = (values, depth)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        if (
            node.tag == "tag:yaml.org,2002:int"
            and isinstance(node, yaml.ScalarNode)
            and len(node.value) > _MAX_INT_CHARS
        ):
            raise yaml.constructor.ConstructorError(
                problem=f"an integer written in more than {_MAX_INT_CHARS} characters",
                problem_mark=node.start_mark,
            )
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception:  # ValueError, KeyError ...: the text is not of its tag
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise yaml.constructor.ConstructorError(
                problem=f"the value does not read as {tag}", problem_mark=node.start_mark
            ) from None


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load(
    path: Path, env: Mapping[str, str] = os.environ, available: frozenset[str] = ALL_SOURCES
) -> Config:
    """Read and check `path`; ConfigError lists every problem found. `available`: the kinds of
    source the running program can follow (the others are problems too)."""
    return parse(read_text(path), str(path), env, available)


class Unreadable(ConfigError):
    """A config (or a web config) that cannot be read at all: its one problem is the message."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(source, [printable(problem)])

    def __str__(self) -> str:
        return self.problems[0]


def read_text(path: Path) -> str:
    """A config file's text: a regular file only (a FIFO or a device there is refused, never
    waited on: `check-config /dev/zero` ends too), bounded; ConfigError else."""
    try:
        raw = read_regular(path, MAX_BYTES + 1)
    except OSError as e:
        raise Unreadable(str(path), f"{path}: cannot read: {why_not(e)}") from None
    return decode(raw, str(path))


def decode(raw: bytes, source: str) -> str:
    """A config's bytes (read with at most MAX_BYTES + 1 of them) as text; ConfigError when
    there are more, or they are no UTF-8."""
    if len(raw) > MAX_BYTES:
        raise Unreadable(source, f"{source}: over {MAX_BYTES:,} bytes: not a config")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Unreadable(source, f"{source}: cannot read: {e}") from None


MAX_SECRET_FILE = 1 << 20  # a key, a known_hosts, a password: anything bigger is none
_READ_CHUNK = 1 << 16
# what a path that is no regular file is, by its st_mode's file type
_FILE_TYPES = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symlink",
}


def file_kind(mode: int) -> str:
    """What a file of st_mode `mode` is, in words ("a FIFO", "a regular file")."""
    return "a regular file" if stat.S_ISREG(mode) else _FILE_TYPES.get(stat.S_IFMT(mode), "?")


class NotRegular(OSError):
    """The path is a FIFO, a device, a socket or a directory: nothing to read a file from."""


def read_regular(path: Path, limit: int) -> bytes:
    """At most `limit` bytes of the regular file at `path`. Opened without blocking and as no
    controlling terminal, then fstat()ed: a FIFO, a device or a directory there is refused
    (NotRegular, an OSError) before a byte is read, never waited on."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise NotRegular(errno.EISDIR, os.strerror(errno.EISDIR))
        if not stat.S_ISREG(mode):
            raise NotRegular(errno.EINVAL, f"not a regular file ({file_kind(mode)})")
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, _READ_CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def why_not(e: OSError) -> str:
    """Why a file cannot be read, in words (its strerror: never the path again)."""
    return e.strerror or str(e) or type(e).__name__


def read_small_file(path: Path) -> bytes:
    """A key, known_hosts or secret file's bytes: a regular file only (opened without
    blocking: a FIFO there is refused, not waited on), at most MAX_SECRET_FILE."""
    return read_regular(path, MAX_SECRET_FILE)


def parse(
    text: str,
    source: str = "<config>",
    env: Mapping[str, str] = os.environ,
    available: frozenset[str] = ALL_SOURCES,
) -> Config:
    data, checker = document(text, source, env, available)
    config = checker.config(data)
    if checker.problems:
        raise ConfigError(source, checker.problems)
    return config


def document(
    text: str,
    source: str,
    env: Mapping[str, str] = os.environ,
    available: frozenset[str] = ALL_SOURCES,
) -> tuple[Any, Checker]:
    """A YAML file read as the config is (the config, the web config): its value, and a Checker
    that holds its keys given twice already and places later problems at their lines.
    ConfigError when it is no YAML (or too big)."""
    if len(text) > MAX_BYTES:
        raise Unreadable(source, f"{source}: over {MAX_BYTES:,} characters: not a config")
    try:
        node, data, duplicates = _compose_and_construct(text)
    except yaml.YAMLError as e:
        raise ConfigError(source, [printable(_yaml_problem(e, text, source))]) from None
    checker = Checker(source, _index_lines(node) if node is not None else {}, env, available)
    for path, first, second in duplicates:
        where = f"on line {first}" if first == second else f"on lines {first} and {second}"
        checker.problem(path, f"given twice, {where} (which one?)")
    return data, checker


def _compose_and_construct(
    text: str,
) -> tuple[yaml.Node | None, Any, list[tuple[str, int, int]]]:
    """The document's node graph (for the lines), its Python value, and its keys given twice
    (found before it is built: building a merge key `<<` writes the merged keys into the
    graph)."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}, []
        duplicates = list(_duplicates(node))
        return node, loader.construct_document(node), duplicates
    finally:
        loader.dispose()


def _yaml_problem(e: yaml.YAMLError, text: str, source: str) -> str:
    """The one problem of a document PyYAML cannot read or `_Loader` refused, at its line."""
    if isinstance(e, yaml.reader.ReaderError):  # raised before any mark exists
        line = len(_YAML_LINE_BREAK.findall(text, 0, e.position)) + 1
        return (
            f"{source}:{line}: not valid YAML: unacceptable character "
            f"#x{e.character:04x}: {e.reason}"
        )
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f"{source}:{mark.line + 1}" if mark is not None else source
    if isinstance(e, _Refused):
        return f"{where}: {e.problem}"
    what = " ".join(
        str(x) for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x
    ) or str(e)
    return f"{where}: not valid YAML: {_unquote(' '.join(what.split()))}"


_YAML_LINE_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")  # what PyYAML's marks count
# PyYAML quotes the text it stumbled on; an alias, tag or anchor name there may be a password
# pasted after `*`, `!` or `&`. A single character (a tab, a stray `@`) is shown, as are token
# names like '<block end>'; anything longer is not.
_QUOTED = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\"""")
_SHOWN_QUOTE = re.compile(r"""(['"])(?:[^\\]|\\(?:x..|u....|U........|.)|<[a-z ]+>)\1""")


def _unquote(text: str) -> str:
    return _QUOTED.sub(
        lambda m: m.group() if _SHOWN_QUOTE.fullmatch(m.group()) else "(text not shown)", text
    )


def _index_lines(root: yaml.Node) -> dict[str, int]:
    """Key path -> line, for the problems. Iterative, walking aliases as they expand: the
    loader bounded that walk to MAX_VALUES nodes and MAX_DEPTH levels."""
    out: dict[str, int] = {}
    todo: list[tuple[yaml.Node, str, int | None]] = [(root, "", None)]
    while todo:
        node, path, key_line = todo.pop()
        if key_line is not None:
            out[path] = key_line
        out.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in reversed(node.value):
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                sub = f"{path}.{name}" if path else str(name)
                todo.append((value, sub, key.start_mark.line + 1))
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(
                (node.value[i], f"{path}[{i}]", None) for i in reversed(range(len(node.value)))
            )
    return out


def _duplicates(root: yaml.Node) -> Iterator[tuple[str, int, int]]:
    """(key path, first line, second line) of every key a mapping gives twice (YAML would let
    the last win, silently)."""
    todo: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()
    while todo:
        node, path = todo.pop()
        if id(node) in seen:  # (an alias: walked once)
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                sub = f"{path}.{name}" if path else str(name)
                line = key.start_mark.line + 1
                if name in first and isinstance(key, yaml.ScalarNode):
                    yield sub, first[name], line
                first.setdefault(name, line)
                todo.append((value, sub))
        elif isinstance(node, yaml.SequenceNode):
            todo.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))


class Checker:
    """Collects every problem instead of stopping at the first."""

    def __init__(
        self, source: str, lines: dict[str, int], env: Mapping[str, str], available: frozenset[str]
    ) -> None:
        self.source, self.lines, self.env, self.available = source, lines, env, available
        self.timelines: list[InitTimelineNode] = []  # (the init-timeline nodes read)
        # every node's name by its place in the list ("" for one without a valid name)
        self.names: list[str] = []
        self._found: list[tuple[int, str]] = []
        self.keys: set[str] = set()  # the key paths with a problem

    def placed(self, path: str, text: str, shown: str | None = None) -> tuple[int, str]:
        """(line, `SOURCE:LINE: KEY: text`): `text` at `path`'s line, or at the line of the
        nearest key around it (a default's); `shown`, if given, is the path as it is named."""
        probe = path
        while probe and probe not in self.lines:  # the nearest enclosing key that has a line
            shorter = re.sub(r"(\.[^.\[]*|\[\d+\])$", "", probe)
            probe = shorter if shorter != probe else ""
        line = self.lines.get(probe, 0)
        where = f"{self.source}:{line}" if line else self.source
        named = shown or path or "(top)"
        return line, printable(f"{where}: {named}: {text}")

    def problem(self, path: str, text: str, shown: str | None = None) -> None:
        """`text` at `path`'s line; `shown`, if given, is the path as the problem names it."""
        self.keys.add(path)
        self._found.append(self.placed(path, text, shown))

    def has_problem(self, path: str) -> bool:
        """Whether a problem names the key at `path` or one inside it."""
        return any(k == path or k.startswith((f"{path}.", f"{path}[")) for k in self.keys)

    @property
    def problems(self) -> list[str]:
        """Every problem found, in the order of their lines."""
        return [text for _, text in sorted(self._found, key=lambda p: p[0])]

    def mapping(self, value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(path, f"must be a mapping, got {show(value)}")
            return {}
        for key in value:
            sub = f"{path}.{key}" if path else str(key)
            if key in allowed:
                continue
            in_kinds = path.startswith("kinds")  # (where `token` is a typo, no secret)
            if not in_kinds and str(key).lower() in _SECRET_KEYS:
                self.problem(
                    sub,
                    "secrets are never inline: use password_file or password_env (a key's "
                    "passphrase: passphrase_file or passphrase_env)",
                )
                continue
            near = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            if not _key_shown(key):
                shown = f"{path}.(a key)" if path else "(a key)"
                self.problem(sub, f"unknown key, not shown as it may hold a secret{hint}", shown)
                continue
            self.problem(sub, f"unknown key {show(key)}{hint}")
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
        except (TypeError, ValueError, OverflowError) as e:
            secret = key in _MAY_HOLD_A_SECRET
            shown = "" if secret else f", got {show(d[key])}"
            self.problem(sub, f"{what}{shown}{_reason(e, secret)}")
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
            slots=self.get(top, "slots", "", _slots, d.slots, f"must be an integer 1..{MAX_SLOTS}"),
            clock_allowance_seconds=self.get(
                top,
                "clock_allowance_seconds",
                "",
                _allowance,
                d.clock_allowance_seconds,
                f"must be an integer 1..{MAX_ALLOWANCE_S} (seconds)",
            ),
            start_timeout_seconds=self.get(
                top,
                "start_timeout_seconds",
                "",
                _timeout,
                d.start_timeout_seconds,
                f"must be an integer 1..{MAX_START_TIMEOUT_S} (the unit's TimeoutStartSec)",
            ),
            slow_start_share=self.get(
                top,
                "slow_start_share",
                "",
                _share,
                d.slow_start_share,
                "must be a number above 0 and at most 1",
            ),
            kinds=self.kinds(top.get("kinds")) if "kinds" in top else d.kinds,
            nodes=self.nodes(top.get("nodes"), unit),
            init_timelines=tuple(self.timelines),
            node_order=tuple(self.names),
            web_config_file=self.get(
                top, "web_config_file", "", self._path, None, "must be a path"
            ),
        )

    def kinds(self, value: Any) -> Kinds:
        if not isinstance(value, list) or not value:
            self.problem("kinds", f"must be a non-empty list of rules, got {show(value)}")
            return Kinds(DEFAULT_RULES)
        rules: list[KindRule] = []
        names: set[str] = set()
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
            lo = self.get(k, "min_tokens", path, as_count, None, "must be an integer >= 0")
            hi = self.get(k, "max_tokens", path, as_count, None, "must be an integer >= 0")
            if "name" not in k:
                self.problem(path, "a kind needs a name")
            if lo is not None and hi is not None and lo > hi:
                self.problem(path, f"min_tokens {lo} is above max_tokens {hi}")
            if name is not None:
                if name in names:
                    self.problem(f"{path}.name", f"kind {name!r} is defined twice")
                names.add(name)
                rules.append(KindRule(name, lo, hi))
        if len(rules) > MAX_KINDS:  # (every mix of kinds is a series: 2**kinds of them)
            self.problem("kinds", f"at most {MAX_KINDS} kinds, got {len(rules)}")
            return Kinds(DEFAULT_RULES)
        return Kinds(tuple(rules)) if rules else Kinds(DEFAULT_RULES)

    def nodes(self, value: Any, unit: str) -> tuple[NodeConfig, ...]:
        if not isinstance(value, list) or not value:
            self.problem("nodes", f"must be a non-empty list of nodes, got {show(value)}")
            return ()
        out: list[NodeConfig] = []
        names: set[str] = set()
        for i, item in enumerate(value):
            path = f"nodes[{i}]"
            self.names.append("")
            source = item.get("source") if isinstance(item, dict) else None
            if not isinstance(source, str) or source not in NODE_KEYS:
                self._no_source(item, path, source)
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
            self.names[-1] = name
            if source == "init-timeline":
                timeline = self.timeline(n, path, name)
                if timeline is not None:
                    self.timelines.append(timeline)
                continue
            node = self.node(source, n, path, name, unit)
            if node is not None:
                out.append(node)
        return tuple(out)

    def _no_source(self, item: Any, path: str, source: Any) -> None:
        """A node without a `source:` one of NODE_KEYS: that, and its unknown keys (of every
        source's), so a misspelled `souce:` is named as what it is."""
        given = isinstance(item, dict) and "source" in item
        if isinstance(item, dict):
            self.mapping(item, path, _ANY_NODE_KEY)
            if not given and _misspelled_source(item):
                return  # (its unknown key says: did you mean 'source'?)
        elif item is not None:
            self.mapping(item, path, _ANY_NODE_KEY)  # (must be a mapping)
            return
        choices = ", ".join(NODE_KEYS)
        if given:
            near = difflib.get_close_matches(str(source), sorted(NODE_KEYS), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            self.problem(f"{path}.source", f"must be one of {choices}, got {show(source)}{hint}")
        else:
            self.problem(path, f"a node needs a source: one of {choices}")

    def timeline(self, n: dict[str, Any], path: str, name: str) -> InitTimelineNode | None:
        where = self.get(n, "path", path, self._path, None, "must be a path")
        dump = self.get(n, "dump", path, self._path, None, "must be a path")
        poll = self.get(n, "poll_seconds", path, _poll, 5.0, f"must be seconds 0.1..{MAX_POLL_S}")
        if where is None:
            if n.get("path") is None:
                self.problem(path, "an init-timeline node needs a path (its run directory)")
            return None
        return InitTimelineNode(name, where, dump, poll)

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
        host = self.get(n, "host", path, _host, None, "must be a host name or an IP address")
        if host is None and n.get("host") is None:
            self.problem(path, "an ssh node needs a host")
        d = SshNode(name, host or "", node_unit)
        password_file = self.get(n, "password_file", path, self._path, None, "must be a path")
        password_env = self.get(
            n, "password_env", path, _env_name, None, "must be an environment variable name"
        )
        if password_file is not None and password_env is not None:
            self.problem(path, "give password_file or password_env, not both")
        passphrase_file = self.get(n, "passphrase_file", path, self._path, None, "must be a path")
        passphrase_env = self.get(
            n, "passphrase_env", path, _env_name, None, "must be an environment variable name"
        )
        if passphrase_file is not None and passphrase_env is not None:
            self.problem(path, "give passphrase_file or passphrase_env, not both")
        node = SshNode(
            name=name,
            host=host or "",
            unit=node_unit,
            port=self.get(n, "port", path, _port, d.port, "must be a port 1..65535"),
            user=self.get(
                n,
                "user",
                path,
                _user,
                d.user,
                "must be a user name (letters, digits, _ . -; not starting with - or .)",
            ),
            known_hosts=self.get(
                n, "known_hosts", path, self._path, self._default_known_hosts(), "must be a path"
            ),
            verify_host_key=self.get(
                n, "verify_host_key", path, as_bool, True, "must be true or false"
            ),
            client_keys=self.get(
                n, "client_keys", path, self._paths, (), "must be a list of paths"
            ),
            password_file=password_file,
            password_env=password_env,
            passphrase_file=passphrase_file,
            passphrase_env=passphrase_env,
            journal_directory=self.get(
                n, "journal_directory", path, _remote_path, None, "must be a path on the node"
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
        return node if host is not None else None

    def _default_known_hosts(self) -> Path:
        """The service's (the unit hands /etc/sm-llm-exporter/ssh/known_hosts over as the
        credential ssh_known_hosts), else that file."""
        if "CREDENTIALS_DIRECTORY" in self.env:
            return Path(self.env["CREDENTIALS_DIRECTORY"]) / "ssh_known_hosts"
        return Path("/etc/sm-llm-exporter/ssh/known_hosts")

    def _path(self, value: Any) -> Path:
        """A path; `$CREDENTIALS_DIRECTORY` and other variables expand from the environment."""
        if not isinstance(value, str) or not value:
            raise ValueError("")
        expanded = re.sub(r"\$\{(\w+)\}|\$(\w+)", self._var, value)
        return Path(expanded)

    def _var(self, m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in self.env:
            raise _Unset(name)
        return self.env[name]

    def _paths(self, value: Any) -> tuple[Path, ...]:
        if not isinstance(value, list):
            raise ValueError("")
        return tuple(self._path(v) for v in value)


# Keys whose bad value may be a secret pasted by mistake (a password, key material): never
# echoed in a problem (the problem still names the key, its line and what it must be), nor
# shown inside a value that holds them (`show`).
_MAY_HOLD_A_SECRET = frozenset(
    {"password_env", "password_file", "passphrase_env", "passphrase_file", "client_keys"}
)
# Keys of the web config (webconfig.py) whose values `show` never shows either: a private key's
# PEM text, the users' bcrypt hashes.
_VALUES_NOT_SHOWN = frozenset({"key", "basic_auth_users"})
# The variables systemd sets for a service (systemd.exec(5)): public names, so a problem of a key
# that may hold a secret names them; any other `$NAME` there may be the tail of a password.
_SERVICE_VARIABLES = frozenset(
    {
        "CREDENTIALS_DIRECTORY",
        "RUNTIME_DIRECTORY",
        "STATE_DIRECTORY",
        "CACHE_DIRECTORY",
        "LOGS_DIRECTORY",
        "CONFIGURATION_DIRECTORY",
        "HOME",
    }
)


class _Unset(ValueError):
    """A path names a $VARIABLE that is not set."""

    def __init__(self, name: str) -> None:
        super().__init__(f"${name} is not set")
        self.name = name


def _reason(e: Exception, secret: bool) -> str:
    """Why a value was refused, in brackets; for a key that may hold a secret, nothing of the
    value but the name of a service variable."""
    if not secret:
        return f" ({e})" if str(e) else ""
    if isinstance(e, _Unset):
        return f" ({e})" if e.name in _SERVICE_VARIABLES else " (a variable it names is not set)"
    return ""


def _names_a_secret(key: object) -> bool:
    """Whether `key`'s value may be a secret; `key` may be one too: in a flow mapping, a missed
    colon makes one key of `{password_file hunter2}`."""
    if not isinstance(key, str):
        return False
    low = key.lower()
    return (
        key in _MAY_HOLD_A_SECRET
        or low in _SECRET_KEYS
        or any(word in low for word in ("password", "passphrase", "secret"))
    )


def _key_shown(key: object) -> bool:
    """Whether a problem may show `key` itself: any key but one that mentions a secret beyond
    the names of the keys that may hold one."""
    return not _names_a_secret(key) or key in _MAY_HOLD_A_SECRET or str(key).lower() in _SECRET_KEYS


class _Shown(str):
    """A piece of `show`'s text, as opposed to a value still to be shown."""


def printable(text: str) -> str:
    """`text` with its unprintable characters escaped: a key path from the config's keys, a
    path from its values, stays on the problem's one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def show(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters, but with the values of keys that may hold a secret
    (at any depth) as <not shown>. Built piece by piece, without recursion: a deep or huge value
    costs what is shown."""
    text = ""
    for piece in _repr_pieces(value):
        text += piece
        if len(text) > limit:
            return text[: limit - 3] + "..."
    return text


_DONE = object()


def _repr_pieces(value: Any) -> Iterator[str]:
    todo: list[Iterator[Any]] = [iter([value])]
    while todo:
        item = next(todo[-1], _DONE)
        if item is _DONE:
            todo.pop()
        elif isinstance(item, _Shown):
            yield item
        elif isinstance(item, dict):
            todo.append(_entry_pieces(item))
        elif isinstance(item, list | tuple):
            todo.append(_item_pieces(item))
        else:
            yield repr(item)


def _entry_pieces(d: dict[Any, Any]) -> Iterator[Any]:
    yield _Shown("{")
    for i, (key, value) in enumerate(d.items()):
        shown = repr(key) if _key_shown(key) else "<not shown>"
        yield _Shown(f"{', ' if i else ''}{shown}: ")
        yield _Shown("<not shown>") if _names_a_secret(key) or key in _VALUES_NOT_SHOWN else value
    yield _Shown("}")


def _item_pieces(items: list[Any] | tuple[Any, ...]) -> Iterator[Any]:
    tuple_ = isinstance(items, tuple)
    yield _Shown("(" if tuple_ else "[")
    for i, item in enumerate(items):
        if i:
            yield _Shown(", ")
        yield item
    yield _Shown(",)" if tuple_ and len(items) == 1 else ")" if tuple_ else "]")


def listen_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `:PORT` (IPv6 bracketed) -> (host, port), as `listen:` reads it;
    ValueError when it is not one."""
    return _listen(text)


def _listen(value: Any) -> tuple[str, int]:
    if not isinstance(value, str) or ":" not in value:
        raise ValueError("")
    host, _, port = value.rpartition(":")
    if ":" in host:  # an IPv6 address must be bracketed: "[::1]:10027"
        if not (host.startswith("[") and host.endswith("]")):
            raise ValueError("")
        host = host[1:-1]
    if not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError("")
    if host:  # ("" is every interface)
        _host(host)
    return host, int(port)


_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")


def _host(value: Any) -> str:
    """A host name (RFC 1123 labels) or an IP address (IPv6 with or without brackets): nothing
    a shell or ssh would read as more (`h; touch /x`, `-oProxyCommand=...`, `${VAR}`)."""
    if not isinstance(value, str) or not value:
        raise ValueError("")
    bare = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    address, _, zone = bare.partition("%")
    if zone and not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", zone):  # (an IPv6 zone: an interface)
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
    if len(name) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in name.split(".")):
        raise ValueError("")
    return value


def _user(value: Any) -> str:
    """A POSIX user name (portable characters; not starting with `-`, where ssh would read an
    option)."""
    if not isinstance(value, str) or not _USER.fullmatch(value):  # (`user: 0700` reads as 448)
        raise ValueError("")
    return value


def _remote_path(value: Any) -> str:
    """A path on the node, passed to its journalctl quoted (a `$` in it is a `$`: nothing
    expands it): absolute, and nothing unprintable."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError("")
    if not value.isprintable():
        raise ValueError("")
    return value


def _unit(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("")
    unit = value if "." in value else value + ".service"
    if len(unit) > 255 or not _UNIT.fullmatch(unit):
        raise ValueError("")
    return unit


MAX_KINDS = 8
MAX_ALLOWANCE_S = 7 * 86_400


def _slots(value: Any) -> int:
    if _positive_int(value) > MAX_SLOTS:
        raise ValueError("")
    return int(value)


def _allowance(value: Any) -> int:
    if _positive_int(value) > MAX_ALLOWANCE_S:
        raise ValueError("")
    return int(value)


MAX_START_TIMEOUT_S = 7 * 86_400
MAX_POLL_S = 3600


def _timeout(value: Any) -> int:
    if _positive_int(value) > MAX_START_TIMEOUT_S:
        raise ValueError("")
    return int(value)


def _share(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ValueError("")
    return float(value)


def _poll(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("")
    if not 0.1 <= value <= MAX_POLL_S:
        raise ValueError("")
    return float(value)


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError("")
    return value


def as_count(value: Any) -> int:
    """An integer 0 or more (not a bool); ValueError else (a Checker.get kind)."""
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


def as_bool(value: Any) -> bool:
    """true or false; ValueError else (a Checker.get kind)."""
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
    if not all(math.isfinite(b * 1_000_000) for b in out):  # 1.0e+308 s: no microseconds
        raise ValueError("")
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
    for t in config.init_timelines:
        dump = "" if t.dump is None else f", dump {t.dump}"
        yield f"node {t.name}: init-timeline {t.path}{dump} (every {t.poll_seconds:g} s)"
