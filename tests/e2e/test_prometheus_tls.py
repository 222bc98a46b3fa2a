"""A real Prometheus scrapes the real daemon through the exporter-toolkit web config (issue 17).

Two daemons, each a process (tests/support/daemon_process.py) following one empty file node:

- `basic`: TLS (a server certificate for 127.0.0.1 and localhost from the test's CA) and basic
  auth (one bcrypt user); its web config named by the config's `web_config_file`;
- `mtls`: TLS with client_auth_type RequireAndVerifyClientCert, client_ca_file the test's CA and
  client_allowed_sans the name of Prometheus's client certificate; its web config given as
  `--web.config.file`.

Debian's `prometheus` on 127.0.0.1 scrapes them every second in four jobs: `basic` with the
right password (server_name localhost) and `wrong-password` (the 127.0.0.1 SAN) on the first;
`mtls` with a client certificate and `mtls-no-client-cert` (the CA only) on the second. Once
every job has been scraped FAILED_SCRAPES times: every scrape of `basic` and `mtls` worked (`up`
1 throughout, the daemon's smllm_exporter_build_info stored), every scrape of the other two
failed (`up` 0 throughout, the target's last error the 401 or the refused handshake), and the
first daemon logged its refusals once, however many there were (at most once a minute).
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from exporter.web.auth import hash_password
from exporter.web.gate import REFUSALS_LOG_EVERY_S

from support import prometheus as prom
from support.certs import Authority, Pair
from support.daemon_process import SERVING, DaemonProcess, file_nodes, run_command
from support.tools import poll

pytestmark = pytest.mark.slow

USER, PASSWORD = "prometheus", "the right password"
CLIENT_SAN = "prometheus.scrapers.test"
SCRAPE_S = 1
FAILED_SCRAPES = 5  # of each failing job, before the refusals are counted in the log
SETTLE_S = 40  # for every job to be scraped FAILED_SCRAPES times (about 7 s here)
JOBS = ("basic", "wrong-password", "mtls", "mtls-no-client-cert")
REFUSAL_LINE = "requests refused (401: no, unknown or wrong credentials)"
HANDSHAKE_CUT = re.compile(r"remote error: tls: |: EOF$|connection reset by peer")
FIRST_REFUSAL = re.compile(r": 1 since the last such line \(the last from 127\.0\.0\.1:\d+\)")


# -- the test's own client (readiness) ----------------------------------------------------------


@dataclass(frozen=True)
class Client:
    """How the test itself reaches a daemon through TLS: the CA, a client certificate, a user."""

    ca: Path
    cert: Pair | None = None
    auth: tuple[str, str] | None = None

    def get(self, port: int, path: str) -> tuple[int, bytes] | None:
        """Status and body of a GET over TLS, or None when nothing answers."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if self.cert is not None:
            context.load_cert_chain(self.cert.cert, self.cert.key)
        headers = {}
        if self.auth is not None:
            token = base64.b64encode(":".join(self.auth).encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
        try:
            conn.request("GET", path, headers=headers)
            reply = conn.getresponse()
            return reply.status, reply.read()
        except (OSError, http.client.HTTPException):
            return None
        finally:
            conn.close()


class TlsDaemon(DaemonProcess):
    """A DaemonProcess whose readiness is asked through TLS, as `client` (over plain HTTP its
    /-/ready answers 400)."""

    def __init__(
        self,
        directory: Path,
        config: dict[str, Any],
        client: Client,
        command: Callable[[Path], list[str]] = run_command,
    ) -> None:
        super().__init__(directory, config, command=command)
        self.client = client

    def ready_or_gone(self) -> str | None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            return "gone"
        bound = SERVING.search(self.log_text())
        if bound is None or int(bound[1]) != self.port:
            return None
        got = self.client.get(self.port, "/-/ready")
        return "ready" if got is not None and got[0] == 200 else None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


def scrape_configs(
    ca: Path, client: Pair, basic: TlsDaemon, mtls: TlsDaemon
) -> list[dict[str, Any]]:
    def job(name: str, daemon: TlsDaemon, **more: Any) -> dict[str, Any]:
        return {
            "job_name": name,
            "scheme": "https",
            "static_configs": [{"targets": [daemon.target]}],
            **more,
        }

    return [
        job(
            "basic",
            basic,
            tls_config={"ca_file": str(ca), "server_name": "localhost"},
            basic_auth={"username": USER, "password": PASSWORD},
        ),
        job(
            "wrong-password",
            basic,
            tls_config={"ca_file": str(ca)},
            basic_auth={"username": USER, "password": "not " + PASSWORD},
        ),
        job(
            "mtls",
            mtls,
            tls_config={
                "ca_file": str(ca),
                "cert_file": str(client.cert),
                "key_file": str(client.key),
            },
        ),
        job("mtls-no-client-cert", mtls, tls_config={"ca_file": str(ca)}),
    ]


# -- the scene ----------------------------------------------------------------------------------


@dataclass
class Scene:
    prometheus: prom.Api
    basic: TlsDaemon
    mtls: TlsDaemon
    first_refusal_at: float  # (monotonic) before Prometheus's first scrape
    up: dict[str, float]  # each job's `up`, once every job was scraped FAILED_SCRAPES times
    scrapes: dict[str, float]  # each job's `up` samples
    lowest: dict[str, float]  # each job's lowest `up`
    highest: dict[str, float]
    errors: dict[str, str]  # each job's target's last error


def settled(prometheus: prom.Api, scene: dict[str, Any]) -> bool:
    """Notes what Prometheus has in `scene`; True once every job has FAILED_SCRAPES scrapes."""
    window = f"[{5 * 60}s]"
    scene["up"] = prometheus.by_job("up")
    scene["scrapes"] = prometheus.by_job(f"count_over_time(up{window})")
    scene["lowest"] = prometheus.by_job(f"min_over_time(up{window})")
    scene["highest"] = prometheus.by_job(f"max_over_time(up{window})")
    scene["errors"] = prometheus.last_errors()
    return all(scene["scrapes"].get(job, 0) >= FAILED_SCRAPES for job in JOBS)


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    prom.binary()  # (fails in CI, skips elsewhere, when it is missing)
    tmp = tmp_path_factory.mktemp("prometheus-tls")
    ca = Authority(tmp / "certs")
    server = ca.server()
    client = ca.client("prometheus", CLIENT_SAN)
    dump = tmp / "a.log"
    dump.write_text("")
    nodes = file_nodes({"a": dump})
    tls = {"cert_file": str(server.cert), "key_file": str(server.key)}

    basic_web = tmp / "basic-web.yml"
    basic_web.write_text(
        json.dumps(
            {
                "tls_server_config": tls,
                "basic_auth_users": {USER: hash_password(PASSWORD.encode(), 8)},
            }
        )
    )
    mtls_web = tmp / "mtls-web.yml"
    mtls_web.write_text(
        json.dumps(
            {
                "tls_server_config": {
                    **tls,
                    "client_auth_type": "RequireAndVerifyClientCert",
                    "client_ca_file": str(ca.path),
                    "client_allowed_sans": [CLIENT_SAN],
                }
            }
        )
    )

    def with_web_flag(config: Path) -> list[str]:
        return [*run_command(config), "--web.config.file", str(mtls_web)]

    basic = TlsDaemon(
        tmp / "basic",
        {"nodes": nodes, "web_config_file": str(basic_web)},
        Client(ca.path, auth=(USER, PASSWORD)),
    )
    mtls = TlsDaemon(tmp / "mtls", {"nodes": nodes}, Client(ca.path, client), with_web_flag)
    try:
        basic.start()
        mtls.start()
        config = tmp / "prometheus.yml"
        config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": f"{SCRAPE_S}s"},
                    "scrape_configs": scrape_configs(ca.path, client, basic, mtls),
                }
            )
        )
        first_refusal_at = time.monotonic()
        with prom.started(config, tmp) as prometheus:
            seen: dict[str, Any] = {}
            poll(lambda: settled(prometheus, seen), SETTLE_S, 0.25)
            yield Scene(prometheus, basic, mtls, first_refusal_at, **seen)
    finally:
        basic.close(grace=10)
        mtls.close(grace=10)


