"""Config: every problem at once with file, line and key path; good configs to frozen dataclasses;
config.example.yaml documents every accepted key; check-config and run refuse bad files."""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
import yaml

from exporter.accounting.accounting import DEFAULT_BUCKETS_S
from exporter.base.kinds import DEFAULT_RULES, KindRule, Kinds
from exporter.cli import SERVICE_CREDENTIALS
from exporter.config.config import (
    ALL_SOURCES,
    KIND_KEYS,
    NODE_KEYS,
    TOP_KEYS,
    Config,
    ConfigError,
    FileNode,
    JournalNode,
    SshNode,
    load,
    parse,
)
from exporter.daemon import daemon
from exporter.sources import registry as sources

from support.cli import Cli
from support.configs import FILE_NODE, PARSE_DEADLINE_S, ROOT, SRC, good
from support.tools import deadline
from support.tools import yaml_text as y

EXAMPLE = ROOT / "config.example.yaml"


NOW_US = 1_790_078_400_000_000  # 2026-09-22T12:00:00Z


def problems(
    text: str, env: Mapping[str, str] | None = None, available: frozenset[str] = ALL_SOURCES
) -> list[str]:
    with deadline(PARSE_DEADLINE_S), pytest.raises(ConfigError) as e:
        parse(text, SRC, env if env is not None else {}, available)
    assert e.value.source == SRC
    assert str(e.value).startswith(f"{SRC}: {len(e.value.problems)} problem(s):\n")
    return e.value.problems


def ssh_key(key: str, value: str) -> str:
    """An ssh node with `key: value` on line 5."""
    return y("nodes:", "  - name: a", "    source: ssh", "    host: h", f"    {key}: {value}")


