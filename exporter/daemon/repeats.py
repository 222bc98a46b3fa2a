"""Repeated events of a node logged in summary: the first as it comes, then at most one line a
minute with how many more came (a journal of a million restarts is not a million log lines).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("exporter.daemon.daemon")

SUMMARY_S = 60.0  # a node's repeated events are logged at most once this often


@dataclass(slots=True)
class _Window:
    """What a node logged since `since_s`: how many more of each kind came, the last's words."""

    since_s: float
    counts: dict[str, int] = field(default_factory=dict)
    last: dict[str, str] = field(default_factory=dict)


class Repeats:
    """Per node: `note` an event; `flush` logs the summaries that are due (all, with `every`)."""

    def __init__(self, clock: Callable[[], float], every_s: float = SUMMARY_S) -> None:
        self.clock = clock
        self.every_s = every_s
        self._windows: dict[str, _Window] = {}

    def note(self, node: str, what: str, count: int, words: str, detail: str = "") -> None:
        """`count` events of kind `what` (`llama-server restarts`, say) on `node`; `words`: the
        line to log when this is the first of a window, `detail`: what a summary says of the
        last one."""
        now = self.clock()
        window = self._windows.get(node)
        if window is not None and now - window.since_s >= self.every_s:
            window = self._next(node, now)
        if window is None:  # (quiet for a minute: this one is news)
            self._windows[node] = _Window(now)
            log.info("node %s: %s", node, words)
            return
        window.counts[what] = window.counts.get(what, 0) + count
        window.last[what] = detail

    def flush(self, *, every: bool = False) -> None:
        """Log the summary of each window that is over (`every`: of each window)."""
        now = self.clock()
        for node, window in list(self._windows.items()):
            if every or now - window.since_s >= self.every_s:
                self._next(node, now)

    def _next(self, node: str, now: float) -> _Window | None:
        """The node's window is over: its summary logged; a new window while events came (the
        next summary a minute on, at the earliest), else none."""
        window = self._windows.pop(node)
        if not window.counts:
            return None
        self._summary(node, window)
        self._windows[node] = _Window(now)
        return self._windows[node]

    def forget(self, node: str) -> None:
        self._windows.pop(node, None)

    def _summary(self, node: str, window: _Window) -> None:
        parts = [
            f"{n} {what}" + (f" (the last: {window.last[what]})" if window.last[what] else "")
            for what, n in window.counts.items()
        ]
        log.info(
            "node %s, in the last %.0f s besides what was logged: %s",
            node,
            self.clock() - window.since_s,
            "; ".join(parts),
        )
