"""The daemon's steady "now": the wall clock, held to the monotonic clock across a step of it.

The wall clock can step (NTP, an operator's `date -s`, a VM's clock fixed after a resume) while
the journals it is compared with go on in real time. `SteadyClock` follows the wall clock while
it keeps the monotonic clock's pace (within FOLLOW_S between two readings: NTP slewing, the
reading's own delay); a jump beyond that is a suspected step: logged once, with its size, and
until it is taken "now" goes on by the monotonic clock from where the wall clock was. It is
taken (now follows the wall clock again) once it has lasted STEP_TAKEN_S, or at once when the
journals bear it out (`journal_time`: an entry beyond now + the allowance, in line with the
wall clock); a step that comes back before is logged as ignored.

The monotonic clock is CLOCK_BOOTTIME where there is one: it counts a suspend, as the wall
clock does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

FOLLOW_S = 1.0  # wall clock readings this close to the monotonic clock's pace are followed
STEP_TAKEN_S = 60.0  # a step that lasts this long is taken


def boottime() -> float:
    """Seconds of a clock that never steps and counts a suspend (CLOCK_BOOTTIME on Linux)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


@dataclass(slots=True)
class _Step:
    """A suspected step of the wall clock: its size (seconds, + ahead), since when (monotonic)."""

    size_s: float
    since_s: float


class SteadyClock:
    """`clock()`: seconds since the epoch, as the module docstring says."""

    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = boottime,
        *,
        step_taken_s: float = STEP_TAKEN_S,
    ) -> None:
        self.wall, self.monotonic = wall, monotonic
        self.step_taken_s = step_taken_s
        self._wall_s, self._mono_s = wall(), monotonic()  # the anchor: now = wall + elapsed
        self._step: _Step | None = None

    @property
    def suspected(self) -> bool:
        """A step of the wall clock is suspected and not taken yet."""
        return self._step is not None

    def __call__(self) -> float:
        wall, mono = self.wall(), self.monotonic()
        steady = self._wall_s + (mono - self._mono_s)
        off = wall - steady
        if abs(off) <= FOLLOW_S:
            if self._step is not None:
                log.info(
                    "the wall clock is back in line after its step of %+.0f s (%.0f s): "
                    "the step is ignored",
                    self._step.size_s,
                    mono - self._step.since_s,
                )
                self._step = None
            return self._anchor(wall, mono)
        step = self._step
        if step is None or abs(off - step.size_s) > FOLLOW_S:  # (a step, or another one)
            self._step = _Step(off, mono)
            log.warning(
                "the wall clock stepped %+.1f s against the monotonic clock: the exporter's "
                "now goes on by the monotonic clock; the step is taken if it lasts %.0f s or "
                "the journals' times bear it out",
                off,
                self.step_taken_s,
            )
        elif mono - step.since_s >= self.step_taken_s:
            self._take(f"it has lasted {mono - step.since_s:.0f} s")
            return self._anchor(wall, mono)
        return steady

    def journal_time(self, time_s: float, allowance_s: float) -> bool:
        """A journal entry stamped `time_s` was read: when it is beyond now + `allowance_s`
        while a step forward is suspected, and in line with the wall clock, the step is taken.
        Returns whether it was."""
        step = self._step
        if step is None or step.size_s <= 0:
            return False
        wall, mono = self.wall(), self.monotonic()
        steady = self._wall_s + (mono - self._mono_s)
        if time_s <= steady + allowance_s or abs(time_s - wall) > allowance_s:
            return False
        self._take("the journals' times are in line with it")
        self._anchor(wall, mono)
        return True

    def _take(self, why: str) -> None:
        assert self._step is not None
        log.warning("the wall clock's step of %+.1f s is taken: %s", self._step.size_s, why)
        self._step = None

    def _anchor(self, wall: float, mono: float) -> float:
        self._wall_s, self._mono_s = wall, mono
        return wall