BAD: list[tuple[str, str, list[str]]] = [
    (
        "unknown-top-key-near-miss",
        y("max_request_secnds: 600", *FILE_NODE),
        [
            "cfg.yaml:1: max_request_secnds: unknown key 'max_request_secnds' (did you mean 'max_request_seconds'?)"
        ],
    ),
    (
        "unknown-top-key-no-near-miss",
        y("colour: blue", *FILE_NODE),
        ["cfg.yaml:1: colour: unknown key 'colour'"],
    ),
    (
        "unknown-node-key-near-miss",
        ssh_key("prot", "22"),
        ["cfg.yaml:5: nodes[0].prot: unknown key 'prot' (did you mean 'port'?)"],
    ),
    (
        "unknown-node-key-no-near-miss",
        ssh_key("colour", "red"),
        ["cfg.yaml:5: nodes[0].colour: unknown key 'colour'"],
    ),
    (
        "key-of-another-source",
        y("nodes:", "  - name: a", "    source: file", "    path: /x", "    host: h"),
        ["cfg.yaml:5: nodes[0].host: unknown key 'host'"],
    ),
    (
        "unknown-kind-key-near-miss",
        y("kinds:", "  - name: a", "    min_token: 5", *FILE_NODE),
        ["cfg.yaml:3: kinds[0].min_token: unknown key 'min_token' (did you mean 'min_tokens'?)"],
    ),
    (
        "inline-password-in-node",
        ssh_key("password", "hunter2"),
        [
            "cfg.yaml:5: nodes[0].password: secrets are never inline: use password_file or password_env (a key's passphrase: passphrase_file or passphrase_env)"
        ],
    ),
    (
        "inline-secret-top-level-any-case",
        y(*FILE_NODE, "Passphrase: hunter2"),
        [
            "cfg.yaml:3: Passphrase: secrets are never inline: use password_file or password_env (a key's passphrase: passphrase_file or passphrase_env)"
        ],
    ),
    # kinds
    (
        "kinds-empty-list",
        y("kinds: []", *FILE_NODE),
        ["cfg.yaml:1: kinds: must be a non-empty list of rules, got []"],
    ),
    (
        "kinds-null",
        y("kinds:", *FILE_NODE),
        ["cfg.yaml:1: kinds: must be a non-empty list of rules, got None"],
    ),
    (
        "kind-bad-name",
        y("kinds:", "  - {name: Extraction}", *FILE_NODE),
        [
            "cfg.yaml:2: kinds[0].name: must be a lower-case name (a-z, 0-9, _), not idle or unknown, got 'Extraction'"
        ],
    ),
    (
        "kind-reserved-idle",
        y("kinds:", "  - {name: idle}", *FILE_NODE),
        [
            "cfg.yaml:2: kinds[0].name: must be a lower-case name (a-z, 0-9, _), not idle or unknown, got 'idle'"
        ],
    ),
    (
        "kind-reserved-unknown",
        y("kinds:", "  - {name: big, min_tokens: 9}", "  - name: unknown", *FILE_NODE),
        [
            "cfg.yaml:3: kinds[1].name: must be a lower-case name (a-z, 0-9, _), not idle or unknown, got 'unknown'"
        ],
    ),
    (
        "kind-without-name",
        y("kinds:", "  - {min_tokens: 5}", *FILE_NODE),
        ["cfg.yaml:2: kinds[0]: a kind needs a name"],
    ),
    (
        "kind-min-above-max",
        y("kinds:", "  - name: a", "    min_tokens: 10", "    max_tokens: 5", *FILE_NODE),
        ["cfg.yaml:2: kinds[0]: min_tokens 10 is above max_tokens 5"],
    ),
    (
        "kind-negative-min",
        y("kinds:", "  - name: a", "    min_tokens: -1", *FILE_NODE),
        ["cfg.yaml:3: kinds[0].min_tokens: must be an integer >= 0, got -1"],
    ),
    (
        "kind-boolean-max",
        y("kinds:", "  - name: a", "    max_tokens: true", *FILE_NODE),
        ["cfg.yaml:3: kinds[0].max_tokens: must be an integer >= 0, got True"],
    ),
    (
        "kind-defined-twice",
        y(
            "kinds:",
            "  - {name: a, max_tokens: 5}",
            "  - {name: b, max_tokens: 9}",
            "  - {name: a}",
            *FILE_NODE,
        ),
        ["cfg.yaml:4: kinds[2].name: kind 'a' is defined twice"],
    ),
    # nodes
    (
        "nodes-empty",
        y("nodes: []"),
        ["cfg.yaml:1: nodes: must be a non-empty list of nodes, got []"],
    ),
    (
        "nodes-null",
        y("nodes:"),
        ["cfg.yaml:1: nodes: must be a non-empty list of nodes, got None"],
    ),
    (
        "nodes-a-mapping",
        y("nodes:", "  a: {source: file, path: /x}"),
        [
            "cfg.yaml:1: nodes: must be a non-empty list of nodes, got {'a': {'source': 'file', 'path': '/x'}}"
        ],
    ),
    (
        "node-name-twice",
        y(
            "nodes:",
            "  - {name: a, source: file, path: /x}",
            "  - {name: b, source: journal}",
            "  - {name: a, source: file, path: /y}",
        ),
        ["cfg.yaml:4: nodes[2].name: node 'a' is defined twice"],
    ),
    (
        "node-bad-name",
        y("nodes:", "  - {name: 'a b', source: file, path: /x}"),
        ["cfg.yaml:2: nodes[0].name: must be a name of letters, digits, _ . : -, got 'a b'"],
    ),
    (
        "node-without-name",
        y("nodes:", "  - source: file", "    path: /x"),
        ["cfg.yaml:2: nodes[0]: a node needs a name"],
    ),
    (
        "source-near-miss",
        y("nodes:", "  - name: a", "    source: jornal"),
        [
            "cfg.yaml:3: nodes[0].source: must be one of file, journal, ssh, init-timeline, got 'jornal' (did you mean 'journal'?)"
        ],
    ),
    (
        "source-no-near-miss",
        y("nodes:", "  - {name: a, source: docker}"),
        [
            "cfg.yaml:2: nodes[0].source: must be one of file, journal, ssh, init-timeline, got 'docker'"
        ],
    ),
    (
        "source-missing",
        y("nodes:", "  - {name: a, path: /x}"),
        ["cfg.yaml:2: nodes[0]: a node needs a source: one of file, journal, ssh, init-timeline"],
    ),
    (
        "file-node-without-path",
        y("nodes:", "  - {name: a, source: journal}", "  - {name: b, source: file}"),
        ["cfg.yaml:3: nodes[1]: a file node needs a path"],
    ),
    (
        "ssh-node-without-host",
        y("nodes:", "  - name: a", "    source: ssh", "    port: 22"),
        ["cfg.yaml:2: nodes[0]: an ssh node needs a host"],
    ),
    (
        "password-file-and-env",
        y(
            "nodes:",
            "  - name: a",
            "    source: ssh",
            "    host: h",
            "    password_file: /p",
            "    password_env: NODE_PW",
        ),
        ["cfg.yaml:2: nodes[0]: give password_file or password_env, not both"],
    ),
    (
        "journal-directory-and-files",
        y(
            "nodes:",
            "  - name: a",
            "    source: journal",
            "    directory: /var/log/journal/remote",
            "    files: [/a.journal]",
        ),
        ["cfg.yaml:2: nodes[0]: give directory or files, not both"],
    ),
    (
        "credentials-directory-not-set",
        ssh_key("password_file", "${CREDENTIALS_DIRECTORY}/key"),
        ["cfg.yaml:5: nodes[0].password_file: must be a path ($CREDENTIALS_DIRECTORY is not set)"],
    ),
    (
        "credentials-directory-not-set-journal-directory",
        y(
            "nodes:",
            "  - name: a",
            "    source: journal",
            "    directory: ${CREDENTIALS_DIRECTORY}/j",
        ),
        [
            "cfg.yaml:4: nodes[0].directory: must be a path, got '${CREDENTIALS_DIRECTORY}/j' ($CREDENTIALS_DIRECTORY is not set)"
        ],
    ),
    # A required value that is given but bad must be one problem, not also "needs a ..."
    # (as for `name`).
    (
        "credentials-directory-not-set-file-path",
        y("nodes:", "  - name: a", "    source: file", "    path: ${CREDENTIALS_DIRECTORY}/key"),
        [
            "cfg.yaml:4: nodes[0].path: must be a path, got '${CREDENTIALS_DIRECTORY}/key' ($CREDENTIALS_DIRECTORY is not set)"
        ],
    ),
    (
        "file-path-not-a-string",
        y("nodes:", "  - name: a", "    source: file", "    path: 5"),
        ["cfg.yaml:4: nodes[0].path: must be a path, got 5"],
    ),
    (
        "ssh-host-empty",
        y("nodes:", "  - name: a", "    source: ssh", "    host: ''"),
        ["cfg.yaml:4: nodes[0].host: must be a host name or an IP address, got ''"],
    ),
    (
        "credentials-directory-not-set-in-a-list",
        ssh_key("client_keys", "[/k, $CREDENTIALS_DIRECTORY/id]"),
        [
            "cfg.yaml:5: nodes[0].client_keys: must be a list of paths ($CREDENTIALS_DIRECTORY is not set)"
        ],
    ),
    (
        "node-unit-bad",
        y("nodes:", "  - name: a", "    source: journal", "    unit: 'sm llm'"),
        ["cfg.yaml:4: nodes[0].unit: must be a systemd unit name, got 'sm llm'"],
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [pytest.param(text, exp, id=i) for i, text, exp in BAD],
)
def test_bad_config_lists_each_problem_with_file_line_and_key_path(
    text: str, expected: list[str]
) -> None:
    assert problems(text) == expected


TOP_VALUES: list[tuple[str, str, str]] = [
    ("listen", '"10027"', 'must be "HOST:PORT" or ":PORT" with a port 0..65535, got \'10027\''),
    ("listen", "10027", 'must be "HOST:PORT" or ":PORT" with a port 0..65535, got 10027'),
    ("listen", '":65536"', 'must be "HOST:PORT" or ":PORT" with a port 0..65535, got \':65536\''),
    (
        "listen",
        '"localhost:"',
        'must be "HOST:PORT" or ":PORT" with a port 0..65535, got \'localhost:\'',
    ),
    (
        "listen",
        '"host:http"',
        'must be "HOST:PORT" or ":PORT" with a port 0..65535, got \'host:http\'',
    ),
    ("listen", '":-1"', 'must be "HOST:PORT" or ":PORT" with a port 0..65535, got \':-1\''),
    ("unit", "'sm llm.service'", "must be a systemd unit name, got 'sm llm.service'"),
    ("unit", "sm-llm.servic", "must be a systemd unit name, got 'sm-llm.servic'"),
    ("unit", "'a@b@c.service'", "must be a systemd unit name, got 'a@b@c.service'"),
    ("unit", "'sm/llm'", "must be a systemd unit name, got 'sm/llm'"),
    ("unit", "''", "must be a systemd unit name, got ''"),
    ("unit", "x" * 248, f"must be a systemd unit name, got '{'x' * 56}..."),
    ("unit", "7", "must be a systemd unit name, got 7"),
    ("max_request_seconds", "0", "must be a positive integer, got 0"),
    ("max_request_seconds", "-5", "must be a positive integer, got -5"),
    ("max_request_seconds", "true", "must be a positive integer, got True"),
    ("max_request_seconds", "1.5", "must be a positive integer, got 1.5"),
    ("max_request_seconds", "'600'", "must be a positive integer, got '600'"),
    ("stall_seconds", "0", "must be a positive integer, got 0"),
    ("stall_seconds", "false", "must be a positive integer, got False"),
    (
        "since",
        "-24x",
        "must be now, an ISO 8601 time or a relative time like -24h, got '-24x' (Invalid isoformat string: '-24x')",
    ),
    (
        "since",
        "24h",
        "must be now, an ISO 8601 time or a relative time like -24h, got '24h' (Invalid isoformat string: '24h')",
    ),
    (
        "since",
        "yesterday",
        "must be now, an ISO 8601 time or a relative time like -24h, got 'yesterday' (Invalid isoformat string: 'yesterday')",
    ),
    ("since", "-24", "must be now, an ISO 8601 time or a relative time like -24h, got -24"),
    ("duration_buckets", "[5, 1]", "must be a list of increasing positive seconds, got [5, 1]"),
    (
        "duration_buckets",
        "[1, 2, 2]",
        "must be a list of increasing positive seconds, got [1, 2, 2]",
    ),
    ("duration_buckets", "[]", "must be a list of increasing positive seconds, got []"),
    ("duration_buckets", "[0, 1]", "must be a list of increasing positive seconds, got [0, 1]"),
    (
        "duration_buckets",
        "[1, true]",
        "must be a list of increasing positive seconds, got [1, True]",
    ),
    (
        "duration_buckets",
        "[1, .nan]",
        "must be a list of increasing positive seconds, got [1, nan]",
    ),
    ("duration_buckets", "'1, 2'", "must be a list of increasing positive seconds, got '1, 2'"),
    (  # accepted by check-config once, then `run` crashed on it
        "duration_buckets",
        "[1, 10, .inf]",
        "must be a list of increasing positive seconds, got [1, 10, inf] (+Inf is always there:"
        " list the finite bounds)",
    ),
    (  # the same bound once in whole microseconds: two series of one `le`
        "duration_buckets",
        "[0.0000011, 0.0000012, 1]",
        "must be a list of increasing positive seconds, got [1.1e-06, 1.2e-06, 1]",
    ),
    ("state_dir", "''", "must be a path, got ''"),
    ("state_dir", "[/a]", "must be a path, got ['/a']"),
]


@pytest.mark.parametrize(("key", "value", "message"), TOP_VALUES)
def test_bad_top_level_value(key: str, value: str, message: str) -> None:
    text = y("# comment", f"{key}: {value}", *FILE_NODE)
    assert problems(text) == [f"cfg.yaml:2: {key}: {message}"]


SSH_VALUES: list[tuple[str, str, str]] = [
    ("port", "0", "must be a port 1..65535, got 0"),
    ("port", "65536", "must be a port 1..65535, got 65536"),
    ("port", "-22", "must be a port 1..65535, got -22"),
    ("port", "true", "must be a port 1..65535, got True"),
    ("port", "'22'", "must be a port 1..65535, got '22'"),
    ("keepalive_count_max", "0", "must be a positive integer, got 0"),
    ("keepalive_count_max", "true", "must be a positive integer, got True"),
    ("keepalive_interval", "0", "must be positive seconds, got 0"),
    ("keepalive_interval", "-1.5", "must be positive seconds, got -1.5"),
    ("keepalive_interval", "false", "must be positive seconds, got False"),
    ("verify_host_key", "'yes'", "must be true or false, got 'yes'"),
    ("verify_host_key", "0", "must be true or false, got 0"),
    # never echoed: a password pasted here by mistake must not reach the log
    ("password_env", "1PW", "must be an environment variable name"),
    ("password_env", "'NODE PW'", "must be an environment variable name"),
    (
        "user",
        "''",
        "must be a user name (letters, digits, _ . -; not starting with - or .), got ''",
    ),
    ("client_keys", "/id_ed25519", "must be a list of paths"),
    ("client_keys", "'-----BEGIN OPENSSH PRIVATE KEY-----'", "must be a list of paths"),
    ("password_file", "[hunter2]", "must be a path"),
    ("known_hosts", "[/a]", "must be a path, got ['/a']"),
    ("journal_directory", "'  '", "must be a path on the node, got '  '"),
    ("unit", "sm-llm.d", "must be a systemd unit name, got 'sm-llm.d'"),
]


@pytest.mark.parametrize(("key", "value", "message"), SSH_VALUES)
def test_bad_ssh_node_value(key: str, value: str, message: str) -> None:
    assert problems(ssh_key(key, value)) == [f"cfg.yaml:5: nodes[0].{key}: {message}"]


def test_inline_secret_value_is_never_shown() -> None:
    text = ssh_key("password", "hunter2")
    with deadline(PARSE_DEADLINE_S), pytest.raises(ConfigError) as e:
        parse(text, SRC, {})
    assert "hunter2" not in str(e.value)
    assert "hunter2" not in repr(e.value.args)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param(
            y("listen: ':1'", "nodes:", "  - name: a", "   source: file"), 4, id="indentation"
        ),
        pytest.param(y("listen: ':1'", "nodes: [", "  {name: a"), (3, 4), id="unclosed-flow"),
        pytest.param(y("listen: ':1'", "\tnodes: []"), 2, id="tab"),
        pytest.param(y(*FILE_NODE, "unit: 'sm-llm"), (3, 4), id="unclosed-quote"),
        pytest.param(y(*FILE_NODE, "---", *FILE_NODE), 3, id="two-documents"),
        pytest.param(y(*FILE_NODE, "unit: !!python/name:os.system x"), 3, id="unsafe-tag"),
    ],
)
def test_yaml_syntax_error_names_its_line(text: str, line: int | tuple[int, ...]) -> None:
    # An unclosed quote or bracket is found at the end of the stream (one past the last line);
    # the line where it opened would serve better, so either is accepted there.
    lines = line if isinstance(line, tuple) else (line,)
    found = problems(text)
    assert len(found) == 1
    assert found[0].startswith(tuple(f"cfg.yaml:{n}: not valid YAML: " for n in lines))


