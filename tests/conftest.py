"""Shared test helpers: real tools on PATH (never skipped in CI), waiting with deadlines, scraping."""

from __future__ import annotations

import os
import shutil
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

T = TypeVar("T")
IN_CI = bool(os.environ.get("CI"))


def require_tool(name: str) -> str:
    """The path of a real tool; in CI its absence fails the test (make installs it)."""
    path = shutil.which(name)
    if path is None:
        if IN_CI:
            pytest.fail(f"{name} is not installed; `make test` installs it (run as root)")
        pytest.skip(f"{name} is not installed here (not CI); `make test` as root installs it")
    return path


def wait_for(check: Callable[[], T | None], timeout: float = 10.0, what: str = "") -> T:
    """Poll `check` until it returns something truthy, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what or check}; last: {last!r}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_metrics(text: str) -> Samples:
    """Exposition text -> {(sample name, sorted labels): value}."""
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))
