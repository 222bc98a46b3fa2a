"""Config tests' shared parts: the example config, a good config, a file node, a config with
many problems and the problems it has."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest

from exporter import cli
from exporter.config.errors import ConfigError
from exporter.config.load import parse
from exporter.config.schema import Config
from exporter.sources.registry import ALL_SOURCES

from support.tools import REPO, deadline
from support.tools import yaml_text as y

ROOT = REPO  # the checkout


SRC = "cfg.yaml"


PARSE_DEADLINE_S = 0.5  # parse() takes about a millisecond; longer means it hangs


FILE_NODE = ("nodes:", "  - {name: a, source: file, path: /x}")


def good(
    text: str, env: Mapping[str, str] | None = None, available: frozenset[str] = ALL_SOURCES
) -> Config:
    with deadline(PARSE_DEADLINE_S):
        return parse(text, SRC, env if env is not None else {}, available)


def check(caplog: pytest.LogCaptureFixture, *argv: str) -> tuple[int, list[str]]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="exporter"):
        code = cli.main(["check-config", *argv])
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    return code, [line for m in messages for line in m.splitlines()]


def problems(
    text: str, env: Mapping[str, str] | None = None, available: frozenset[str] = ALL_SOURCES
) -> list[str]:
    """The problems `parse` finds in `text` (it must find some), named `SRC`."""
    with deadline(PARSE_DEADLINE_S), pytest.raises(ConfigError) as e:
        parse(text, SRC, env if env is not None else {}, available)
    assert e.value.source == SRC
    assert str(e.value).startswith(f"{SRC}: {len(e.value.problems)} problem(s):\n")
    return e.value.problems


def ssh_key(key: str, value: str) -> str:
    """An ssh node with `key: value` on line 5."""
    return y("nodes:", "  - name: a", "    source: ssh", "    host: h", f"    {key}: {value}")


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
    "cfg.yaml:12: nodes[0].source: must be one of file, journal, journal-remote, ssh, init-timeline, got 'jornal' (did you mean 'journal'?)",
    "cfg.yaml:13: nodes[1]: give password_file or password_env, not both",
    "cfg.yaml:13: nodes[1].port: must be a port 1..65535, got 0",
    "cfg.yaml:14: nodes[2].name: node 'b' is defined twice",
    "cfg.yaml:14: nodes[2]: a file node needs a path",
    "cfg.yaml:15: nodes[3]: give directory or files, not both",
    "cfg.yaml:19: nodes[3].colour: unknown key 'colour'",
    "cfg.yaml:20: nodes[4].directory: must be a path, got '${CREDENTIALS_DIRECTORY}/j' ($CREDENTIALS_DIRECTORY is not set)",
]