# Documents that are not a mapping with `nodes`, and values PyYAML itself would construct into
# something impossible: each must still come back as problems, never hang or raise.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            y("listen: ':1'"),
            [r"cfg\.yaml(:1)?: nodes: must be a non-empty list of nodes, got None"],
            id="nodes-missing",
        ),
        pytest.param(
            "",
            [r"cfg\.yaml(:1)?: nodes: must be a non-empty list of nodes, got None"],
            id="empty-file",
        ),
        pytest.param(
            y("# only a comment"),
            [r"cfg\.yaml(:1)?: nodes: must be a non-empty list of nodes, got None"],
            id="only-comments",
        ),
        pytest.param(
            y("- listen: ':1'", "- nodes: []"),
            [
                re.escape(
                    "cfg.yaml:1: (top): must be a mapping, got [{'listen': ':1'}, {'nodes': []}]"
                )
            ],
            id="top-level-list",
        ),
        pytest.param(
            y("just text"),
            [re.escape("cfg.yaml:1: (top): must be a mapping, got 'just text'")],
            id="top-level-scalar",
        ),
        pytest.param(
            y("nodes:", "  - {name: a, source: [file]}"),
            [
                re.escape(
                    "cfg.yaml:2: nodes[0].source: must be one of file, journal, ssh, init-timeline"
                )
                + ".*"
            ],
            id="source-a-list",
        ),
        pytest.param(
            y(*FILE_NODE, "since: 2026-13-01"),
            [r"cfg\.yaml:3: .*"],
            id="impossible-yaml-date",
        ),
        pytest.param(
            y(*FILE_NODE, "since: 2026-09-22T25:00:00"),
            [r"cfg\.yaml:3: .*"],
            id="impossible-yaml-time",
        ),
    ],
)
def test_malformed_document_is_a_problem(text: str, expected: list[str]) -> None:
    found = problems(text)
    for pattern in expected:
        assert any(re.fullmatch(pattern, p, re.DOTALL) for p in found), (pattern, found)


