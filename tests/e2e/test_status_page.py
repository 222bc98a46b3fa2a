"""The status page the daemon serves, in a real browser, on a real llama-server's output.

Four nodes follow four runs of a real llama-server (tests/testdata/llama-server/: parallel
timed requests, client cancels, errors, embeddings), moved in time so that they end a minute
ago. Once /api/status holds every occupancy and the history has sampled past the runs' end,
headless Chromium (Debian's) loads `/` and the DOM it builds must hold one lane per node and,
in each, one request rect per occupancy the journal holds (read independently, with regular
expressions: tests/support/recorded.py), with its outcome and its real start and end; the
strip of nodes busy at once the runs' busy time, sample by sample; and one row per node with
its state (each run ends with systemd stopping its llama-server: `down`, "llama-server
stopped") and its busy shares of the last 5 minutes and hour, the runs' busy time over those
windows. /api/status says the same. Screenshots of the demo, on a desktop and on a phone's
screen (a frame of exactly 390 CSS px: support.positions), are kept (their paths printed).
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
from exporter.web.status_api import API_REQUESTS

from support.browser import dump_dom, screenshot_dir
from support.daemon_process import DaemonProcess, file_nodes
from support.dom import Page, parse
from support.positions import framed_screenshot, positions
from support.recorded import entries, occupancies
from support.scrape import http_get
from support.tools import wait_for

pytestmark = pytest.mark.slow

SHOWN = ("parallel", "cancel", "error", "embeddings")
OUTCOME = {"": "timed", "cancelled": "cancelled", "error": "error", "untimed": "untimed"}
SCREENS = {"desktop": (1280, 760), "phone": (390, 844)}  # CSS px


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


def stopped(run: str) -> bool:
    """The run's journal ends with systemd (PID 1) saying its llama-server stopped."""
    said = [e["MESSAGE"] for e in entries(run) if e["_PID"] == "1"]
    return bool(said) and said[-1].startswith("Stopped ")


def busy_us(occs: Counter[tuple[str, int, int]], since_us: int, until_us: int) -> int:
    """The union of the occupancies' time within [since, until]: a node's busy time."""
    spans = sorted((max(s, since_us), min(e, until_us)) for _, s, e in occs)
    total, reach = 0, since_us
    for s, e in spans:
        s = max(s, reach)
        if e > s:
            total += e - s
            reach = e
    return total


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
            # and the history sampled past the runs' end: the shares and the strip are drawn
            until = data["figures_until"]
            return data if done and until is not None and until * SECOND >= end_us else None

        data = wait_for(api, 30, "every occupancy in /api/status")
        yield url, {"want": want, "api": data, "page": parse(dump_dom(url + "/"))}
        d.close(grace=10)


def test_one_lane_per_node_and_a_rect_per_occupancy(served: tuple[str, dict[str, Any]]) -> None:
    _, known = served
    want: dict[str, Counter[tuple[str, int, int]]] = known["want"]
    assert sum(sum(c.values()) for c in want.values()) >= 20  # (the four runs hold 20)
    assert {o for c in want.values() for o, _, _ in c} == set(OUTCOME.values())
    page: Page = known["page"]
    assert page.lanes() == list(SHOWN)
    got: dict[str, Counter[tuple[str, int, int]]] = {run: Counter() for run in SHOWN}
    for rect in page.find("rect", "request"):
        assert rect.lane is not None
        a = rect.attrs
        got[rect.lane][a["data-outcome"], int(a["data-start"]), int(a["data-end"])] += 1
    assert got == want


def test_the_strip_is_the_runs_busy_time_sample_by_sample(
    served: tuple[str, dict[str, Any]],
) -> None:
    """Each step of the strip: the mean number of nodes busy over its span (the sum of the
    runs' busy time in it over its length; 3 decimals); together they hold all of it."""
    _, known = served
    want: dict[str, Counter[tuple[str, int, int]]] = known["want"]
    page: Page = known["page"]
    strip = [r for r in page.in_group("rect", "concurrency") if "data-nodes" in r.attrs]
    assert strip, "no concurrency strip"
    drawn_us = 0.0
    slack_us = 0.0
    for step in strip:
        lo, hi = int(step.attrs["data-start"]), int(step.attrs["data-end"])
        assert hi > lo and lo % (10 * SECOND) == 0 and hi % (10 * SECOND) == 0, step.attrs
        busy = sum(busy_us(want[run], lo, hi) for run in SHOWN)
        nodes = float(step.attrs["data-nodes"])
        assert nodes == pytest.approx(busy / (hi - lo), abs=0.0005), step.attrs
        drawn_us += nodes * (hi - lo)
        slack_us += 0.0005 * (hi - lo)
    lo = min(int(s.attrs["data-start"]) for s in strip)
    hi = max(int(s.attrs["data-end"]) for s in strip)
    assert drawn_us == pytest.approx(sum(busy_us(want[r], lo, hi) for r in SHOWN), abs=slack_us)
    assert sum(busy_us(want[r], 0, lo) for r in SHOWN) == 0  # (nothing busy before the strip)


