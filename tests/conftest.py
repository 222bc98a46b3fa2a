"""The shared test helpers live in tests/support/ (the package `support`: pytest puts tests/ on
the import path, and the benches put it there too); the generic ones are handed on from here to
the test modules that import them from conftest."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from exporter.cli import main

from support.scrape import Samples, http_get, parse_metrics, sample
from support.tools import IN_CI, deadline, free_port, require_tool, wait_for
from support.vllm_timeline import require_seed

__all__ = [
    "IN_CI",
    "Cli",
    "Samples",
    "free_port",
    "http_get",
    "parse_metrics",
    "require_tool",
    "sample",
    "wait_for",
]


CLI_DEADLINE_S = 10.0  # (a hang becomes a failure)
Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def seed_file() -> object:
    """vllm-omni's init_timeline.py (the seed) is here: `needs_seed` (support.vllm_timeline)."""
    return require_seed()


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """Run exporter.cli.main; returns (exit code, stdout, stderr). The root logger is emptied for
    the call (pytest's own handlers put back after), so main's logging.basicConfig really writes
    to the captured stderr."""

    def run(*argv: str) -> tuple[int, str, str]:
        root = logging.getLogger()
        saved_handlers, saved_level = root.handlers[:], root.level
        root.handlers = []
        try:
            with deadline(CLI_DEADLINE_S):
                code = main(list(argv))
        finally:
            for h in root.handlers:
                h.close()
            root.handlers = saved_handlers
            root.setLevel(saved_level)
        out, err = capsys.readouterr()
        return code, out, err

    return run
