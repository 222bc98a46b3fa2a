"""Every file source a test makes is closed when the test ends (warnings are errors)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from exporter.sources.file import FileSource


@pytest.fixture(autouse=True)
def sources_closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    made: list[FileSource] = []
    real = FileSource.__init__

    def init(self: FileSource, *a: Any, **k: Any) -> None:
        real(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(FileSource, "__init__", init)
    yield
    for source in made:
        source.close()