MANY = y(
    'listen: "10027"',  # 1
    "unit: 'bad unit'",  # 2
    "max_request_secnds: 600",  # 3
    "stall_seconds: 0",  # 4
    "since: -24x",  # 5
    "duration_buckets: [5, 1]",  # 6
    "password: hunter2",  # 7
    "kinds:",  # 8
    "  - {name: idle}",  # 9
    "  - {name: a, min_tokens: 10, max_tokens: 5}",  # 10
    "nodes:",  # 11
    "  - {name: a, source: jornal}",  # 12
    "  - {name: b, source: ssh, host: h, port: 0, password_file: /p, password_env: PW}",  # 13
    "  - {name: b, source: file}",  # 14
    "  - name: c",  # 15
    "    source: journal",  # 16
    "    directory: /d",  # 17
    "    files: [/f]",  # 18
    "    colour: red",  # 19
    "  - {name: d, source: journal, directory: '${CREDENTIALS_DIRECTORY}/j'}",  # 20
)


MANY_PROBLEMS = [
    'cfg.yaml:1: listen: must be "HOST:PORT" or ":PORT" with a port 0..65535, got \'10027\'',
    "cfg.yaml:2: unit: must be a systemd unit name, got 'bad unit'",
    "cfg.yaml:3: max_request_secnds: unknown key 'max_request_secnds' (did you mean 'max_request_seconds'?)",
    "cfg.yaml:4: stall_seconds: must be a positive integer, got 0",
    "cfg.yaml:5: since: must be now, an ISO 8601 time or a relative time like -24h, got '-24x' (Invalid isoformat string: '-24x')",
    "cfg.yaml:6: duration_buckets: must be a list of increasing positive seconds, got [5, 1]",
    "cfg.yaml:7: password: secrets are never inline: use password_file or password_env (a key's passphrase: passphrase_file or passphrase_env)",
    "cfg.yaml:9: kinds[0].name: must be a lower-case name (a-z, 0-9, _), not idle or unknown, got 'idle'",
    "cfg.yaml:10: kinds[1]: min_tokens 10 is above max_tokens 5",
    "cfg.yaml:12: nodes[0].source: must be one of file, journal, ssh, init-timeline, got 'jornal' (did you mean 'journal'?)",
    "cfg.yaml:13: nodes[1]: give password_file or password_env, not both",
    "cfg.yaml:13: nodes[1].port: must be a port 1..65535, got 0",
    "cfg.yaml:14: nodes[2].name: node 'b' is defined twice",
    "cfg.yaml:14: nodes[2]: a file node needs a path",
    "cfg.yaml:15: nodes[3]: give directory or files, not both",
    "cfg.yaml:19: nodes[3].colour: unknown key 'colour'",
    "cfg.yaml:20: nodes[4].directory: must be a path, got '${CREDENTIALS_DIRECTORY}/j' ($CREDENTIALS_DIRECTORY is not set)",
]


