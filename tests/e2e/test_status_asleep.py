"""The status page says "asleep" for a sleeping llama-server, never idle, and shows live decoding.

The real daemon follows seven file nodes, ending a few seconds ago. A generated run of 50
minutes (20-60 s requests of one slot, 2 s apart on average) keeps `a`, `b`, `c` and `e` busy
nearly all the time and leaves `d` idle for the last 22 minutes: `d` is the control, idle while
the others work. `sleepy` is the recorded run of a real llama-server with
`--sleep-idle-seconds` (tests/testdata/llama-server/sleep.journal.json), cut after its first
`server is entering sleeping state` and moved so that it fell asleep 22 minutes ago: idle as
long as `d`, but asleep. `longgen` is the recorded long generation (long_generation.journal.json),
cut after its last live decode line (`n_gen = ..., tg_3s = ... t/s`) and moved to end now: a
request in flight. Once the daemon's figures reach the end of the dumps, one consistent view is
taken (the page's HTML as served, read with support/dom.py, and /api/status, of one history
sample). Then:
- `sleepy`'s row says asleep (data-state="asleep", the state cell "asleep", no problem), the
  header counts it ("1 asleep"), and /api/status says `"asleep": true` with the seconds it has
  slept;
- it is not marked idle while the others work, while `d`, as idle and awake, is;
- `longgen`'s row is busy and its in-flight cell says "decoding X t/s", X the `tg_3s` of the
  newest live decode line, as /api/status's `decode_tokens_per_second` does.
"""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from exporter.base.times import SECOND

from support.daemon_process import DaemonProcess, file_nodes
from support.dom import Element, parse
from support.recorded import entries, gen_lines
from support.scrape import http_get
from support.tools import wait_for
from support.workload import idle_while_others_work, journal, write_dump

pytestmark = pytest.mark.slow

WORKING = ("a", "b", "c", "e")
IDLE = "d"  # idle and awake: the control
ASLEEP = "sleepy"
DECODING = "longgen"
NODES = (*WORKING, IDLE, ASLEEP, DECODING)
IDLE_S = 22 * 60  # how long `d` has been idle and `sleepy` asleep
WINDOW_S = 50 * 60
MARK = "idle-while-others-work"
_ENTERING = re.compile(r"^\S+ I srv +\w+: server is entering sleeping state$")


def cut_and_moved(run: str, last: re.Pattern[str] | int, at_us: int, path: Path) -> Path:
    """The run's entries up to its last line of `last` (a pattern: its first match; an index),
    moved so that line is at `at_us`, as a journal dump."""
    kept = entries(run)
    if isinstance(last, int):
        end = last
    else:
        end = next(i for i, e in enumerate(kept) if last.search(e["MESSAGE"]))
    kept = kept[: end + 1]
    by_us = at_us - int(kept[-1]["__REALTIME_TIMESTAMP"])
    lines = []
    for e in kept:
        e = dict(e)
        e["__REALTIME_TIMESTAMP"] = str(int(e["__REALTIME_TIMESTAMP"]) + by_us)
        lines.append(json.dumps(e))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass(frozen=True)
class Seen:
    """One consistent view of the daemon: all of one history sample."""

    until_us: int  # the dumps' end
    api: dict[str, Any]
    rows: dict[str, Element]  # the node rows, by node
    cells: dict[str, dict[str, str]]  # each node row's cells' text, by the column's header
    header: list[str]  # the attention header's items

    def api_node(self, name: str) -> dict[str, Any]:
        (node,) = [n for n in self.api["nodes"] if n["name"] == name]
        found: dict[str, Any] = node
        return found


def figures_until(url: str) -> tuple[float | None, dict[str, Any]]:
    status, body, _ = http_get(url + "/api/status")
    assert status == 200, body[:500]
    data: dict[str, Any] = json.loads(body)
    return data["figures_until"], data


