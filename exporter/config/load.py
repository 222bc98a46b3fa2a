"""A config file read and checked into a Config: every problem listed at once, each at its line."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

from exporter.base.kinds import DEFAULT_RULES, KindRule, Kinds
from exporter.config.checker import Checker
from exporter.config.document import document, read_text
from exporter.config.errors import ConfigError
from exporter.config.redact import key_shown, show
from exporter.config.schema import DEFAULTS, KIND_KEYS, MAX_KINDS, TOP_KEYS, Config
from exporter.config.values import (
    MAX_ALLOWANCE_S,
    MAX_START_TIMEOUT_S,
    as_allowance,
    as_bool,
    as_buckets,
    as_count,
    as_kind_name,
    as_node_name,
    as_positive_int,
    as_share,
    as_since,
    as_slots,
    as_start_timeout,
    as_unit,
    listen_address,
)
from exporter.parse.tokens import MAX_SLOTS
from exporter.sources.inittimeline import InitTimelineNode
from exporter.sources.kind import Needs, NodeEntry
from exporter.sources.registry import (
    ALL_SOURCES,
    ANY_NODE_KEY,
    KINDS,
    AnyNode,
    NodeConfig,
    describe,
)
from exporter.sources.remote import (
    HOST,
    RemoteHosts,
    check_seen,
    describe_seen,
    is_hosts_seen,
)

_POSITIVE = "must be a positive integer"
_PATH = None  # (a setting's kind: a path, read by the checker with its environment)
# The top-level settings read one by one, in this order (problems on one line keep it): the key
# (a field of Config), the check of its value, what the value must be.
_SETTINGS: tuple[tuple[str, Callable[[Any], Any] | None, str], ...] = (
    ("http_max_connections", as_positive_int, _POSITIVE),
    ("state_dir", _PATH, "must be a path"),
    ("max_request_seconds", as_positive_int, _POSITIVE),
    ("stall_seconds", as_positive_int, _POSITIVE),
    ("since", as_since, "must be now, an ISO 8601 time or a relative time like -24h"),
    ("duration_buckets", as_buckets, "must be a list of increasing positive seconds"),
    ("prompt_duration_buckets", as_buckets, "must be a list of increasing positive seconds"),
    ("generation_duration_buckets", as_buckets, "must be a list of increasing positive seconds"),
    ("histograms_per_node", as_bool, "must be true or false"),
    ("slots", as_slots, f"must be an integer 1..{MAX_SLOTS}"),
    (
        "clock_allowance_seconds",
        as_allowance,
        f"must be an integer 1..{MAX_ALLOWANCE_S} (seconds)",
    ),
    (
        "start_timeout_seconds",
        as_start_timeout,
        f"must be an integer 1..{MAX_START_TIMEOUT_S} (the unit's TimeoutStartSec)",
    ),
    ("slow_start_share", as_share, "must be a number above 0 and at most 1"),
)


def load(
    path: Path, env: Mapping[str, str] = os.environ, available: frozenset[str] = ALL_SOURCES
) -> Config:
    """Read and check `path`; ConfigError lists every problem found. `available`: the kinds of
    source the running program can follow (the others are problems too)."""
    return parse(read_text(path), str(path), env, available)


def parse(
    text: str,
    source: str = "<config>",
    env: Mapping[str, str] = os.environ,
    available: frozenset[str] = ALL_SOURCES,
) -> Config:
    """A config's text checked; ConfigError lists every problem found."""
    data, checker = document(text, source, env)
    config = config_of(data, checker, available)
    if checker.problems:
        raise ConfigError(source, checker.problems)
    return config