def line_of(problem: str) -> int:
    m = re.match(r"cfg\.yaml:(\d+): ", problem)
    assert m, problem
    return int(m.group(1))


def test_every_problem_at_once_sorted_by_line() -> None:
    found = problems(MANY)
    assert len(found) == 17
    assert found == MANY_PROBLEMS
    lines = [line_of(p) for p in found]
    assert lines == sorted(lines)


MIXED = y(
    "listen: nope",
    "nodes:",
    "  - {name: dump0, source: file, path: /x}",
    "  - {name: local, source: journal}",
    "  - {name: node0, source: ssh, host: h, port: 0}",
)


def test_unavailable_sources_are_problems_listed_with_the_rest() -> None:
    assert problems(MIXED, available=frozenset({"file"})) == [
        'cfg.yaml:1: listen: must be "HOST:PORT" or ":PORT" with a port 0..65535, got \'nope\'',
        "cfg.yaml:4: nodes[1].source: source 'journal' is not available in this version (available: file)",
        "cfg.yaml:5: nodes[2].source: source 'ssh' is not available in this version (available: file)",
        "cfg.yaml:5: nodes[2].port: must be a port 1..65535, got 0",
    ]


def test_unavailable_sources_are_the_only_problems_of_an_otherwise_good_config() -> None:
    text = y(
        "nodes:",
        "  - {name: local, source: journal}",
        "  - {name: node0, source: ssh, host: h}",
        "  - {name: dump0, source: file, path: /x}",
    )
    assert len(good(text).nodes) == 3
    assert problems(text, available=frozenset({"file", "ssh"})) == [
        "cfg.yaml:2: nodes[0].source: source 'journal' is not available in this version (available: file, ssh)",
    ]


def test_minimal_config_takes_every_default() -> None:
    assert good(y(*FILE_NODE)) == Config(
        listen_host="",
        listen_port=10027,
        state_dir=Path("/var/lib/sm-llm-exporter"),
        unit="sm-llm.service",
        max_request_seconds=600,
        stall_seconds=300,
        since="now",
        duration_buckets=DEFAULT_BUCKETS_S,
        kinds=Kinds(DEFAULT_RULES),
        nodes=(FileNode("a", Path("/x")),),
    )


def test_node_defaults() -> None:
    text = y(
        "nodes:",
        "  - {name: f, source: file, path: /x}",
        "  - {name: j, source: journal}",
        "  - {name: s, source: ssh, host: 172.31.1.1}",
    )
    assert good(text).nodes == (
        FileNode(name="f", path=Path("/x"), source="file"),
        JournalNode(name="j", unit="sm-llm.service", directory=None, files=(), source="journal"),
        SshNode(
            name="s",
            host="172.31.1.1",
            unit="sm-llm.service",
            port=22,
            user="root",
            known_hosts=Path("/etc/sm-llm-exporter/ssh/known_hosts"),
            verify_host_key=True,
            client_keys=(),
            password_file=None,
            password_env=None,
            journal_directory=None,
            keepalive_interval=15.0,
            keepalive_count_max=3,
            source="ssh",
        ),
    )


FULL = y(
    'listen: "127.0.0.1:9999"',
    "state_dir: ${STATE}/sm",
    "unit: llama",
    "max_request_seconds: 900",
    "stall_seconds: 60",
    "since: -24h",
    "duration_buckets: [0.5, 1, 2.5]",
    "kinds:",
    "  - {name: big, min_tokens: 1000}",
    "  - {name: exact, min_tokens: 10, max_tokens: 10}",
    "  - {name: small_2, max_tokens: 0}",
    "nodes:",
    "  - {name: dump0, source: file, path: /srv/dumps/node0.json}",
    "  - {name: local, source: journal}",
    "  - {name: remote, source: journal, directory: /var/log/journal/remote, unit: other.service}",
    "  - {name: files, source: journal, files: [/a.journal, $STATE/b.journal]}",
    "  - name: node0",
    "    source: ssh",
    "    host: 172.31.1.1",
    "    port: 2222",
    "    user: smllm",
    "    known_hosts: ${CREDENTIALS_DIRECTORY}/known_hosts",
    "    verify_host_key: false",
    "    client_keys: ['${CREDENTIALS_DIRECTORY}/id_ed25519', /k2]",
    "    password_env: NODE_PW",
    "    journal_directory: /var/log/journal/remote",
    "    keepalive_interval: 2.5",
    "    keepalive_count_max: 5",
    "    unit: sm-llm@1",
    "  - {name: '10.0.0.3', source: ssh, host: 10.0.0.3, password_file: $CREDENTIALS_DIRECTORY/pw}",
    "  - {name: n_4, source: ssh, host: n4, user: '0'}",
)


FULL_ENV = {"CREDENTIALS_DIRECTORY": "/run/credentials/sm-llm-exporter.service", "STATE": "/srv"}


CREDS = Path("/run/credentials/sm-llm-exporter.service")


