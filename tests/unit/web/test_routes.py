"""exporter.web.routes: what each request head gets, before any connection: the paths, the
methods, the pages made once and the readiness the daemon sets."""

from __future__ import annotations

from exporter.web.http1 import Answer
from exporter.web.routes import PAGE_HEADERS, Page, Render, Site, route


def get(site: Site, target: bytes, method: bytes = b"GET", more: bytes = b"") -> object:
    return route(site, method + b" " + target + b" HTTP/1.1\r\nHost: x" + more)


def test_health_and_readiness() -> None:
    site = Site()
    assert get(site, b"/-/healthy") == (200, "text/plain", b"OK\n", [])
    assert get(site, b"/-/ready") == (503, "text/plain", b"not ready: sources starting\n", [])
    site.ready = lambda: True
    assert get(site, b"/-/ready") == (200, "text/plain", b"ready\n", [])
    assert get(site, b"/-/ready?x=1", b"HEAD") == (200, "text/plain", b"ready\n", [])


def test_what_is_not_served() -> None:
    site = Site(ready=lambda: True)
    assert get(site, b"/nope") == (404, "text/plain", b"not found\n", [])
    assert get(site, b"/-/healthy", b"POST") == (
        405,
        "text/plain",
        b"only GET and HEAD\n",
        ["Allow: GET, HEAD"],
    )
    bad_request: Answer = (400, "text/plain", b"bad request\n", [])
    assert route(site, b"GET /-/healthy") == bad_request  # (no version)
    assert route(site, b"") == bad_request
    for target in (b"/metrics", b"/", b"/api/status"):  # no snapshot published yet
        assert get(site, target) == (503, "text/plain", b"no snapshot yet\n", [])


def test_a_page_is_made_once_then_served_from_memory() -> None:
    made: list[int] = []

    def make() -> bytes:
        made.append(1)
        return b"<html>"

    site = Site(status=Page(make, "text/html"), api=Page(lambda: b"{}", "application/json"))
    render = get(site, b"/")
    assert isinstance(render, Render) and render.page is site.status
    assert render.answer(render.make()) == (200, "text/html", b"<html>", PAGE_HEADERS)
    assert get(site, b"/") == (200, "text/html", b"<html>", PAGE_HEADERS)
    assert made == [1]
    api = get(site, b"/api/status")
    assert isinstance(api, Render) and api.page is site.api
