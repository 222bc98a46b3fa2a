"""Occurrences logged at most once per interval, each line with how many there were since."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

LOG_EVERY_S = 10.0  # the default interval


@dataclass
class Tally:
    """Occurrences of `what`, logged at most once per `every_s` (of `clock`) to `log`, with
    how many there were since the last such line."""

    log: logging.Logger
    what: str
    clock: Callable[[], float]
    every_s: float = LOG_EVERY_S
    count: int = 0
    logged_at: float | None = None

    def add(self, detail: str = "") -> None:
        self.count += 1
        now = self.clock()
        if self.logged_at is None or now - self.logged_at >= self.every_s:
            suffix = f" ({detail})" if detail else ""
            self.log.warning(
                "http: %s: %d since the last such line%s", self.what, self.count, suffix
            )
            self.count, self.logged_at = 0, now