def test_full_config_parses_into_the_dataclasses() -> None:
    assert good(FULL, env=FULL_ENV) == Config(
        listen_host="127.0.0.1",
        listen_port=9999,
        state_dir=Path("/srv/sm"),
        unit="llama.service",
        max_request_seconds=900,
        stall_seconds=60,
        since="-24h",
        duration_buckets=(0.5, 1.0, 2.5),
        kinds=Kinds(
            (
                KindRule("big", min_tokens=1000),
                KindRule("exact", min_tokens=10, max_tokens=10),
                KindRule("small_2", max_tokens=0),
            )
        ),
        nodes=(
            FileNode("dump0", Path("/srv/dumps/node0.json")),
            JournalNode("local", "llama.service"),
            JournalNode("remote", "other.service", directory=Path("/var/log/journal/remote")),
            JournalNode(
                "files", "llama.service", files=(Path("/a.journal"), Path("/srv/b.journal"))
            ),
            SshNode(
                name="node0",
                host="172.31.1.1",
                unit="sm-llm@1.service",
                port=2222,
                user="smllm",
                known_hosts=CREDS / "known_hosts",
                verify_host_key=False,
                client_keys=(CREDS / "id_ed25519", Path("/k2")),
                password_env="NODE_PW",
                journal_directory="/var/log/journal/remote",
                keepalive_interval=2.5,
                keepalive_count_max=5,
            ),
            # (the default known_hosts, with $CREDENTIALS_DIRECTORY set: the service's)
            SshNode(
                "10.0.0.3",
                "10.0.0.3",
                "llama.service",
                known_hosts=CREDS / "ssh_known_hosts",
                password_file=CREDS / "pw",
            ),
            SshNode("n_4", "n4", "llama.service", user="0", known_hosts=CREDS / "ssh_known_hosts"),
        ),
    )


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [
        (":10027", "", 10027),
        (":0", "", 0),
        ("127.0.0.1:9100", "127.0.0.1", 9100),
        ("0.0.0.0:65535", "0.0.0.0", 65535),
        ("[::1]:10027", "::1", 10027),
        ("[::]:80", "::", 80),
        ("localhost:8080", "localhost", 8080),
    ],
)
def test_listen_forms(listen: str, host: str, port: int) -> None:
    cfg = good(y(f"listen: '{listen}'", *FILE_NODE))
    assert (cfg.listen_host, cfg.listen_port) == (host, port)


@pytest.mark.parametrize(
    ("unit", "expected"),
    [
        ("sm-llm", "sm-llm.service"),
        ("sm-llm.service", "sm-llm.service"),
        ("sm-llm@0", "sm-llm@0.service"),
        ("sm-llm@0.service", "sm-llm@0.service"),
        ("llama.socket", "llama.socket"),
        ("a:b_c\\x2dd", "a:b_c\\x2dd.service"),
        ("x" * 247, "x" * 247 + ".service"),
    ],
)
def test_unit_names(unit: str, expected: str) -> None:
    text = y(f"unit: '{unit}'", "nodes:", "  - {name: j, source: journal}")
    cfg = good(text)
    assert cfg.unit == expected
    assert isinstance(cfg.nodes[0], JournalNode)
    assert cfg.nodes[0].unit == expected


def utc_us(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return round(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()) * 10**6


SINCE: list[tuple[str, type, str, int]] = [
    ("now", str, "now", NOW_US),
    ("-30s", str, "-30s", NOW_US - 30_000_000),
    ("-15m", str, "-15m", NOW_US - 15 * 60_000_000),
    ("-24h", str, "-24h", NOW_US - 24 * 3_600_000_000),
    ("-7d", str, "-7d", NOW_US - 7 * 86_400_000_000),
    ("'2026-09-22T07:32:55'", str, "2026-09-22T07:32:55", utc_us(2026, 9, 22, 7, 32, 55)),
    (
        "'2026-09-22T09:32:55+02:00'",
        str,
        "2026-09-22T09:32:55+02:00",
        utc_us(2026, 9, 22, 7, 32, 55),
    ),
    (
        "'2026-09-22T07:32:55.127792Z'",
        str,
        "2026-09-22T07:32:55.127792Z",
        utc_us(2026, 9, 22, 7, 32, 55) + 127_792,
    ),
    # unquoted: plain YAML would make datetime (or date) objects; the config keeps the text
    ("2026-09-22 07:32:55", datetime, "2026-09-22 07:32:55", utc_us(2026, 9, 22, 7, 32, 55)),
    (
        "2026-09-22T09:32:55+02:00",
        datetime,
        "2026-09-22T09:32:55+02:00",
        utc_us(2026, 9, 22, 7, 32, 55),
    ),
    (
        "2026-09-22T07:32:55.5Z",
        datetime,
        "2026-09-22T07:32:55.5Z",
        utc_us(2026, 9, 22, 7, 32, 55) + 500_000,
    ),
    ("2026-09-22", date, "2026-09-22", utc_us(2026, 9, 22)),
]


@pytest.mark.parametrize(("value", "yaml_type", "since", "us"), SINCE)
def test_since_forms(value: str, yaml_type: type, since: str, us: int) -> None:
    assert type(yaml.safe_load(f"v: {value}")["v"]) is yaml_type
    cfg = good(y(f"since: {value}", *FILE_NODE))
    assert cfg.since == since
    assert cfg.since_us(NOW_US) == us


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"CREDENTIALS_DIRECTORY": "/run/credentials/x.service"}, "/run/credentials/x.service/key"),
        ({}, None),
    ],
    ids=["set", "not-set"],
)
def test_credentials_directory_comes_from_the_env_given_to_parse(
    env: dict[str, str], expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", "/from/os/environ")
    text = ssh_key("password_file", "${CREDENTIALS_DIRECTORY}/key")
    if expected is None:
        [found] = problems(text, env=env)
        assert found.startswith("cfg.yaml:5: nodes[0].password_file: ")
        assert "$CREDENTIALS_DIRECTORY is not set" in found
    else:
        [node] = good(text, env=env).nodes
        creds = Path(env["CREDENTIALS_DIRECTORY"])
        assert node == SshNode(
            "a",
            "h",
            "sm-llm.service",
            password_file=Path(expected),
            known_hosts=creds / "ssh_known_hosts",  # (the default, under the service)
        )


@pytest.mark.parametrize(
    ("obj", "attribute", "value"),
    [
        (Config(), "listen_port", 1),
        (Config(), "nodes", ()),
        (FileNode("a", Path("/x")), "path", Path("/y")),
        (JournalNode("a", "u.service"), "unit", "v.service"),
        (SshNode("a", "h", "u.service"), "port", 2222),
        (SshNode("a", "h", "u.service"), "client_keys", (Path("/k"),)),
    ],
    ids=["Config", "Config.nodes", "FileNode", "JournalNode", "SshNode", "SshNode.client_keys"],
)
def test_config_dataclasses_are_frozen(obj: object, attribute: str, value: object) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, attribute, value)


