"""The shared test helpers live in tests/support/ (the package `support`: pytest puts tests/ on
the import path, and the benches put it there too); the generic ones are handed on from here to
the test modules that import them from conftest."""

from __future__ import annotations

from support.scrape import Samples, http_get, parse_metrics, sample
from support.tools import IN_CI, free_port, require_tool, wait_for

__all__ = [
    "IN_CI",
    "Samples",
    "free_port",
    "http_get",
    "parse_metrics",
    "require_tool",
    "sample",
    "wait_for",
]