def node_rows(page: str) -> tuple[dict[str, Element], dict[str, dict[str, str]]]:
    """The node table's rows by node, and their cells' text by the column's header."""
    dom = parse(page)
    headers = [html.unescape(e.text).strip() for e in dom.elements if e.tag == "th"]
    rows: dict[str, Element] = {}
    cells: dict[str, dict[str, str]] = {}
    node = ""
    for e in dom.elements:
        if e.tag == "tr" and "data-node" in e.attrs:
            node = e.attrs["data-node"]
            rows[node] = e
            cells[node] = {}
        elif e.tag == "td" and node:
            cells[node][headers[len(cells[node])]] = e.text.strip()
        elif e.tag == "tr":
            node = ""
    return rows, cells


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seen]:
    tmp = tmp_path_factory.mktemp("status-asleep")
    until_us = (int(time.time()) - 2) * SECOND
    reqs = idle_while_others_work((*WORKING, IDLE), IDLE, until_us, WINDOW_S, IDLE_S)
    dumps = {n: tmp / f"{n}.json" for n in (*WORKING, IDLE)}
    for node, path in dumps.items():
        write_dump(path, journal(node, [r for r in reqs if r.node == node]), "asleep")
    dumps[ASLEEP] = cut_and_moved(
        "sleep", _ENTERING, until_us - IDLE_S * SECOND, tmp / f"{ASLEEP}.json"
    )
    last_gen = gen_lines("long_generation")[-1]
    index = next(
        i
        for i, e in enumerate(entries("long_generation"))
        if int(e["__REALTIME_TIMESTAMP"]) == last_gen.time_us and "n_gen =" in e["MESSAGE"]
    )
    dumps[DECODING] = cut_and_moved("long_generation", index, until_us, tmp / f"{DECODING}.json")
    config = {"nodes": file_nodes(dumps), "since": "-1h", "slots": 1}
    with DaemonProcess(tmp / "daemon", config) as d:
        d.start()
        url = d.url

        def caught_up() -> float | None:
            at, data = figures_until(url)
            node = {n["name"]: n for n in data["nodes"]}[DECODING]
            # (the daemon read the last live decode line; the history sampled past the idle
            # node's 22 minutes, up to the generation in flight, which holds the figures back)
            decoding = node["decode_tokens_per_second"] is not None
            return (
                at
                if at is not None and decoding and at * SECOND >= until_us - 60 * SECOND
                else None
            )

        wait_for(caught_up, 40, "figures up to the end of the dumps")

        def consistent() -> Seen | None:
            before, api = figures_until(url)
            status, page, _ = http_get(url + "/")
            assert status == 200
            after, _ = figures_until(url)
            if before is None or before != after:
                return None  # (a sample was taken meanwhile: look again)
            text = page.decode()
            rows, cells = node_rows(text)
            (head,) = re.findall(r"<div class=attention>(.*?)</div>", text, re.DOTALL)
            header = [html.unescape(t) for t in re.findall(r"<span[^>]*>(.*?)</span>", head)]
            return Seen(until_us, api, rows, cells, header)

        found = wait_for(consistent, 40, "a view of one history sample")
        d.close(grace=10)
    yield found


def test_a_sleeping_server_is_asleep_not_idle(seen: Seen) -> None:
    states = {n: r.attrs["data-state"] for n, r in seen.rows.items()}
    assert sorted(states) == sorted(NODES), states
    assert {n["name"]: n["state"] for n in seen.api["nodes"]} == states
    assert states[ASLEEP] == "asleep", states
    # the control: as idle, for as long, and awake, it is marked
    assert states[IDLE] == MARK, states
    assert [n for n, s in states.items() if s == MARK] == [IDLE], states
    assert seen.rows[ASLEEP].attrs["class"] == "st-asleep", seen.rows[ASLEEP].attrs
    row = seen.cells[ASLEEP]
    assert row["now"] == "asleep", row
    assert row["problem"] == "", row


def test_the_header_and_the_api_count_the_sleeping_server(seen: Seen) -> None:
    assert "1 asleep" in seen.header, seen.header
    assert "1 idle while the others work" in seen.header, seen.header
    summary = seen.api["summary"]
    assert summary["asleep"] == 1 and summary["idle_while_others_work"] == 1, summary
    node = seen.api_node(ASLEEP)
    assert node["asleep"] is True
    assert node["server_up"] == 1
    # asleep since its `entering sleeping state`, moved to IDLE_S before the dumps' end, up
    # to the daemon's last tick before it made the page (ticks come every half second)
    slept = seen.api["generated_at"] - (seen.until_us / SECOND - IDLE_S)
    assert slept - 2 <= node["asleep_seconds"] <= slept, (node, slept)
    for other in (*WORKING, IDLE, DECODING):
        assert seen.api_node(other)["asleep"] is False, other
        assert seen.api_node(other)["asleep_seconds"] == 0, other


def test_a_long_generation_in_flight_shows_its_decode_speed(seen: Seen) -> None:
    said = gen_lines("long_generation")[-1].tg_3s
    node = seen.api_node(DECODING)
    assert node["state"] == "busy" and node["in_flight"] == 1, node
    assert node["decode_tokens_per_second"] == pytest.approx(said), node
    cell = seen.cells[DECODING]["in flight (oldest)"]
    assert f"decoding {said:.1f} t/s" in cell, cell
    for other in (*WORKING, IDLE, ASLEEP):
        assert "decoding" not in seen.cells[other]["in flight (oldest)"], other
        assert seen.api_node(other)["decode_tokens_per_second"] is None, other