def config_of(data: Any, checker: Checker, available: frozenset[str] = ALL_SOURCES) -> Config:
    """The config a document's value (`document`) says, its problems into `checker` (a setting
    with a problem at its default)."""
    top = checker.mapping(data, "", TOP_KEYS)
    d = DEFAULTS
    host, port = checker.get(
        top,
        "listen",
        "",
        listen_address,
        (d.listen_host, d.listen_port),
        'must be "HOST:PORT" or ":PORT" with a port 0..65535',
    )
    unit = checker.get(top, "unit", "", as_unit, d.unit, "must be a systemd unit name")
    settings = {
        key: checker.get(top, key, "", kind or checker.path, getattr(d, key), what)
        for key, kind, what in _SETTINGS
    }
    kinds = _kinds(checker, top.get("kinds")) if "kinds" in top else d.kinds
    nodes, timelines, seen, names = _nodes(checker, top.get("nodes"), unit, available)
    return Config(
        listen_host=host,
        listen_port=port,
        unit=unit,
        **settings,
        kinds=kinds,
        nodes=nodes,
        init_timelines=timelines,
        hosts_seen=seen,
        node_order=names,
        web_config_file=checker.get(
            top, "web_config_file", "", checker.path, d.web_config_file, "must be a path"
        ),
    )


def _kinds(checker: Checker, value: Any) -> Kinds:
    if not isinstance(value, list) or not value:
        checker.problem("kinds", f"must be a non-empty list of rules, got {show(value)}")
        return Kinds(DEFAULT_RULES)
    rules: list[KindRule] = []
    names: set[str] = set()
    for i, item in enumerate(value):
        rule = _kind(checker, f"kinds[{i}]", item)
        if rule is not None:
            if rule.name in names:
                checker.problem(f"kinds[{i}].name", f"kind {rule.name!r} is defined twice")
            names.add(rule.name)
            rules.append(rule)
    if len(rules) > MAX_KINDS:
        checker.problem("kinds", f"at most {MAX_KINDS} kinds, got {len(rules)}")
        return Kinds(DEFAULT_RULES)
    return Kinds(tuple(rules)) if rules else Kinds(DEFAULT_RULES)


def _kind(checker: Checker, path: str, item: Any) -> KindRule | None:
    """One rule of `kinds:` (None when it has no valid name)."""
    k = checker.mapping(item, path, KIND_KEYS)
    name = checker.get(
        k,
        "name",
        path,
        as_kind_name,
        None,
        "must be a lower-case name (a-z, 0-9, _), not idle or unknown",
    )
    lo = checker.get(k, "min_tokens", path, as_count, None, "must be an integer >= 0")
    hi = checker.get(k, "max_tokens", path, as_count, None, "must be an integer >= 0")
    if "name" not in k:
        checker.problem(path, "a kind needs a name")
    if lo is not None and hi is not None and lo > hi:
        checker.problem(path, f"min_tokens {lo} is above max_tokens {hi}")
    return KindRule(name, lo, hi) if name is not None else None


def _nodes(
    checker: Checker, value: Any, unit: str, available: frozenset[str]
) -> tuple[
    tuple[NodeConfig, ...], tuple[InitTimelineNode, ...], tuple[RemoteHosts, ...], tuple[str, ...]
]:
    """The journal nodes, the init-timeline nodes, the `hosts: seen` entries, and every node's
    name by its place in the list ("" for one without a valid name)."""
    if not isinstance(value, list) or not value:
        checker.problem("nodes", f"must be a non-empty list of nodes, got {show(value)}")
        return (), (), (), ()
    nodes: list[NodeConfig] = []
    timelines: list[InitTimelineNode] = []
    groups: list[RemoteHosts] = []
    names: list[str] = []
    seen: set[str] = set()
    claimed: dict[Hashable, str] = {}  # what a node reads that no other may, and which node
    for i, item in enumerate(value):
        name, node = _node(checker, f"nodes[{i}]", item, unit, available, seen)
        names.append(name)
        if name:
            seen.add(name)
        _claim(checker, f"nodes[{i}]", node, claimed)
        if isinstance(node, InitTimelineNode):
            timelines.append(node)
        elif isinstance(node, RemoteHosts):
            groups.append(node)
        elif node is not None:
            nodes.append(node)
    return tuple(nodes), tuple(timelines), tuple(groups), tuple(names)