def enough_scrapes(scene: Scene, job: str) -> None:
    scrapes = scene.scrapes.get(job, 0)
    assert scrapes >= FAILED_SCRAPES, (
        f"job {job}: {scrapes} scrapes in {SETTLE_S} s, not {FAILED_SCRAPES} "
        f"(every job's: {scene.scrapes}; last errors: {scene.errors})"
    )


def always_up(scene: Scene, job: str) -> None:
    enough_scrapes(scene, job)
    assert scene.up.get(job) == 1 and scene.lowest.get(job) == 1, (
        f"job {job}: up {scene.up.get(job)}, lowest {scene.lowest.get(job)} over "
        f"{scene.scrapes[job]} scrapes: not every scrape worked; last error: "
        f"{scene.errors.get(job)!r}"
    )
    # what it scraped is the daemon's: its build_info, stored under this job
    info = scene.prometheus.by_job(f'smllm_exporter_build_info{{job="{job}"}}')
    assert info == {job: 1}, f"job {job}: smllm_exporter_build_info not stored: {info}"


def never_up(scene: Scene, job: str) -> str:
    """Every scrape of `job` failed; its target's last error."""
    enough_scrapes(scene, job)
    assert scene.up.get(job) == 0 and scene.highest.get(job) == 0, (
        f"job {job}: up {scene.up.get(job)}, highest {scene.highest.get(job)} over "
        f"{scene.scrapes[job]} scrapes: a scrape that should have been refused worked"
    )
    return scene.errors.get(job, "")


