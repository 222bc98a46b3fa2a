"""The exporter's own wall clock steps (NTP, a VM resumed, `date -s`) while its nodes log in real
time: the watermark and the "ahead of now" test follow the journals' time and the monotonic
clock, so nothing is counted late, no busy second is lost and no idle second is made up.

The daemon runs as a process under libfaketime (Debian's `faketime`), which reads its offset from
a file at every call and leaves the monotonic clocks alone: the test steps the daemon's wall
clock an hour forward for a few seconds and back, then an hour back and forward again, while a
writer appends requests to the node's dump as they end, stamped with the true time. The
`SteadyClock` itself is also driven by hand (a wall and a monotonic clock the test moves).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from exporter.commands.demo import DemoLine, short_iso
from exporter.daemon.clock import SteadyClock

from support.daemon_process import DaemonProcess, file_nodes
from support.scrape import Samples, sample, total
from support.tools import now_us, wait_for

SECOND = 1_000_000
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
HOUR_S = 3600
STEP_S = 3.0  # how long each step lasts (shorter than the 60 s after which one is taken)
EVERY_S = 0.25  # a request ends this often
NODE = "n0"


def request_lines(task: int, end_us: int, ms: int) -> list[DemoLine]:
    """One request on slot 0 of `ms` milliseconds ending at `end_us`: launch, timing, release."""
    p = f"slot print_timing: id  0 | task {task} | "
    return [
        DemoLine(
            end_us - ms * 1000, 4242, f"slot launch_slot_: id  0 | task {task} | processing task"
        ),
        DemoLine(end_us, 4242, p + f"prompt eval time = {ms / 2:10.2f} ms /   100 tokens"),
        DemoLine(end_us, 4242, p + f"       eval time = {ms / 2:10.2f} ms /    10 tokens"),
        DemoLine(end_us, 4242, p + f"      total time = {ms:10.2f} ms /   110 tokens"),
        DemoLine(
            end_us + 10,
            4242,
            f"slot      release: id  0 | task {task} | stop processing: n_tokens = 110",
        ),
    ]


class Writer:
    """Appends a request to the dump every EVERY_S as it ends (true time), until stopped; keeps
    the truth: how many, their durations, the last end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self.busy_us = 0
        self.last_end_us = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._halt.wait(EVERY_S):
            self.count += 1
            ms = 100 + 7 * (self.count % 11)  # 100..170 ms: they never overlap
            end = now_us()
            with self.path.open("a") as f:
                f.writelines(
                    short_iso(NODE, ln) + "\n" for ln in request_lines(self.count, end, ms)
                )
            self.busy_us += ms * 1000
            self.last_end_us = end

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join(10)


def faketime_env(offset_file: Path) -> dict[str, str]:
    """libfaketime on the daemon's wall clock only, its offset read from `offset_file` at every
    call (the monotonic clocks stay true)."""
    if not FAKETIME_LIB.exists():
        pytest.fail(f"{FAKETIME_LIB} missing (Debian package faketime)")
    return {
        "LD_PRELOAD": str(FAKETIME_LIB),
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def settled(d: DaemonProcess, w: Writer) -> Samples | None:
    """The served samples once every request written is counted and accounted for."""
    m = d.metrics()
    if total(m, "smllm_requests_total", node=NODE) != w.count:
        return None
    watermark = sample(m, "smllm_accounted_until_timestamp_seconds") or 0
    return m if watermark * SECOND > w.last_end_us + 20 else None


@pytest.mark.slow
def test_a_wall_clock_stepped_an_hour_either_way_loses_no_busy_second(tmp_path: Path) -> None:
    offset = tmp_path / "faketime.rc"
    offset.write_text("+0\n")
    dump = tmp_path / f"{NODE}.log"
    dump.write_text("")
    settings = {
        "nodes": file_nodes({NODE: dump}),
        "since": "-10s",
        "max_request_seconds": 5,
    }
    with DaemonProcess(tmp_path / "d", settings, env=faketime_env(offset)) as d:
        d.start()
        began_us = now_us()
        with Writer(dump) as w:
            wait_for(
                lambda: total(d.metrics(), "smllm_requests_total", node=NODE) >= 4,
                20,
                "the first requests counted",
            )
            for step in (f"+{HOUR_S}", f"-{HOUR_S}"):
                offset.write_text(step + "\n")
                time.sleep(STEP_S)  # the step lasting (what is simulated, not a wait for a result)
                offset.write_text("+0\n")
                time.sleep(1.0)  # (requests written with the clock right again, between steps)
        m = wait_for(lambda: settled(d, w), 20, "every request counted and accounted")
        assert w.count > 30
        assert sample(m, "smllm_late_intervals_total", node=NODE) == 0
        busy = sample(m, "smllm_node_busy_seconds_total", node=NODE)
        assert busy is not None and round(busy * SECOND) == w.busy_us
        # no idle second made up: the watermark is where the journal's time is, not an hour on
        watermark = sample(m, "smllm_accounted_until_timestamp_seconds") or 0
        assert watermark * SECOND < now_us() + 5 * SECOND
        idle = sample(m, "smllm_concurrency_seconds_total", nodes_busy="0") or 0
        assert idle * SECOND < now_us() - began_us + 20 * SECOND
        log = d.stop()
    assert "the wall clock stepped +3600" in log and "the wall clock stepped -3600" in log, log
    assert log.count("the step is ignored") == 2, log


# -- the steady clock by hand ---------------------------------------------------------------------


class Clocks:
    """A wall clock and a monotonic clock the test moves."""

    def __init__(self) -> None:
        self.wall_s, self.mono_s = 1_790_000_000.0, 100.0

    def wall(self) -> float:
        return self.wall_s

    def mono(self) -> float:
        return self.mono_s

    def run(self, seconds: float) -> None:
        self.wall_s += seconds
        self.mono_s += seconds


def test_the_steady_clock_follows_slewing_and_ignores_a_step_that_comes_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = Clocks()
    steady = SteadyClock(c.wall, c.mono)
    c.run(10)
    c.wall_s += 0.3  # (slewing, a late reading: followed)
    assert steady() == c.wall_s
    with caplog.at_level(logging.INFO, logger="exporter.daemon.clock"):
        c.wall_s += HOUR_S
        c.run(5)
        assert steady() == c.wall_s - HOUR_S and steady.suspected
        c.run(5)
        assert steady() == c.wall_s - HOUR_S
        c.wall_s -= HOUR_S
        c.run(1)
        assert steady() == c.wall_s and not steady.suspected
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "stepped +3600.0 s" in said[0] and "ignored" in said[1], said


def test_a_step_that_lasts_is_taken_and_one_the_journals_bear_out_at_once() -> None:
    c = Clocks()
    steady = SteadyClock(c.wall, c.mono, step_taken_s=60)
    c.wall_s -= HOUR_S  # back: taken once it has lasted 60 s
    assert steady() == c.wall_s + HOUR_S
    c.run(59)
    assert steady() == c.wall_s + HOUR_S
    c.run(1)
    assert steady() == c.wall_s and not steady.suspected
    c.wall_s += HOUR_S  # forward: an entry in line with it, beyond now + 5 s, takes it
    assert steady() == c.wall_s - HOUR_S
    assert not steady.journal_time(c.wall_s - HOUR_S + 3, 5.0)  # (in line with now: no)
    assert steady.journal_time(c.wall_s - 2, 5.0)
    assert steady() == c.wall_s