def _node(
    checker: Checker, path: str, item: Any, unit: str, available: frozenset[str], seen: set[str]
) -> tuple[str, AnyNode | RemoteHosts | None]:
    """One node of `nodes:`: its name ("" when it has no valid one) and the node, checked by its
    kind (None when it cannot be used); `seen`: the names before it."""
    source = item.get("source") if isinstance(item, dict) else None
    kind = KINDS.get(source) if isinstance(source, str) else None
    if kind is None:
        _no_source(checker, item, path, source)
        return "", None
    if kind.source not in available:
        checker.problem(
            f"{path}.source",
            f"source {kind.source!r} is not available in this installation"
            f"{_needs(kind.needs)} (available: {', '.join(sorted(available))})",
        )
    n = checker.mapping(item, path, kind.keys)
    pattern = is_hosts_seen(item)
    name = checker.get(
        n,
        "name",
        path,
        _name_pattern if pattern else as_node_name,
        None,
        f'must be a name of letters, digits, _ . : - and {HOST}, quoted ("{HOST}")'
        if pattern
        else "must be a name of letters, digits, _ . : -",
    )
    if name is None:
        if "name" not in n:
            checker.problem(path, "a node needs a name")
        return "", None
    if name in seen:
        checker.problem(f"{path}.name", f"node {name!r} is defined twice")
    entry = NodeEntry(name, n, unit)
    if is_hosts_seen(item):
        return name, check_seen(checker, path, entry)
    return name, kind.check(checker, path, entry)


def _name_pattern(value: Any) -> str:
    """A `hosts: seen` entry's name: a node's name with `{host}` in it (checked by its kind)."""
    if not isinstance(value, str):
        raise ValueError("")
    as_node_name(value.replace(HOST, "host"))
    return value


def _claim(
    checker: Checker, path: str, node: AnyNode | RemoteHosts | None, claimed: dict[Hashable, str]
) -> None:
    """A problem when `node` reads what a node before it reads (one host of a collector's
    directory twice would count its entries twice)."""
    if isinstance(node, RemoteHosts):  # (every host of its directory not listed by a node)
        claim: Hashable = (node.source, str(node.directory), node.unit, None)
    else:
        claims = None if node is None else KINDS[node.source].claims
        if node is None or claims is None:
            return
        claim = claims(node)
    if claim in claimed:
        what = describe(node) if not isinstance(node, RemoteHosts) else describe_seen(node)
        checker.problem(path, f"it reads what node {claimed[claim]!r} reads: {what}")
    else:
        claimed[claim] = node.name


def _no_source(checker: Checker, item: Any, path: str, source: Any) -> None:
    """A node without a `source:` one of KINDS: that, and its unknown keys (of every kind's), so
    a misspelled `souce:` is named as what it is."""
    given = isinstance(item, dict) and "source" in item
    if isinstance(item, dict):
        checker.mapping(item, path, ANY_NODE_KEY)
        if not given and _misspelled_source(item):
            return  # (its unknown key says: did you mean 'source'?)
    elif item is not None:
        checker.mapping(item, path, ANY_NODE_KEY)  # (must be a mapping)
        return
    choices = ", ".join(KINDS)
    if given:
        near = difflib.get_close_matches(str(source), sorted(KINDS), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        checker.problem(f"{path}.source", f"must be one of {choices}, got {show(source)}{hint}")
    else:
        checker.problem(path, f"a node needs a source: one of {choices}")


def _misspelled_source(item: dict[Any, Any]) -> bool:
    """Whether an unknown key of a node is `source` misspelled (its problem says so)."""
    allowed = sorted(ANY_NODE_KEY)
    return any(
        difflib.get_close_matches(str(key), allowed, n=1) == ["source"]
        for key in item
        if key not in ANY_NODE_KEY and key_shown(key)
    )


def _needs(needs: Needs | None) -> str:
    """What an unavailable kind needs installed, as a problem says it."""
    return f": {needs.install}" if needs is not None else ""
