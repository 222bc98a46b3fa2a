"""Real tools and real ports: what a test needs from the machine, and how it waits for things.

- `require_tool` / `missing`: a tool that is not installed fails the test in CI (`make test`
  installs it, as root) and skips it elsewhere.
- `wait_for`, `until_right`: wait on a condition with a deadline (never a sleep that hopes);
  `poll` is the same wait for a caller that decides itself what a timeout means; `until` is
  `wait_for` in a coroutine, on the event loop it waits on, and `turn` waits for the callbacks
  that loop has scheduled already.
- `free_port`: a port of 127.0.0.1 that was free a moment ago, for servers that cannot report a
  kernel-chosen one (their callers retry on a clash).
- `deadline`: a hang of code run in this thread becomes a `Hang` exception (SIGALRM).
- `yaml_text`: YAML text one argument a line, so a case's line numbers read off its position.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import NoReturn, TypeVar

import pytest

T = TypeVar("T")
IN_CI = bool(os.environ.get("CI"))
REPO = Path(__file__).resolve().parents[2]


def missing(what: str) -> NoReturn:
    """`what` is not on this machine: a failure in CI, a skip elsewhere."""
    if IN_CI:
        pytest.fail(f"{what} missing in CI; `make test` installs it (run as root)")
    pytest.skip(f"{what} missing here (not CI, where this fails); `make test` as root installs it")


def require_tool(name: str) -> str:
    """The path of a real tool on PATH."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} (not on PATH)")
    return path


def poll(check: Callable[[], T | None], timeout: float, every: float = 0.05) -> T | None:
    """Call `check` until it returns something truthy (returned) or `timeout` seconds pass
    (then None)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() >= deadline:
            return None
        time.sleep(every)


def wait_for(check: Callable[[], T | None], timeout: float = 10.0, what: str = "") -> T:
    """Poll `check` until it returns something truthy, or fail after `timeout` seconds."""
    last: list[T | None] = []

    def recorded() -> T | None:
        last[:] = [check()]
        return last[0]

    found = poll(recorded, timeout)
    if found:
        return found
    pytest.fail(f"timed out after {timeout} s waiting for {what or check}; last: {last[0]!r}")


async def until(
    check: Callable[[], T | None], timeout: float = 10.0, what: str = "", every: float = 0.005
) -> T:
    """`wait_for` in a coroutine: `check` between the running loop's turns (`every` seconds
    apart) until it returns something truthy, or fail after `timeout` seconds."""
    end = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() >= end:
            pytest.fail(f"timed out after {timeout} s waiting for {what or check}; last: {found!r}")
        await asyncio.sleep(every)


async def turn() -> None:
    """Every callback the running loop had scheduled (call_soon) when this was called has run:
    the loop runs them in the order they were scheduled."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_soon(done.set_result, None)
    await done


def until_right(
    check: Callable[[], list[str]], timeout: float, what: str, pause: float = 0.1
) -> None:
    """Wait until `check` finds no problem (`pause` seconds between checks); fail with the last
    ones it found."""
    problems: list[str] = []

    def right() -> bool:
        problems[:] = check()
        return not problems

    if not poll(right, timeout, pause):
        pytest.fail(f"{what}: still wrong after {timeout} s: {problems[:8]}")


def now_us() -> int:
    """The clock, in microseconds since the epoch (the journal's unit)."""
    return time.time_ns() // 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_compiled(module: object, name: str) -> None:
    """For tests of a compiled module (at a test module's top, or in a test): in CI a module
    not built, or switched off with SMLLM_PURE_PYTHON (the test command's pure-Python rerun
    leaves these files out), fails; elsewhere it skips."""
    from exporter.compiled import switch

    if module is not None:
        return
    why = f"exporter.{name} is not built or is switched off ({switch.ENV})"
    if IN_CI:
        pytest.fail(f"{why}; `make test` builds it (needs gcc) and runs this file compiled")
    pytest.skip(f"{why} (not CI; make test installs gcc)", allow_module_level=True)


class Hang(Exception):
    """Code still running after its deadline."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Turn a hang into an exception, so a looping parse fails instead of stalling the suite."""

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def yaml_text(*lines: str) -> str:
    """YAML text, one argument a line, so a case's line numbers can be read off its position."""
    return "\n".join(lines) + "\n"


QUICK = os.environ.get("SMLLM_QUICK", "") not in ("", "0")  # `make unit`: the quick run


def examples(n: int) -> int:
    """A property test's examples: `n` in the whole suite, a quarter (at least 50) in the quick
    unit run, which asks the same properties of fewer random cases."""
    return max(50, n // 4) if QUICK and n > 50 else n
