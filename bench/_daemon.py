"""The daemon as a process of its own, for a benchmark: started on a config, scraped, stopped.

- `exporter_command`: `sm-llm-exporter` as installed beside an interpreter (its venv's console
  script), or `python -m exporter` where there is none.
- `Daemon`: `sm-llm-exporter run` on a config written from a mapping (as JSON, which is YAML),
  listening on a port of 127.0.0.1 that the kernel picks (read from the daemon's log); `stop`
  asks for a clean exit (SIGTERM), `close` ends whatever still runs.
- `scrape`: /metrics as Prometheus fetches it (gzip accepted), timed to the end of the body;
  `Scrape.samples` parses it only when asked (a scrape loop times, it does not parse); `total`
  sums a sample over the series whose labels include the given ones.
- `poll`: a condition asked again and again until it holds or a deadline passes.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

T = TypeVar("T")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]  # (name, sorted labels) -> value
SERVING = re.compile(rb"serving /metrics on 127\.0\.0\.1:(\d+)\n")
LISTEN = "127.0.0.1:0"  # the kernel picks the port; the daemon logs it
SYSTEMDS_OWN = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")  # never the daemon's
POLL_S = 0.05


def exporter_command(python: str = sys.executable) -> list[str]:
    """`sm-llm-exporter` as installed beside `python` (a venv's console script)."""
    script = Path(python).with_name("sm-llm-exporter")
    return [str(script)] if script.exists() else [python, "-m", "exporter"]


def run_command(config: Path) -> list[str]:
    return [*exporter_command(), "run", "--config", str(config)]


def poll(check: Callable[[], T | None], timeout: float, every: float = POLL_S) -> T | None:
    """`check()` until it returns something truthy (returned) or `timeout` seconds pass (None)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found or time.monotonic() >= deadline:
            return found or None
        time.sleep(every)


class Daemon:
    """One run of the daemon on `config` (`listen` and `state_dir` in `directory` unless the
    mapping names them); `command` makes the argv of the config file's path."""

    def __init__(
        self,
        directory: Path,
        config: Mapping[str, Any],
        *,
        command: Callable[[Path], list[str]] = run_command,
        env: Mapping[str, str] | None = None,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.config = directory / "config.yaml"
        settings = {"listen": LISTEN, "state_dir": str(directory / "state"), **config}
        self.config.write_text(json.dumps(settings))
        self.log = directory / "daemon.log"
        self.argv = command(self.config)
        base = os.environ if env is None else env
        self.env = {k: v for k, v in base.items() if k not in SYSTEMDS_OWN}
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    def launch(self) -> subprocess.Popen[bytes]:
        """Start the run and return at once (`bound` tells when it listens)."""
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return self.proc

    def bound(self) -> int | None:
        """The port, once the daemon logged that it listens."""
        if self.port is None and (m := SERVING.search(self.log.read_bytes())):
            self.port = int(m[1])
        return self.port

    def start(self, timeout: float) -> None:
        """Start the run and wait until it listens; RuntimeError (its log's end) otherwise."""
        proc = self.launch()
        if not poll(lambda: self.bound() or proc.poll() is not None, timeout) or not self.port:
            self.close()
            raise RuntimeError(f"the daemon did not start: {self.log_text()[-3000:]}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float) -> str:
        """SIGTERM, then a clean exit (0, no traceback) within `timeout` seconds: its log;
        RuntimeError otherwise."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout)
        text = self.log_text()
        if rc != 0 or "Traceback" in text:
            raise RuntimeError(f"exited {rc} on SIGTERM: {text[-3000:]}")
        return text

    def close(self, grace: float = 0) -> None:
        """End whatever still runs: SIGTERM and `grace` seconds first, if any, then SIGKILL."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        if grace:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace)
                return
            except subprocess.TimeoutExpired:
                pass
        proc.kill()
        proc.wait()

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse(text: str) -> Samples:
    """Exposition text -> {(sample name, sorted labels): value}."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name` over every series whose labels include `labels`."""
    return sum(
        v
        for (n, lbl), v in samples.items()
        if n == name and all(dict(lbl).get(k) == x for k, x in labels.items())
    )


@dataclass(frozen=True)
class Scrape:
    """One scrape of /metrics: its text, and the seconds from the request to the body's end."""

    text: str
    seconds: float

    @cached_property
    def samples(self) -> Samples:
        return parse(self.text)


def scrape(url: str, timeout: float = 10) -> Scrape:
    """GET `url` as Prometheus does (gzip accepted); an answer other than 200 is an error."""
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout) as r:  # (HTTPError: not 200)
        body, encoding = r.read(), r.headers.get("Content-Encoding")
    seconds = time.perf_counter() - began
    return Scrape((gzip.decompress(body) if encoding == "gzip" else body).decode(), seconds)