def test_each_row_says_its_state_and_busy_shares(served: tuple[str, dict[str, Any]]) -> None:
    _, known = served
    want: dict[str, Counter[tuple[str, int, int]]] = known["want"]
    page: Page = known["page"]
    api = known["api"]
    until_us = round(api["figures_until"] * SECOND)
    rows = {e.attrs["data-node"]: e.attrs for e in page.find("tr") if "data-node" in e.attrs}
    assert list(rows) == list(SHOWN)  # (all in one state: the config's order)
    header, *body = page.rows()
    cells = {row[0]: dict(zip(header, (c.strip() for c in row), strict=True)) for row in body}
    by_name = {n["name"]: n for n in api["nodes"]}
    for run in SHOWN:
        assert stopped(run), run  # (each recorded run ends with its server stopped)
        assert rows[run]["data-state"] == by_name[run]["state"] == "down", rows[run]
        assert cells[run]["now"] == "down" and cells[run]["problem"] == "llama-server stopped"
        assert cells[run]["journal"] == "followed" and cells[run]["server"].startswith("stopped")
        for share, span_s in (("5m", 300.0), ("1h", by_name[run]["busy_share_1h_seconds"])):
            span_us = round(span_s * SECOND)
            mine = busy_us(want[run], until_us - span_us, until_us) / span_us
            assert mine > 0, (run, share)  # (the runs ended a minute ago: both windows hold them)
            assert by_name[run][f"busy_share_{share}"] == pytest.approx(mine, abs=1e-9), run
            assert float(rows[run][f"data-share-{share}"]) == pytest.approx(mine, abs=1e-6), run
    said = [e.text for e in page.find("span")]
    assert "4 servers stopped" in said and "0 of 4 nodes busy" in said, said
    assert api["summary"] == {
        "nodes": 4,
        "busy": 0,
        "idle_while_others_work": 0,
        "asleep": 0,
        "sources_down": 0,
        "servers_down": 4,
    }


def test_api_status_says_what_the_page_shows(served: tuple[str, dict[str, Any]]) -> None:
    _, known = served
    want: dict[str, Counter[tuple[str, int, int]]] = known["want"]
    each = API_REQUESTS // len(SHOWN)
    assert each >= max(sum(c.values()) for c in want.values())  # (so every one is listed)
    for node in known["api"]["nodes"]:
        # (seconds as JSON floats: to the microsecond, give or take one)
        got = sorted(
            (r["outcome"], r["start"] * SECOND, r["end"] * SECOND) for r in node["requests"]
        )
        expect = sorted(want[node["name"]].elements())
        assert node["requests_in_window"] == node["requests_kept"] == len(expect)
        assert len(got) == len(expect), node["name"]
        for (outcome, start, end), (outcome_, start_, end_) in zip(got, expect, strict=True):
            assert outcome == outcome_ and abs(start - start_) <= 1 and abs(end - end_) <= 1
        assert node["followed"] is True and node["last_error"] == ""
        assert node["server_up"] == 0


def test_screenshots_of_the_demo(tmp_path: Path) -> None:
    """The status page of `sm-llm-exporter demo` (an hour of three nodes' traffic), as the
    README shows it: on a desktop and on a phone's screen (a frame of exactly that width; the
    page itself never scrolls sideways there)."""

    def demo(_: Path) -> list[str]:
        where = ["--dir", str(tmp_path / "demo"), "--listen", "127.0.0.1:0"]
        return [sys.executable, "-m", "exporter", "demo", *where]

    with DaemonProcess(tmp_path / "daemon", command=demo) as d:
        d.start(40)
        url = f"http://127.0.0.1:{d.port}/"

        def drawn() -> str | None:
            text = http_get(url)[1].decode()
            page = parse(text)
            rows = [e for e in page.find("tr") if "data-share-1h" in e.attrs]
            hour = len(page.find("rect", "request")) > 100 and len(rows) == 3
            return text if hour else None

        text = wait_for(drawn, 30, "the demo's hour drawn, with its shares")
        d.close(grace=10)
    for name, (width, height) in SCREENS.items():
        out = screenshot_dir() / f"status-page-{name}.png"
        framed_screenshot(text, tmp_path, out, width, height)
        print(f"status page screenshot ({name}): {out}")
        assert out.stat().st_size > 10_000  # (a page drawn, not a blank one)
    width, height = SCREENS["phone"]
    (html,) = positions(text, tmp_path, width, height, "html")
    assert html["scroll_width"] <= width, html
