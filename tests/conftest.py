"""Fixtures for every test; the shared helpers live in tests/support/ (the package `support`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from exporter.sources.filereader import FileSource

from support.certs import Authority, Pair
from support.cli import Cli
from support.startups import Done
from support.tools import deadline
from support.vllm_timeline import require_seed

CLI_DEADLINE_S = 10.0  # (a hang becomes a failure)


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


@pytest.fixture
def report(cli: Cli) -> Callable[..., Done]:
    """`report` on the command line, in-process: Done(exit code, stdout, stderr)."""
    return lambda *args: Done(*cli("report", *args))


@pytest.fixture
def pki(tmp_path: Path) -> Iterator[tuple[Authority, Pair]]:
    """A certificate authority in tmp_path and a server pair it signed."""
    ca = Authority(tmp_path / "pki")
    yield ca, ca.server()


@pytest.fixture(autouse=True)
def sources_closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every file source a test makes is closed when the test ends (warnings are errors)."""
    made: list[FileSource] = []
    real = FileSource.__init__

    def init(self: FileSource, *a: Any, **k: Any) -> None:
        real(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(FileSource, "__init__", init)
    yield
    for source in made:
        source.close()


STAGES = ("unit", "integration", "e2e", "hostile")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test is marked by the folder it is in: unit, integration, e2e or hostile."""
    for item in items:
        parts = item.path.parts
        for stage in STAGES:
            if stage in parts:
                item.add_marker(getattr(pytest.mark, stage))
                break
