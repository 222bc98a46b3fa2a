"""Config tests' shared parts: the example config, a good config, a file node."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest

from exporter import cli
from exporter.config.config import (
    ALL_SOURCES,
    Config,
    parse,
)

from support.tools import REPO, deadline

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
