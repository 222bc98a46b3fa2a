"""A real VictoriaMetrics (Debian's `victoria-metrics`) for the end-to-end tests: started on a free
port with a data path of its own, flushed, queried through its Prometheus API, stopped.

`started` retries on a port clash (VictoriaMetrics cannot report a kernel-chosen port) and fails
with its log when it does not come up; `Victoria` is its HTTP API. Every query passes
`nocache=1`: VictoriaMetrics otherwise moves an instant query less than `-search.latencyOffset`
(30 s) before now back by that much, and may answer from its cache of older results.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.scrape import http_get
from support.tools import free_port, require_tool, wait_for

ATTEMPTS = 5
HEALTHY_WITHIN_S = 30


@dataclass
class Victoria:
    url: str
    log: Path

    def _get(self, path: str, **params: str | float) -> bytes:
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        status, body, _ = http_get(f"{self.url}{path}?{query}", timeout=10)
        assert status == 200, (path, params, status, body[:2000], self.log_text()[-3000:])
        return body

    def get(self, path: str, **params: str | float) -> Any:
        """A Prometheus API answer's data (the answer must be a success)."""
        reply = json.loads(self._get(path, nocache=1, **params))
        assert reply["status"] == "success", (path, params, reply)
        return reply["data"]

    def instant(self, expr: str, at: float) -> list[dict[str, Any]]:
        """An instant query at `at` (seconds since the epoch)."""
        data = self.get("/api/v1/query", query=expr, time=f"{at:.3f}")
        result: list[dict[str, Any]] = data["result"]
        return result

    def import_text(self, body: bytes, **extra_labels: str) -> None:
        """Samples in the Prometheus text format or OpenMetrics (timestamps in seconds), each
        series given `extra_labels`, as `/api/v1/import/prometheus` takes them."""
        query = urllib.parse.urlencode(
            [("extra_label", f"{k}={v}") for k, v in extra_labels.items()]
        )
        request = urllib.request.Request(
            f"{self.url}/api/v1/import/prometheus?{query}", data=body, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert reply.status == 204, (reply.status, reply.read()[:2000])

    def flush(self) -> None:
        """Make every sample received so far visible to queries (`/internal/force_flush`)."""
        self._get("/internal/force_flush")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def binary() -> str:
    return require_tool("victoria-metrics")


def start(
    path: str, flags: Sequence[str], data: Path, log: Path
) -> tuple[subprocess.Popen[bytes], str] | None:
    """VictoriaMetrics on a free port, healthy; None when another process took the port first."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                path,
                *flags,
                f"-storageDataPath={data}",
                f"-httpListenAddr=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if process.poll() is not None:
            return True  # exited: stop waiting
        try:
            status, body, _ = http_get(url + "/health")
        except OSError:
            return False
        return status == 200 and body.strip() == b"OK"

    try:
        wait_for(healthy, HEALTHY_WITHIN_S, "victoria-metrics to be healthy")
    except BaseException:
        terminate(process)
        raise
    if process.poll() is None:
        return process, url
    if "address already in use" in log.read_text(errors="replace"):
        return None
    pytest.fail(f"victoria-metrics did not start:\n{log.read_text(errors='replace')}")


def terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@contextmanager
def started(flags: Sequence[str], directory: Path) -> Iterator[Victoria]:
    """VictoriaMetrics with `flags` (no -storageDataPath nor -httpListenAddr: these are its
    own), its data and log in `directory`, until the block ends."""
    path = binary()
    for attempt in range(ATTEMPTS):
        log = directory / f"victoria-metrics{attempt}.log"
        got = start(path, flags, directory / f"vmdata{attempt}", log)
        if got is not None:
            break
    else:
        pytest.fail(f"no free port for victoria-metrics after {ATTEMPTS} tries")
    process, url = got
    try:
        yield Victoria(url, log)
    finally:
        terminate(process)
