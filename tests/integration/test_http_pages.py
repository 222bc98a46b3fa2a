"""The status pages as the server serves them: made once per snapshot, however many ask at once,
in a thread of their own (never holding up /metrics), with headers that let them load nothing."""

from __future__ import annotations

import logging
import threading

import pytest

from exporter.exposition.published import Published
from exporter.exposition.render import Renderer
from exporter.web.routes import PAGE_HEADERS, Page

from support.exposition import snapshot
from support.served import Served
from support.tools import wait_for


def test_a_page_is_made_once_for_all_who_ask_and_holds_up_no_scrape() -> None:
    release, made = threading.Event(), []

    def make() -> bytes:
        made.append(1)
        release.wait(30)  # (a page as slow as the test wants)
        return b"<!doctype html><title>status</title>"

    with Served() as s:
        s.site.status = Page(make, "text/html; charset=utf-8")
        s.site.metrics = Published(Renderer("1.2.3"), snapshot(requests=50), 0)
        answers: list[tuple[int, dict[str, str], bytes]] = []
        askers = [threading.Thread(target=lambda: answers.append(s.get("/"))) for _ in range(12)]
        for t in askers:
            t.start()
        wait_for(lambda: made, 10, "the page begun")
        status, _, body = s.get("/metrics")  # made in the default worker threads meanwhile
        assert status == 200 and b"smllm_node_busy_seconds_total" in body
        release.set()
        for t in askers:
            t.join(30)
        assert [a[0] for a in answers] == [200] * 12
        assert made == [1]  # once, for all twelve
        headers = answers[0][1]
        for line in PAGE_HEADERS:
            name, _, value = line.partition(": ")
            assert headers[name] == value


def test_a_page_that_cannot_be_made_is_a_500_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def make() -> bytes:
        raise ValueError("a defect")

    with Served() as s, caplog.at_level(logging.ERROR, "exporter.web.connection"):
        s.site.api = Page(make, "application/json")
        assert [s.get("/api/status")[0] for _ in range(3)] == [500] * 3
    logged = [r for r in caplog.records if "cannot render a page" in r.getMessage()]
    assert len(logged) == 1