def test_load_reads_the_file_and_names_it(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(y("stall_seconds: 0", *FILE_NODE), encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load(path, env={})
    assert e.value.problems == [f"{path}:1: stall_seconds: must be a positive integer, got 0"]


EXAMPLE_TEXT = EXAMPLE.read_text(encoding="utf-8")


ACCEPTED = sorted(
    {("top", k) for k in TOP_KEYS}
    | {(f"node[{source}]", k) for source, keys in NODE_KEYS.items() for k in keys}
    | {("kind", k) for k in KIND_KEYS}
)


@pytest.mark.parametrize(("where", "key"), ACCEPTED, ids=[f"{w}.{k}" for w, k in ACCEPTED])
def test_example_mentions_every_accepted_key(where: str, key: str) -> None:
    assert re.search(rf"(?<![\w$]){re.escape(key)}(?!\w)", EXAMPLE_TEXT), (
        f"{where} key {key!r} is accepted by exporter.config.config but not documented in "
        f"config.example.yaml"
    )


@pytest.mark.parametrize("source", sorted(ALL_SOURCES))
def test_example_documents_every_source(source: str) -> None:
    assert f"source: {source}" in EXAMPLE_TEXT


def test_example_sets_every_top_level_key_to_its_default() -> None:
    data = yaml.safe_load(EXAMPLE_TEXT)
    assert set(data) == TOP_KEYS
    cfg = good(EXAMPLE_TEXT)
    assert dataclasses.replace(cfg, nodes=()) == Config()


def _show_default(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


SSH_DEFAULTS = [
    (f.name, _show_default(f.default))
    for f in dataclasses.fields(SshNode)
    if f.name != "source" and f.default not in (dataclasses.MISSING, None, ())
]


@pytest.mark.parametrize(("key", "default"), SSH_DEFAULTS)
def test_example_gives_the_ssh_defaults(key: str, default: str) -> None:
    assert f"{key}: {default}" in EXAMPLE_TEXT


def test_example_commented_nodes_are_valid_once_uncommented() -> None:
    text, n = re.subn(r"(?m)^(\s*)# (- \{.*\})\s*$", r"\1\2", EXAMPLE_TEXT)
    assert n >= 2
    cfg = good(text)
    assert {n.source for n in (*cfg.nodes, *cfg.init_timelines)} == ALL_SOURCES


EXAMPLE_DUMP_LINE = EXAMPLE_TEXT.splitlines().index("    path: /srv/dumps/node0.json") + 1


def test_check_config_on_the_example_finds_only_its_placeholder_dump(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its form is valid; of the paths it names, only the example dump is not there: a
    warning (the daemon waits for a dump to appear), so it is valid."""
    monkeypatch.chdir(ROOT)
    code, out, err = cli("check-config", "config.example.yaml")
    assert code == 0 and out.startswith("config.example.yaml: valid, ")
    warnings = [line.split(" WARNING exporter.cli: ", 1)[1] for line in err.splitlines()]
    assert warnings == [
        f"config.example.yaml:{EXAMPLE_DUMP_LINE}: nodes[0].path: /srv/dumps/node0.json "
        "does not exist yet: the daemon waits for it",
    ]


def test_check_config_good_file(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(
        y(
            "nodes:",
            "  - {name: a, source: file, path: /etc/passwd}",
            "  - {name: b, source: file, path: /etc/group}",
        ),
        encoding="utf-8",
    )
    code, out, err = cli("check-config", str(path))
    assert code == 0, err
    assert (
        out == f"{path}: valid, 2 node(s)\n  node a: file /etc/passwd\n  node b: file /etc/group\n"
    )
    assert err == ""


def test_check_config_bad_file_prints_every_problem_on_stderr(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    path = tmp_path / "bad.yaml"
    path.write_text(MANY, encoding="utf-8")
    code, out, err = cli("check-config", str(path))
    assert code == 1
    assert out == ""
    # the CLI checks against the sources the daemon can follow: more problems than MANY_PROBLEMS
    # when some source is not available
    # ... and reads an unset ${CREDENTIALS_DIRECTORY} as the service will see it
    service_env = {**os.environ, "CREDENTIALS_DIRECTORY": SERVICE_CREDENTIALS}
    expected = [
        p.replace("cfg.yaml", str(path), 1)
        for p in problems(MANY, env=service_env, available=sources.AVAILABLE)
    ]
    assert set(MANY_PROBLEMS[:-1]) <= {p.replace(str(path), "cfg.yaml", 1) for p in expected}
    assert "CREDENTIALS_DIRECTORY is not set" in MANY_PROBLEMS[-1]
    # in one list with them, in the order of their lines: the problems of the paths it names
    printed = [line for line in err.splitlines() if line.startswith(f"{path}:")]
    assert f"{path}: {len(printed)} problem(s):" in err
    assert [p for p in printed if p in expected] == expected
    of_paths = [p for p in printed if p not in expected]
    assert f"{path}:17: nodes[3].directory: /d does not exist" in of_paths
    lines = [int(p[len(f"{path}:") :].split(":", 1)[0]) for p in printed]
    assert lines == sorted(lines)
    assert "hunter2" not in err


CREDENTIALS_NODE = y(
    "nodes:",
    "  - name: a",
    "    source: ssh",
    "    host: h",
    "    known_hosts: ${CREDENTIALS_DIRECTORY}/ssh_known_hosts",
)


@pytest.mark.parametrize("level", [None, "warning"])
def test_check_config_from_a_shell_reads_credentials_as_the_service_will(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: str | None
) -> None:
    """systemd sets $CREDENTIALS_DIRECTORY in the service only: checked from a shell, a config
    written for the service is valid, and says how it was read (an INFO line, which
    `--log-level warning`, given after the command, silences)."""
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    path = tmp_path / "c.yaml"
    path.write_text(CREDENTIALS_NODE, encoding="utf-8")
    code, out, err = cli("check-config", str(path), *(["--log-level", level] if level else []))
    # valid; and its credential is followed to the file the unit hands over, not there here
    assert code == 1 and out == "", err
    assert (
        f"{path}:5: nodes[0].known_hosts: {SERVICE_CREDENTIALS}/ssh_known_hosts comes from "
        "/etc/sm-llm-exporter/ssh/known_hosts, which does not exist"
    ) in err
    said = f"read as the service's, {SERVICE_CREDENTIALS}" in err
    assert said == (level is None), err
    # `run` is the service: there the variable must be set
    code, _, err = cli("run", "--config", str(path))
    assert code == 1
    assert "$CREDENTIALS_DIRECTORY is not set" in err


# a valid node of each source kind
NODE_OF = {
    "file": "{name: a, source: file, path: /etc/passwd}",  # (any regular file)
    "journal": "{name: a, source: journal}",
    "ssh": "{name: a, source: ssh, host: h, known_hosts: /etc/passwd}",  # (any regular file)
    "init-timeline": "{name: a, source: init-timeline, path: /tmp}",
}


UNAVAILABLE = sorted(ALL_SOURCES - sources.AVAILABLE)


def test_node_of_covers_every_source() -> None:
    assert set(NODE_OF) == ALL_SOURCES
    assert sources.AVAILABLE <= ALL_SOURCES


@pytest.mark.parametrize("source", sorted(ALL_SOURCES))
def test_check_config_refuses_sources_the_daemon_cannot_follow(
    cli: Cli, tmp_path: Path, source: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(y("nodes:", f"  - {NODE_OF[source]}"), encoding="utf-8")
    code, _, err = cli("check-config", str(path))
    if source in sources.AVAILABLE:
        assert code == 0, err
    else:
        assert code == 1
        assert f"{path}:2: nodes[0].source: source {source!r} is not available" in err


def _latin1(d: Path) -> Path:
    path = d / "latin1.yaml"
    path.write_bytes(b"unit: \xe9\n")
    return path


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda d: d / "missing.yaml", "No such file or directory"),
        (lambda d: d, "Is a directory"),
        (_latin1, "can't decode"),
    ],
    ids=["missing", "directory", "not-utf-8"],
)
def test_check_config_unreadable_file(
    cli: Cli, tmp_path: Path, make: Callable[[Path], Path], reason: str
) -> None:
    path = make(tmp_path)
    code, out, err = cli("check-config", str(path))
    assert code == 1
    assert out == ""
    assert f"{path}: cannot read: " in err
    assert reason in err


@pytest.fixture
def fake_daemon(monkeypatch: pytest.MonkeyPatch) -> list[Config]:
    """daemon.Daemon replaced by a stand-in that records its config and returns at once."""
    made: list[Config] = []

    class FakeDaemon:
        def __init__(self, config: Config, **options: object) -> None:
            made.append(config)

        async def run_until_signalled(self) -> None:
            return None

    monkeypatch.setattr(daemon, "Daemon", FakeDaemon)
    return made


def test_run_with_a_good_config_starts_the_daemon(
    cli: Cli, tmp_path: Path, fake_daemon: list[Config]
) -> None:
    """The control for the test below: `run` does go through daemon.Daemon."""
    path = tmp_path / "good.yaml"
    path.write_text(y(*FILE_NODE), encoding="utf-8")
    code, _, err = cli("run", "--config", str(path))
    assert code == 0, err
    assert fake_daemon == [Config(nodes=(FileNode("a", Path("/x")),))]
    assert f"starting with {path}" in err


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(MANY, id="bad"),
        pytest.param(None, id="missing"),
        *(
            pytest.param(y("nodes:", f"  - {NODE_OF[s]}"), id=f"unavailable-{s}")
            for s in UNAVAILABLE
        ),
    ],
)
def test_run_with_a_bad_config_exits_1_without_starting(
    cli: Cli, tmp_path: Path, fake_daemon: list[Config], content: str | None
) -> None:
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    t0 = time.monotonic()
    code, out, err = cli("run", "--config", str(path))
    assert time.monotonic() - t0 < 2.0
    assert code == 1
    assert out == ""
    assert fake_daemon == []
    assert f"ERROR exporter.cli: {path}: " in err
    assert "starting" not in err


def test_check_config_names_an_init_timeline_path_it_cannot_check(cli: Cli, tmp_path: Path) -> None:
    """A path too long to stat, or missing, is a problem named by its key (not a traceback);
    a dump beside a run directory is checked as a file."""
    path = tmp_path / "c.yaml"
    long = "/" + "a" * 300 + "/run"
    path.write_text(
        y(
            "nodes:",
            "  - {name: a, source: file, path: /etc/passwd}",
            f"  - {{name: t, source: init-timeline, path: {long}}}",
            f"  - {{name: u, source: init-timeline, path: {tmp_path}, dump: {tmp_path}}}",
        ),
        encoding="utf-8",
    )
    code, _, err = cli("check-config", str(path))
    assert code == 1 and "Traceback" not in err
    assert f"{path}:3: nodes[1].path: " in err
    assert f"{path}:4: nodes[2].dump: {tmp_path} is a directory" in err
