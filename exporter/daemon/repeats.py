"""A node's repeated events logged in summary: the first as it comes, then one line a minute.

How many more came is said at most once a minute (a journal of a million restarts is not a
million log lines).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from exporter.daemon.logger import log

SUMMARY_S = 60.0  # a node's repeated events are logged at most once this often


@dataclass(slots=True)
class _Window:
    """What a node logged since `since_s`: how many more of each kind came, the last's words."""

    since_s: float
    counts: dict[str, int] = field(default_factory=dict)
    last: dict[str, str] = field(default_factory=dict)


class Repeats:
    """One node's: `note` an event; `flush` logs the summary when it is due (at once, with
    `every`)."""

    def __init__(self, node: str, clock: Callable[[], float], every_s: float = SUMMARY_S) -> None:
        self.node = node
        self.clock = clock
        self.every_s = every_s
        self._window: _Window | None = None

    def note(self, what: str, count: int, words: str, detail: str = "") -> None:
        """`count` events of kind `what` (`llama-server restarts`, say); `words`: the line to
        log when this is the first of a window, `detail`: what a summary says of the last one."""
        now = self.clock()
        window = self._window
        if window is not None and now - window.since_s >= self.every_s:
            window = self._next(window, now)
        if window is None:  # (quiet for a minute: this one is news)
            self._window = _Window(now)
            log.info("node %s: %s", self.node, words)
            return
        window.counts[what] = window.counts.get(what, 0) + count
        window.last[what] = detail

    def flush(self, *, every: bool = False) -> None:
        """Log the summary of the window if it is over (`every`: whether over or not)."""
        window = self._window
        if window is None:
            return
        now = self.clock()
        if every or now - window.since_s >= self.every_s:
            self._next(window, now)

    def _next(self, window: _Window, now: float) -> _Window | None:
        """The window is over: its summary logged; a new window while events came (the next
        summary a minute on, at the earliest), else none."""
        self._window = None
        if not window.counts:
            return None
        self._summary(window)
        self._window = _Window(now)
        return self._window

    def _summary(self, window: _Window) -> None:
        parts = [
            f"{n} {what}" + (f" (the last: {window.last[what]})" if window.last[what] else "")
            for what, n in window.counts.items()
        ]
        log.info(
            "node %s, in the last %.0f s besides what was logged: %s",
            self.node,
            self.clock() - window.since_s,
            "; ".join(parts),
        )
