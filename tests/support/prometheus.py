"""A real Prometheus (Debian's) for the end-to-end tests: started on a free port and ready,
queried through its HTTP API, stopped.

`started` retries on a port clash (Prometheus cannot take port 0); `Api` is its query API.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.scrape import http_get
from support.tools import free_port, require_tool, wait_for

ATTEMPTS = 5


@dataclass
class Api:
    url: str

    def get(self, path: str, **params: str | float) -> Any:
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()}, doseq=True)
        status, body, _ = http_get(f"{self.url}{path}?{query}" if query else self.url + path)
        reply = json.loads(body)
        assert status == 200 and reply["status"] == "success", (path, params, reply)
        return reply["data"]

    def instant(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query", query=expr, time=at if at is not None else time.time())
        result: list[dict[str, Any]] = data["result"]
        return result

    def by_job(self, expr: str) -> dict[str, float]:
        """An instant query's values by job."""
        return {s["metric"].get("job", ""): float(s["value"][1]) for s in self.instant(expr)}

    def last_errors(self) -> dict[str, str]:
        """Each job's target's last scrape error ("" when it worked)."""
        targets = self.get("/api/v1/targets")["activeTargets"]
        return {t["labels"]["job"]: t["lastError"] for t in targets}


def binary() -> str:
    return require_tool("prometheus")


def version(path: str) -> tuple[int, ...]:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=True)
    m = re.search(r"version (\d+)\.(\d+)\.(\d+)", out.stdout + out.stderr)
    assert m, out
    return tuple(int(g) for g in m.groups())


def terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def start(
    path: str, config: Path, tsdb: Path, log: Path
) -> tuple[subprocess.Popen[bytes], str] | None:
    """Prometheus on a free port, ready; None when another process took the port first."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                path,
                f"--config.file={config}",
                f"--storage.tsdb.path={tsdb}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            return True  # exited: stop waiting
        try:
            return http_get(url + "/-/ready")[0] == 200
        except OSError:
            return False

    try:
        wait_for(ready, 30, "prometheus to be ready")
    except BaseException:
        terminate(process)
        raise
    if process.poll() is None:
        return process, url
    if "address already in use" in log.read_text():
        return None
    pytest.fail(f"prometheus did not start:\n{log.read_text()}")


@contextmanager
def started(config: Path, directory: Path) -> Iterator[Api]:
    """Prometheus on `config`, its TSDB and log in `directory`, until the block ends."""
    path = binary()
    for attempt in range(ATTEMPTS):
        got = start(
            path, config, directory / f"tsdb{attempt}", directory / f"prometheus{attempt}.log"
        )
        if got is not None:
            break
    else:
        pytest.fail(f"no free port for prometheus after {ATTEMPTS} tries")
    process, url = got
    try:
        yield Api(url)
    finally:
        terminate(process)
