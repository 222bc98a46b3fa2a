"""The tests' Watch (tests/support/scrape.py): scrapes are checked in the order they were answered.

The Watch's thread and the test's own scrapes (`restart` in tests/integration/test_crash.py)
both scrape a daemon whose counters only grow. A scrape answered earlier but checked after one
answered later is no value going back: the Watch must not report it as one.
"""

from __future__ import annotations

import itertools
import threading

import pytest

import support.scrape as scrape_module
from support.scrape import Samples, Watch


def test_the_tests_own_scrape_is_checked_in_turn_with_the_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    served = itertools.count(1)  # a daemon's one counter: 1, 2, 3... scrape after scrape
    lock = threading.Lock()
    thread_answered = threading.Event()
    ours_checked = threading.Event()

    def metrics() -> str:
        with lock:
            return f"# TYPE smllm_x_total counter\nsmllm_x_total {next(served)}\n"

    def answer(url: str, timeout: float = 5) -> tuple[int, bytes]:  # the thread's scrapes
        body = metrics().encode()
        thread_answered.set()
        return 200, body

    parse = scrape_module.never_back

    def slow_for_the_thread(text: str) -> tuple[Samples, Samples]:
        # the thread's first scrape (1) parsed slowly (a busy machine, the GIL elsewhere): long
        # enough for the test's own scrape (2) to be answered and checked meanwhile, unless
        # the two are kept in order (a bounded wait: in order, ours waits for this one)
        if threading.current_thread().name == "watch" and text.endswith(" 1\n"):
            ours_checked.wait(1.0)
        return parse(text)

    monkeypatch.setattr(scrape_module, "answer", answer)
    monkeypatch.setattr(scrape_module, "never_back", slow_for_the_thread)
    watch = Watch(lambda: "http://daemon", every=60)
    with watch:
        assert thread_answered.wait(10), "the thread never scraped"
        samples = watch.checked(metrics)
        ours_checked.set()
        assert samples[("smllm_x_total", ())] == 2
        watch.stop()
        assert watch.scrapes == 2
    # (leaving the with: no violation seen)