def test_tls_with_basic_auth_is_scraped(scene: Scene) -> None:
    always_up(scene, "basic")


def test_mutual_tls_is_scraped(scene: Scene) -> None:
    always_up(scene, "mtls")


def test_wrong_password_is_refused_and_logged_once(scene: Scene) -> None:
    error = never_up(scene, "wrong-password")
    assert "401" in error, f"wrong-password: refused, but not with a 401: {error!r}"
    # Prometheus was refused FAILED_SCRAPES times or more; the daemon said so once (the first
    # refusal, at once), and keeps quiet for a minute
    elapsed = time.monotonic() - scene.first_refusal_at
    assert elapsed < REFUSALS_LOG_EVERY_S, (
        f"{elapsed:.0f} s since the first refusal: too slow to show the once-a-minute limit"
    )
    text = scene.basic.log_text()
    lines = [line for line in text.splitlines() if REFUSAL_LINE in line]
    assert len(lines) == 1, (
        f"{len(lines)} refusal lines for {scene.scrapes['wrong-password']:.0f} refused scrapes "
        f"in {elapsed:.0f} s (at most one a minute):\n" + "\n".join(lines)
    )
    assert FIRST_REFUSAL.search(lines[0]), (
        f"the first refusal is not logged as the first, with its client: {lines[0]}"
    )
    assert "Traceback" not in text, text[-3000:]


def test_mutual_tls_without_a_client_certificate_is_refused(scene: Scene) -> None:
    error = never_up(scene, "mtls-no-client-cert")
    # The daemon cut the handshake (the job `mtls` differs from this one by its certificate
    # only): not a server certificate Prometheus distrusts (x509), nor an HTTP refusal. A Go
    # server sends the alert ("remote error: tls: certificate required"); asyncio's SSL
    # transport drops it (CPython gh-98078), so Prometheus sees the connection end instead.
    assert HANDSHAKE_CUT.search(error) and "x509" not in error, (
        f"mtls-no-client-cert: not refused in the handshake: {error!r}"
    )
    assert "Traceback" not in scene.mtls.log_text(), scene.mtls.log_text()[-3000:]
