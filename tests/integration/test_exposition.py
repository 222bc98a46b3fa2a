"""What /metrics serves, and where: the text format 0.0.4, or OpenMetrics 1.0.0 when the scraper
prefers it (its Accept header, with q-values), each byte for byte what prometheus_client writes
for the SnapshotCollector and the process collectors; smllm_exporter_build_info's labels; and
the log line naming every address the server bound.

Debian's promtool (2.42) `check metrics` reads the text format only (on an OpenMetrics body it
takes every counter's `_total` samples for a family without HELP), so the OpenMetrics body is
read with prometheus_client's OpenMetrics parser, which is strict (`# EOF`, counters' `_total`,
a family's samples together), and the text body goes through promtool.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import logging
import os
import socket
import subprocess
import sys

import pytest

from exporter.compiled import switch
from exporter.exposition.build import REVISION_ENV
from exporter.exposition.published import Published
from exporter.exposition.render import (
    CONTENT_TYPE,
    OPENMETRICS_CONTENT_TYPE,
    Renderer,
)
from exporter.web.routes import Site
from exporter.web.server import HttpServer

from support.exposition import (
    PROMETHEUS_ACCEPT,
    snapshot,
)
from support.scrape import http_get
from support.tools import REPO, require_compiled, require_tool


@pytest.mark.parametrize("per_node", [True, False], ids=["histograms per node", "per kind"])
def test_the_text_body_passes_promtool(per_node: bool) -> None:
    promtool = require_tool("promtool")
    snap = dataclasses.replace(snapshot(requests=30), histograms_per_node=per_node)
    body = Renderer("1.2.3").render(snap, 0).body
    done = subprocess.run(
        [promtool, "check", "metrics"], input=body, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (b'smllm_request_duration_seconds_count{kind="extraction",node=' in body) == per_node


async def _get_all(
    pages: Site, requests: list[tuple[str, dict[str, str]]]
) -> list[tuple[int, bytes, dict[str, str]]]:
    server = HttpServer(pages, "127.0.0.1", 0)
    _, port = await server.start()
    try:
        return [
            await asyncio.to_thread(http_get, f"http://127.0.0.1:{port}{path}", headers)
            for path, headers in requests
        ]
    finally:
        await server.close()


def test_metrics_is_served_in_the_format_asked_for() -> None:
    renderer = Renderer("1.2.3")
    pages = Site(metrics=Published(renderer, snapshot(requests=30), 0), ready=lambda: True)
    om_gzip = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
    answers = asyncio.run(
        _get_all(
            pages,
            [
                ("/metrics", {}),
                ("/metrics", {"Accept": PROMETHEUS_ACCEPT}),
                ("/metrics", om_gzip),  # rendered already: from memory, gzipped now
                ("/metrics", om_gzip),
                ("/metrics", {"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "gzip"}),
                ("/metrics", {"Accept": "application/openmetrics-text;q=0"}),
            ],
        )
    )
    (plain, om, om_z, om_z2, plain_z, refused) = answers
    assert all(status == 200 for status, _, _ in answers)
    assert plain[2]["Content-Type"] == CONTENT_TYPE == refused[2]["Content-Type"]
    assert not plain[1].endswith(b"# EOF\n") and plain[1] == refused[1]
    assert om[2]["Content-Type"] == OPENMETRICS_CONTENT_TYPE
    assert OPENMETRICS_CONTENT_TYPE == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    assert om[1].endswith(b"\n# EOF\n") and b"# TYPE smllm_requests counter\n" in om[1]
    # (urllib does not decompress)
    assert om_z[2]["Content-Encoding"] == "gzip" and gzip.decompress(om_z[1]) == om[1]
    assert om_z2[1] == om_z[1] and om_z2[2]["Content-Type"] == OPENMETRICS_CONTENT_TYPE
    assert plain_z[2]["Content-Type"] == CONTENT_TYPE and gzip.decompress(plain_z[1]) == plain[1]


_SERVED_BUILD_INFO = """
import json, sys
sys.path.insert(0, "tests")
from support.exposition import snapshot
from support.exposition import build_info_labels
from exporter.exposition.render import Renderer
print(json.dumps(build_info_labels(Renderer("9.9.9").render(snapshot(requests=5)).body.decode())))
"""


@pytest.mark.parametrize("pure", ["0", "1"])
def test_build_info_compiled_follows_pure_python_and_revision_the_environment(pure: str) -> None:
    if pure == "0":  # (in CI a module not built fails: `make test` builds them)
        require_compiled(switch.speedups, "_speedups")
        require_compiled(switch.accounting, "_accounting")
    env = {**os.environ, switch.ENV: pure, REVISION_ENV: "0123abcd\nsecond line"}
    done = subprocess.run(
        [sys.executable, "-c", _SERVED_BUILD_INFO],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    labels = json.loads(done.stdout)
    assert labels["compiled"] == ("false" if pure == "1" else "true")
    assert labels["revision"] == "0123abcd"  # its first line
    assert labels["version"] == "9.9.9"


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


async def _bound(host: str) -> tuple[list[tuple[str, int]], int]:
    server = HttpServer(Site(), host, 0)
    _, port = await server.start()
    try:
        addresses = [(str(s.getsockname()[0]), int(s.getsockname()[1])) for s in server._listeners]
        for address, _ in addresses:  # each one answers
            url = f"[{address}]" if ":" in address else address
            status, _, _ = await asyncio.to_thread(http_get, f"http://{url}:{port}/-/healthy")
            assert status == 200
        return addresses, port
    finally:
        await server.close()


def test_the_log_names_every_address_bound(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="exporter.web.server")
    hosts = ["127.0.0.1"] + (["::1"] if _has_ipv6_loopback() else [])
    for host in hosts:
        caplog.clear()
        addresses, port = asyncio.run(_bound(host))
        lines = [r.getMessage() for r in caplog.records if r.name == "exporter.web.server"]
        url = f"[{host}]" if ":" in host else host
        assert lines == [f"listening on http://{url}:{port}/metrics"]
        assert addresses == [(host, port)]


def test_every_address_of_a_name_is_bound_on_one_port_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`localhost` (127.0.0.1, and ::1 where the resolver gives it): port 0 picks one port, the
    same for every address, and each is logged."""
    caplog.set_level(logging.INFO, logger="exporter.web.server")
    addresses, port = asyncio.run(_bound("localhost"))
    assert addresses and {p for _, p in addresses} == {port}
    lines = [r.getMessage() for r in caplog.records if r.name == "exporter.web.server"]
    want = [
        f"listening on http://{f'[{a}]' if ':' in a else a}:{port}/metrics" for a, _ in addresses
    ]
    assert lines == want
