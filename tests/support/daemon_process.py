"""The daemon as a real process (`python -m exporter ...`): started, killed with SIGKILL, stopped
with SIGTERM, started again, as systemd, the OOM killer or a power cut would.

With a `config` (the config file's keys; written as JSON, which is YAML) each start writes it
with `listen: 127.0.0.1:PORT` (and a `state_dir` in `directory` unless it names one): a port
from `free_port`, kept across restarts (as Prometheus expects) and replaced only when another
process took it meanwhile. `command` maps the config
file to the argv (default `python -m exporter run --config FILE`); without a config it is the
whole argv (`demo --listen 127.0.0.1:0`, say) and the port is the one the daemon logs. Each run
writes stdout and stderr to its own log file; the test's own NOTIFY_SOCKET and WATCHDOG_* never
reach it (`env` adds to its environment).
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from exporter.checkpoint.store import NAME as CHECKPOINT_NAME

from support.scrape import Samples, answer, parse_metrics
from support.tools import REPO, free_port, wait_for

SERVING = re.compile(r"serving /metrics on 127\.0\.0\.1:(\d+)\n")
SYSTEMDS_OWN = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def file_nodes(paths: Mapping[str, Path]) -> list[dict[str, str]]:
    """Config rows of `file` nodes."""
    return [{"name": n, "source": "file", "path": str(p)} for n, p in paths.items()]


def run_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "exporter", "run", "--config", str(config)]


class DaemonProcess:
    """See the module docstring; `start` and `kill` / `stop` as often as a test likes."""

    def __init__(
        self,
        directory: Path,
        config: Mapping[str, Any] | None = None,
        *,
        command: Callable[[Path], list[str]] = run_command,
        env: Mapping[str, str] | None = None,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.settings = dict(config) if config is not None else None
        if self.settings is not None:
            self.settings.setdefault("state_dir", str(directory / "state"))
        self.command = command
        self.env = {k: v for k, v in os.environ.items() if k not in SYSTEMDS_OWN} | dict(env or {})
        self.config = directory / "config.yaml"
        self.state_dir = Path((self.settings or {}).get("state_dir", directory / "state"))
        self.port = free_port() if config is not None else 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.serving: int | None = None  # the port, while a run is up and ready
        self.logs: list[Path] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The process of the last run."""
        assert self.proc is not None
        return self.proc.pid

    @property
    def run(self) -> int:
        """Which run this is (1 for the first start)."""
        return len(self.logs)

    def launch(self) -> subprocess.Popen[bytes]:
        """Start a run and return at once (its readiness is the caller's to wait for)."""
        if self.settings is not None:
            self.config.write_text(
                json.dumps({**self.settings, "listen": f"127.0.0.1:{self.port}"})
            )
        log_path = self.directory / f"run-{len(self.logs) + 1:02d}.log"
        self.logs.append(log_path)
        with log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                self.command(self.config),
                cwd=REPO,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return self.proc

    def start(self, timeout: float = 30) -> None:
        """Start a run and wait until it is ready; another port when this one was taken."""
        for _ in range(5):
            proc = self.launch()
            if wait_for(self.ready_or_gone, timeout, f"run {self.run} ready") == "ready":
                self.serving = self.port
                return
            text = self.log_text()
            if self.settings is None or os.strerror(errno.EADDRINUSE).lower() not in text.lower():
                pytest.fail(f"the daemon exited with {proc.returncode}:\n{text[-5000:]}")
            self.port = free_port()  # a clash: someone took the port meanwhile
        pytest.fail("no port the daemon could bind after 5 tries")

    def ready_or_gone(self) -> str | None:
        """`ready` once this run logged that it bound its port (so no other process that took
        the port answers) and answers /-/ready; `gone` once it exited."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            return "gone"
        bound = SERVING.search(self.log_text())
        if bound is None or (self.settings is not None and int(bound[1]) != self.port):
            return None
        self.port = int(bound[1])
        got = answer(self.url + "/-/ready")
        return "ready" if got is not None and got[0] == 200 else None

    def scrape(self) -> str:
        got = answer(self.url + "/metrics")
        assert got is not None and got[0] == 200, f"/metrics: {got}"
        return got[1].decode()

    def metrics(self) -> Samples:
        return parse_metrics(self.scrape())

    def kill(self) -> None:
        """SIGKILL, as the OOM killer or a power cut would."""
        assert self.proc is not None
        self.serving = None
        self.proc.send_signal(signal.SIGKILL)
        rc = self.proc.wait(10)
        assert rc == -signal.SIGKILL, f"run {self.run} ended with {rc} before the kill"

    def terminate(self) -> None:
        """SIGTERM, returning at once (`stopped` waits for the end)."""
        assert self.proc is not None
        self.serving = None
        self.proc.send_signal(signal.SIGTERM)

    def stopped(self, timeout: float = 15) -> str:
        """The run ends cleanly after SIGTERM: exit 0, `stopping` logged, no traceback; its log."""
        assert self.proc is not None
        rc = self.proc.wait(timeout)
        text = self.log_text()
        assert rc == 0 and "stopping" in text and "Traceback" not in text, text[-5000:]
        return text

    def stop_within_a_second(self) -> int:
        """SIGTERM; the process exits cleanly within 1 s (a deadline, not a sleep). Returns when
        the signal was sent, in microseconds since the epoch."""
        assert self.proc is not None
        sent_us = time.time_ns() // 1000
        began = time.monotonic()
        self.terminate()
        self.proc.wait(1.0)  # (TimeoutExpired fails the test)
        assert time.monotonic() - began < 1.0
        self.stopped(0)  # exit 0, `stopping` logged, no traceback
        return sent_us

    def stop(self, timeout: float = 15) -> str:
        """A clean stop (SIGTERM); the run's log."""
        self.terminate()
        return self.stopped(timeout)

    def close(self, grace: float = 0) -> None:
        """End whatever still runs: SIGTERM and `grace` seconds first, if any, then SIGKILL."""
        self.serving = None
        if self.proc is None or self.proc.poll() is not None:
            return
        if grace:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
                return
            except subprocess.TimeoutExpired:
                pass
        self.proc.kill()
        self.proc.wait(10)

    def log_text(self, run: int = 0) -> str:
        """Run `run`'s log (default: the last run's)."""
        return self.logs[run - 1 if run else -1].read_text(errors="replace")

    def checkpoint(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.state_dir / CHECKPOINT_NAME).read_bytes())
        return data

    def __enter__(self) -> DaemonProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
