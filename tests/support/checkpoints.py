"""Checkpoint tests' shared parts: a manual clock, file modes, names in a checkpoint, JSON values."""

from __future__ import annotations

import threading
from pathlib import Path

from hypothesis import strategies as st

from exporter.base.times import SECOND
from exporter.checkpoint.store import LOCK_NAME

from support.dumps import END

END_S = END // SECOND


class ManualClock:
    """A clock that moves only when told to (the daemons' `clock`)."""

    def __init__(self, start_s: float) -> None:
        self._now = start_s
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def set(self, now_s: float) -> None:
        with self._lock:
            assert now_s >= self._now, "the clock never goes back"
            self._now = now_s


def mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o777


def names_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != LOCK_NAME)  # (the daemon's)


# any JSON value, and objects of any keys but `format` (a checkpoint's content, as written)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=25,
)

states = st.dictionaries(st.text().filter(lambda k: k != "format"), json_values, max_size=6)
