"""A config read whole (`load`, `parse`): every problem at once with its file, line and key path,
in the order of the lines; a good config into the frozen dataclasses, every node's defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.base.kinds import KindRule, Kinds
from exporter.config.errors import ConfigError
from exporter.config.load import load, parse
from exporter.config.schema import Config
from exporter.sources.file import FileNode
from exporter.sources.journal import JournalNode
from exporter.sources.ssh import SshNode

from support.configs import (
    FILE_NODE,
    MANY,
    MANY_PROBLEMS,
    PARSE_DEADLINE_S,
    SRC,
    good,
    problems,
    ssh_key,
)
from support.tools import deadline
from support.tools import yaml_text as y

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
            "cfg.yaml:3: nodes[0].source: must be one of file, journal, journal-remote, ssh, init-timeline, got 'jornal' (did you mean 'journal'?)"
        ],
    ),
    (
        "source-no-near-miss",
        y("nodes:", "  - {name: a, source: docker}"),
        [
            "cfg.yaml:2: nodes[0].source: must be one of file, journal, journal-remote, ssh, init-timeline, got 'docker'"
        ],
    ),
    (
        "source-missing",
        y("nodes:", "  - {name: a, path: /x}"),
        [
            "cfg.yaml:2: nodes[0]: a node needs a source: one of file, journal, journal-remote, ssh, init-timeline"
        ],
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


JOURNAL_NEEDS = (
    "source 'journal' is not available in this installation: the journal source needs "
    "systemd-python: pip install 'sm-llm-exporter[journal]'"
)
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
        f"cfg.yaml:4: nodes[1].source: {JOURNAL_NEEDS} (available: file)",
        "cfg.yaml:5: nodes[2].source: source 'ssh' is not available in this installation "
        "(available: file)",
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
        f"cfg.yaml:2: nodes[0].source: {JOURNAL_NEEDS} (available: file, ssh)",
    ]


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


def test_load_reads_the_file_and_names_it(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(y("stall_seconds: 0", *FILE_NODE), encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load(path, env={})
    assert e.value.problems == [f"{path}:1: stall_seconds: must be a positive integer, got 0"]
