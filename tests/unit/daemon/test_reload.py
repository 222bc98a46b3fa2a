"""exporter.daemon.reload: a config read beside the loop, with a deadline; a bad one refused.

The reads run in threads of their own on a real event loop (no process); systemd's notifier is a
stand-in that records what it was told.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from exporter.config.errors import ConfigError
from exporter.config.schema import Config
from exporter.daemon.reload import Reloads


class Told:
    """A Notifier stand-in: what systemd would have heard."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def reloading(self) -> None:
        self.said.append("RELOADING")

    def reloaded(self, status: str) -> None:
        self.said.append(f"READY {status}")

    def status(self, status: str) -> None:
        self.said.append(f"STATUS {status}")


def reloads(read: object, deadline_s: float = 5.0) -> tuple[Reloads, Told]:
    told = Told()
    return Reloads(read, told, lambda: "fine", deadline_s), told  # type: ignore[arg-type]


def run(r: Reloads) -> list[Config]:
    """One reload begun as the loop begins it; the configs it handed on."""
    taken: list[Config] = []

    async def main() -> None:
        async with asyncio.TaskGroup() as tg:
            assert r.due()
            r.start(tg, taken.append)
            assert not r.due() and not r.wanted

    asyncio.run(main())
    return taken


def test_a_reload_asked_for_is_due_once_and_hands_the_config_on() -> None:
    new = Config(since="-2h")
    r, told = reloads(lambda: new)
    assert not r.due()
    r.request()
    assert run(r) == [new]
    assert told.said == ["RELOADING", "READY fine", "STATUS fine"]
    assert not r.due()


def test_a_bad_config_is_refused_with_its_problems(caplog: pytest.LogCaptureFixture) -> None:
    def bad() -> Config:
        raise ConfigError("config.yaml", ["3: since: not a time", "5: nodes: empty"])

    caplog.set_level(logging.ERROR, logger="exporter.daemon.daemon")
    r, told = reloads(bad)
    r.request()
    assert run(r) == []
    assert caplog.messages == [
        "reload refused, the config in force stays: config.yaml: 2 problem(s):\n"
        "3: since: not a time\n5: nodes: empty"
    ]
    assert told.said[-2:] == ["READY fine", "STATUS fine"]  # (refused: done all the same)


def test_a_read_that_hangs_is_abandoned_and_no_other_begins_until_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="exporter.daemon.daemon")
    release = threading.Event()

    def hangs() -> Config:
        release.wait(10)
        return Config()

    r, _ = reloads(hangs, deadline_s=0.1)
    r.request()
    assert run(r) == []
    assert "reload abandoned, the config in force stays" in caplog.text
    r.request()  # (another SIGHUP while that read still hangs)
    assert "the config read begun before has not ended yet" in caplog.text
    assert r.wanted and not r.due()
    release.set()
    deadline = time.monotonic() + 5
    while not r.due() and time.monotonic() < deadline:  # (once the hung read has ended)
        time.sleep(0.01)
    assert r.due()


def test_a_daemon_without_a_config_file_says_so(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="exporter.daemon.daemon")
    r, _ = reloads(None)
    r.request()
    assert run(r) == []
    assert "reload: this daemon has no config file to re-read" in caplog.text
