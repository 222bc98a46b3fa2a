"""The status page the daemon serves, in a real browser, on a real llama-server's output.

Four nodes follow four runs of a real llama-server (tests/testdata/llama-server/: parallel
timed requests, client cancels, errors, embeddings), moved in time so that they end a minute
ago. Once /api/status holds every occupancy, headless Chromium (Debian's) loads `/` and the
DOM it builds must hold one lane per node and, in each, one request rect per occupancy the
journal holds (read independently, with regular expressions: tests/support/recorded.py), with
its outcome and its real start and end; /api/status says the same. Screenshots, on a desktop
and on a phone's screen, are kept (their paths printed).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.base.times import SECOND

from support.browser import dump_dom, screenshot, screenshot_dir
from support.daemon_process import DaemonProcess, file_nodes
from support.dom import parse
from support.recorded import entries, occupancies
from support.scrape import http_get
from support.tools import wait_for

pytestmark = pytest.mark.slow

SHOWN = ("parallel", "cancel", "error", "embeddings")
OUTCOME = {"": "timed", "cancelled": "cancelled", "error": "error", "untimed": "untimed"}


def moved_us(run: str, end_us: int) -> int:
    """How far to move the run's times so that its last entry is at `end_us`."""
    return end_us - max(int(e["__REALTIME_TIMESTAMP"]) for e in entries(run))


def write_moved(run: str, path: Path, by_us: int) -> None:
    lines = []
    for e in entries(run):
        e = dict(e)
        e["__REALTIME_TIMESTAMP"] = str(int(e["__REALTIME_TIMESTAMP"]) + by_us)
        lines.append(json.dumps(e))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def expected(run: str, by_us: int) -> Counter[tuple[str, int, int]]:
    """(outcome, start, end) of every occupancy the run's journal holds, moved."""
    out: Counter[tuple[str, int, int]] = Counter()
    for occ in occupancies(run):
        if occ.total_us is not None and occ.end_us is not None:
            start, end = occ.end_us - occ.total_us, occ.end_us
        elif occ.release_us is not None:
            start, end = occ.launch_us, occ.release_us
        else:
            continue  # (never ended: no interval)
        out[OUTCOME[occ.reason], start + by_us, end + by_us] += 1
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("status-page")
    end_us = int(time.time() * SECOND) - 60 * SECOND
    want: dict[str, Counter[tuple[str, int, int]]] = {}
    paths = {}
    for run in SHOWN:
        by_us = moved_us(run, end_us)
        paths[run] = tmp / f"{run}.json"
        write_moved(run, paths[run], by_us)
        want[run] = expected(run, by_us)
    config = {"nodes": file_nodes(paths), "since": "-2h", "slots": 4}
    with DaemonProcess(tmp / "daemon", config) as d:
        d.start()
        url = f"http://127.0.0.1:{d.port}"

        def api() -> dict[str, Any] | None:
            status, body, _ = http_get(url + "/api/status")
            data: dict[str, Any] = json.loads(body)
            kept = {n["name"]: len(n["requests"]) for n in data["nodes"]}
            done = status == 200 and kept == {r: sum(want[r].values()) for r in SHOWN}
            return data if done else None

        data = wait_for(api, 30, "every occupancy in /api/status")
        yield url, {"want": want, "api": data}
        d.close(grace=10)


def test_one_lane_per_node_and_a_rect_per_occupancy(served: tuple[str, dict[str, Any]]) -> None:
    url, known = served
    want: dict[str, Counter[tuple[str, int, int]]] = known["want"]
    assert sum(sum(c.values()) for c in want.values()) >= 20  # (the four runs hold 20)
    assert {o for c in want.values() for o, _, _ in c} == set(OUTCOME.values())
    page = parse(dump_dom(url + "/"))
    assert page.lanes() == list(SHOWN)
    got: dict[str, Counter[tuple[str, int, int]]] = {run: Counter() for run in SHOWN}
    for rect in page.find("rect", "request"):
        assert rect.lane is not None
        a = rect.attrs
        got[rect.lane][a["data-outcome"], int(a["data-start"]), int(a["data-end"])] += 1
    assert got == want
    strip = page.in_group("rect", "concurrency")
    assert strip, "no concurrency strip"
    assert max(float(r.attrs["data-nodes"]) for r in strip if "data-nodes" in r.attrs) >= 1
    header, *body = page.rows()
    journal = header.index("journal")
    assert {row[0]: row[journal].strip() for row in body} == dict.fromkeys(SHOWN, "followed")


def test_api_status_says_what_the_page_shows(served: tuple[str, dict[str, Any]]) -> None:
    _, known = served
    want: dict[str, Counter[tuple[str, int, int]]] = known["want"]
    for node in known["api"]["nodes"]:
        # (seconds as JSON floats: to the microsecond, give or take one)
        got = sorted(
            (r["outcome"], r["start"] * SECOND, r["end"] * SECOND) for r in node["requests"]
        )
        expect = sorted(want[node["name"]].elements())
        assert len(got) == len(expect), node["name"]
        for (outcome, start, end), (outcome_, start_, end_) in zip(got, expect, strict=True):
            assert outcome == outcome_ and abs(start - start_) <= 1 and abs(end - end_) <= 1
        assert node["followed"] is True and node["last_error"] == ""


def test_screenshots_of_the_demo(tmp_path: Path) -> None:
    """The status page of `sm-llm-exporter demo` (an hour of three nodes' traffic), as the
    README shows it: on a desktop and on a phone's screen."""

    def demo(_: Path) -> list[str]:
        where = ["--dir", str(tmp_path / "demo"), "--listen", "127.0.0.1:0"]
        return [sys.executable, "-m", "exporter", "demo", *where]

    with DaemonProcess(tmp_path / "daemon", command=demo) as d:
        d.start(40)
        url = f"http://127.0.0.1:{d.port}/"

        def drawn() -> int:
            return len(parse(http_get(url)[1].decode()).find("rect", "request"))

        assert wait_for(drawn, 30, "the demo's hour drawn") > 100
        for name, size in (("desktop", (1280, 760)), ("phone", (390, 844))):
            out = screenshot(url, screenshot_dir() / f"status-page-{name}.png", size)
            print(f"status page screenshot ({name}): {out}")
            assert out.stat().st_size > 10_000  # (a page drawn, not a blank one)
        d.close(grace=10)
