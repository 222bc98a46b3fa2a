"""The file sources' shared threads: bounded, each source's calls in order, a stuck one alone."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable

from exporter.sources.pool import Pool


def wait_until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.01)


def test_a_thousand_sources_share_a_bounded_pool_and_each_runs_in_order() -> None:
    pool = Pool(max_threads=8)
    seen: dict[int, list[int]] = {i: [] for i in range(1000)}

    def step(i: int, k: int) -> int:
        seen[i].append(k)
        time.sleep(0.0001)
        return k

    async def source(i: int) -> list[int]:
        s = pool.serial(f"s{i}")
        got = await asyncio.gather(*(s.call(functools.partial(step, i, k)) for k in range(3)))
        return list(got)

    async def main() -> list[list[int]]:
        return list(await asyncio.gather(*(source(i) for i in range(1000))))

    results = asyncio.run(main())
    assert results == [[0, 1, 2]] * 1000
    assert all(v == [0, 1, 2] for v in seen.values())
    assert 1 <= pool.most <= 8


def test_a_stuck_call_holds_its_source_and_one_thread_only() -> None:
    pool = Pool(max_threads=4)
    release = threading.Event()

    async def main() -> tuple[bool, bool, int]:
        stuck = pool.serial("stuck")
        other = pool.serial("other")
        hung = asyncio.ensure_future(stuck.call(release.wait))
        done = await asyncio.wait_for(other.call(lambda: 42), 5)
        # the stuck source's close waits its turn: not done in time, done once released
        closed = threading.Event()
        in_time = await stuck.finish(closed.set, 0.2)
        release.set()
        await hung
        await asyncio.get_running_loop().run_in_executor(None, closed.wait, 5)
        return in_time, closed.is_set(), done

    in_time, closed, done = asyncio.run(main())
    assert (in_time, closed, done) == (False, True, 42)


def test_what_a_call_raises_reaches_its_caller_and_the_source_goes_on() -> None:
    pool = Pool(max_threads=2)

    async def main() -> int:
        s = pool.serial("s")
        failed = False
        try:
            await s.call(lambda: 1 / 0)
        except ZeroDivisionError:
            failed = True
        assert failed
        return await s.call(lambda: 7)

    assert asyncio.run(main()) == 7


def test_idle_threads_end() -> None:
    pool = Pool(max_threads=4, idle_seconds=0.05)

    async def main() -> None:
        await asyncio.gather(
            *(pool.serial(str(i)).call(lambda: time.sleep(0.01)) for i in range(8))
        )

    asyncio.run(main())
    assert pool.most >= 2
    wait_until(lambda: pool.threads == 0)
