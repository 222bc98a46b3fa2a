"""Unit tests start no process and open no network socket: each one that tries fails."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

NETWORK = (socket.AF_INET, socket.AF_INET6)


class NotAUnitTest(AssertionError):
    """A unit test reached for a process or the network: it belongs in tests/integration/."""


@pytest.fixture(autouse=True)
def no_process_no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse_process(self: subprocess.Popen[Any], args: Any, *a: Any, **k: Any) -> None:
        raise NotAUnitTest(f"a unit test started a process: {args!r}")

    def refused(name: str) -> Any:
        real = getattr(socket.socket, name)

        def call(self: socket.socket, *a: Any, **k: Any) -> Any:
            if self.family in NETWORK:
                raise NotAUnitTest(f"a unit test opened a network socket ({name} {a!r})")
            return real(self, *a, **k)

        return call

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse_process)
    for name in ("bind", "connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, refused(name))
    yield
