"""The service under a real systemd: systemd 252 booted as PID 1 in a container built from this
machine's /usr (`support.nspawn`), the exporter installed as deploy/README.md says, and
`sm-llm.service` a stand-in llama-server that replays a recorded real run's output with its
pace (`support.replay_server`: a replay, since building llama-server takes 11 minutes here),
so its lines reach the exporter as journald stores a real server's.

Checked here: `systemctl start` completes through READY=1 and `systemctl status` shows the
STATUS= line; `systemctl help` opens the installed man pages; the local `journal` source counts the replayed run exactly, and `systemctl stop
sm-llm` shows as the server down; `systemctl reload` after adding a node completes (READY=1
follows RELOADING=1) with no counter going down; the watchdog kills and restarts a frozen
daemon, whose counters resume exact; an SSH node's key and known_hosts, and the TLS files,
reach the dynamic user through `LoadCredential=`; the sandbox lets the daemon write its state
and nothing outside it; `journalctl -p warning` shows its warnings and none of its info lines.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import recorded
from support.certs import Authority
from support.nspawn import Container, booted, wheels
from support.scrape import parse_metrics, sample, total
from support.sshd import Sshd, running_sshd
from support.tools import REPO, free_port, require_tool, wait_for

pytestmark = pytest.mark.slow

RULES = REPO / "deploy" / "prometheus" / "rules.yml"
RUN = "parallel"  # the recorded run the stand-in server replays
EXPORTER = "sm-llm-exporter.service"
DEADLINE_S = 60.0
WATCHDOG_S = 3  # the drop-in's WatchdogSec= (the unit's 30 s, shortened for the test)
SERVER_UNIT = """\
[Unit]
Description=sm-llm llama-server (a replay of a recorded real run, see the test)
[Service]
SyslogIdentifier=llama-server
ExecStart=/usr/bin/python3 /src/tests/support/replay_server.py \
/src/tests/testdata/llama-server/{run}.journal.json
"""


class Service:
    """The booted container with the exporter installed, and what the tests share."""

    def __init__(self, c: Container, port: int, sshd: Sshd) -> None:
        self.c, self.port, self.sshd = c, port, sshd
        self.nodes: list[dict[str, Any]] = [
            {"name": "local", "source": "journal", "unit": "sm-llm.service"}
        ]
        self.extra: dict[str, Any] = {}
        self.scheme = "http"
        self.ca: Path | None = None
        self.stopped: dict[Any, float] | None = None  # the figures once sm-llm stopped

    def write_config(self) -> None:
        config = {
            "listen": f"127.0.0.1:{self.port}",
            "since": "-1h",
            "nodes": self.nodes,
            **self.extra,
        }
        self.c.path("/etc/sm-llm-exporter/config.yaml").write_text(json.dumps(config))
        self.c.path("/etc/sm-llm-exporter/config.yaml").chmod(0o644)

    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = self.c.run("systemctl", *args, check=False, timeout=DEADLINE_S)
        if check and r.returncode != 0:
            log = self.c.run("journalctl", "--no-pager", "-n", "30", "-u", EXPORTER, check=False)
            pytest.fail(f"systemctl {' '.join(args)}: {r.stdout} {r.stderr}\n{log.stdout}")
        return r

    def show(self, prop: str, unit: str = EXPORTER) -> str:
        return self.systemctl("show", "-p", prop, "--value", unit).stdout.strip()

    def when(self, name: str, node: str, value: float) -> dict[Any, float] | None:
        """The samples once `name{node}` is `value`, else None."""
        m = self.metrics()
        return m if m is not None and sample(m, name, node=node) == value else None

    def metrics(self) -> dict[Any, float] | None:
        context = None
        if self.ca is not None:
            context = ssl.create_default_context(cafile=str(self.ca))
        url = f"{self.scheme}://127.0.0.1:{self.port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5, context=context) as r:
                return parse_metrics(r.read().decode())
        except OSError:
            return None


def truth() -> tuple[int, float]:
    """The replayed run's timed requests and their seconds, read from the recording."""
    timed = [o for o in recorded.occupancies(RUN) if o.total_us is not None]
    return len(timed), sum(o.total_us or 0 for o in timed) / 1e6


def counted(service: Service, node: str) -> dict[Any, float] | None:
    """The samples once `node` has counted the whole replayed run."""
    m = service.metrics()
    requests, _ = truth()
    if m is None or total(m, "smllm_requests_total", node=node) < requests:
        return None
    return m


def assert_exact(m: dict[Any, float], node: str) -> None:
    requests, seconds = truth()
    assert total(m, "smllm_requests_total", node=node) == requests
    assert total(m, "smllm_request_seconds_total", node=node) == pytest.approx(seconds, abs=1e-6)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    base = tmp_path_factory.mktemp("systemd")
    wheelhouse = wheels(base / "wheels")
    with (
        running_sshd(base / "sshd") as sshd,
        booted(base, "smllm-service", wheelhouse) as c,
    ):
        c.path("/etc/systemd/system/sm-llm.service").write_text(SERVER_UNIT.format(run=RUN))
        s = Service(c, free_port(), sshd)
        s.write_config()
        s.systemctl("daemon-reload")
        s.systemctl("start", EXPORTER)  # (Type=notify: returns once READY=1 came)
        yield s


def test_start_completes_through_ready_and_status_shows_the_status_line(
    service: Service,
) -> None:
    assert service.show("ActiveState") == "active"
    assert service.show("SubState") == "running"
    assert "sources up" in service.show("StatusText")
    status = service.systemctl("status", "--no-pager", EXPORTER, check=False).stdout
    assert "Active: active (running)" in status
    assert "Status: " in status and "sources up" in status


def test_systemctl_help_opens_the_man_pages(service: Service) -> None:
    """`Documentation=` names the man pages the install put in /usr/local/share/man."""
    shown = service.c.run("systemctl", "help", EXPORTER, check=False, timeout=DEADLINE_S).stdout
    assert "SM-LLM-EXPORTER(1)" in shown and "sm-llm-exporter check-config" in shown, shown
    assert "SM-LLM-EXPORTER.YAML(5)" in shown and "nodes[].host" in shown, shown[-2000:]


def test_the_journal_source_counts_the_replayed_server_exactly(service: Service) -> None:
    service.systemctl("start", "sm-llm.service")
    m = wait_for(lambda: counted(service, "local"), DEADLINE_S, "the replayed run counted")
    assert_exact(m, "local")
    assert sample(m, "smllm_server_up", node="local") == 1
    service.systemctl("stop", "sm-llm.service")
    m = wait_for(lambda: service.when("smllm_server_up", "local", 0), DEADLINE_S, "server down")
    assert_exact(m, "local")  # (and nothing more)
    service.stopped = m


IDLE_MINUTES = 30  # how long promtool holds the figures (SmLlmNodeIdle is for: 10m)
TARGET = 'job="sm-llm-exporter", instance="exporter:10027"'


def idle_alert_test(server_up: float, busy_s: float) -> dict[str, Any]:
    """promtool's test of SmLlmNodeIdle on the stopped node's figures as served (held), beside
    another node busy all the time: no alert expected."""
    series = [
        {"series": f"up{{{TARGET}}}", "values": f"1+0x{IDLE_MINUTES}"},
        {
            "series": f'smllm_concurrency_seconds_total{{{TARGET}, nodes_busy="1"}}',
            "values": f"0+60x{IDLE_MINUTES}",
        },
    ]
    for node, up, busy in (("local", server_up, f"{busy_s:g}+0"), ("other", 1, "0+60")):
        labels = f'{TARGET}, node="{node}"'
        series += [
            {"series": f"smllm_source_up{{{labels}}}", "values": f"1+0x{IDLE_MINUTES}"},
            {"series": f"smllm_server_up{{{labels}}}", "values": f"{up:g}+0x{IDLE_MINUTES}"},
            {
                "series": f"smllm_node_busy_seconds_total{{{labels}}}",
                "values": f"{busy}x{IDLE_MINUTES}",
            },
        ]
    check = {"eval_time": f"{IDLE_MINUTES}m", "alertname": "SmLlmNodeIdle", "exp_alerts": []}
    return {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": [check]}],
    }


def promtool_passes(tests: dict[str, Any], path: Path) -> bool:
    path.write_text(json.dumps(tests))  # (JSON is YAML)
    r = subprocess.run(
        [require_tool("promtool"), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return r.returncode == 0


def test_a_stopped_server_raises_no_idle_alert(service: Service, tmp_path: Path) -> None:
    """The stopped server's figures as the exporter served them, through the real promtool
    and rules.yml: SmLlmNodeIdle stays quiet; the same figures with its server up fire it (the
    check can fail)."""
    m = service.stopped
    assert m is not None
    up = sample(m, "smllm_server_up", node="local")
    busy = total(m, "smllm_node_busy_seconds_total", node="local")
    assert up == 0
    assert promtool_passes(idle_alert_test(up, busy), tmp_path / "stopped_test.yml")
    assert not promtool_passes(idle_alert_test(1, busy), tmp_path / "control_test.yml")


def test_a_reload_that_adds_a_node_completes_and_takes_nothing_back(service: Service) -> None:
    before = wait_for(lambda: counted(service, "local"), DEADLINE_S, "counted")
    dump = service.c.path("/srv/dumps/added.log")
    dump.parent.mkdir(parents=True, exist_ok=True)
    dump.write_text("")
    service.nodes.append({"name": "added", "source": "file", "path": "/srv/dumps/added.log"})
    service.write_config()
    # `systemctl reload` returns once `kill -HUP` has; the daemon's RELOADING=1 may come after
    # it, and the unit stays `reloading` until its READY=1: wait for that, with a deadline
    service.systemctl("reload", EXPORTER)
    reloaded(service)
    after = wait_for(lambda: service.when("smllm_source_up", "added", 1), DEADLINE_S, "added")
    assert total(after, "smllm_requests_total", node="local") == total(
        before, "smllm_requests_total", node="local"
    )
    service.systemctl("reload", EXPORTER)  # (a later reload is not queued behind it)
    reloaded(service)


def reloaded(service: Service) -> None:
    """The unit is `active` again: every RELOADING=1 the daemon sent was followed by READY=1."""
    wait_for(lambda: service.show("ActiveState") == "active" or None, DEADLINE_S, "READY=1")


def test_credentials_reach_the_dynamic_user(service: Service, tmp_path: Path) -> None:
    """The SSH node's key and known_hosts (in /etc/sm-llm-exporter/ssh) and the TLS files (in
    /etc/sm-llm-exporter/tls) come to the service as credentials; the SSH node reads the
    container's own journal through the host's sshd, so it counts the same run."""
    c, sshd = service.c, service.sshd
    ssh = c.path("/etc/sm-llm-exporter/ssh")
    shutil.copy(sshd.client_key, ssh / "id_ed25519")
    sshd.known_hosts(ssh / "known_hosts")
    for f in ssh.iterdir():
        f.chmod(0o600)
    ca = Authority(tmp_path / "ca")
    pair = ca.issue("exporter", ips=("127.0.0.1",), client=False)
    tls = c.path("/etc/sm-llm-exporter/tls")
    shutil.copy(pair.cert, tls / "exporter.crt")
    shutil.copy(pair.key, tls / "exporter.key")
    (tls / "web-config.yml").write_text(
        "tls_server_config:\n  cert_file: tls_exporter.crt\n  key_file: tls_exporter.key\n"
    )
    for f in tls.iterdir():
        f.chmod(0o600)
    journal = c.path("/var/log/journal")
    service.nodes.append(
        {
            "name": "remote",
            "source": "ssh",
            "host": "127.0.0.1",
            "port": sshd.port,
            "user": "root",
            "unit": "sm-llm.service",
            "journal_directory": str(journal),
            "client_keys": ["${CREDENTIALS_DIRECTORY}/ssh_id_ed25519"],
        }
    )
    service.extra["web_config_file"] = "${CREDENTIALS_DIRECTORY}/tls_web-config.yml"
    service.write_config()
    service.systemctl("restart", EXPORTER)  # (credentials are loaded at the start)
    service.scheme, service.ca = "https", ca.path
    m = wait_for(lambda: counted(service, "remote"), DEADLINE_S, "the SSH node counted")
    assert_exact(m, "remote")
    assert sample(m, "smllm_source_up", node="remote") == 1
    # the files stay root's: the service read copies
    assert {f.stat().st_uid for f in [*ssh.iterdir(), *tls.iterdir()]} == {0}


def test_the_sandbox_lets_it_write_its_state_and_nothing_else(service: Service) -> None:
    pid = service.show("MainPID")
    uid = service.c.sh(f"stat -c %u /proc/{pid}").strip()
    assert uid != "0"  # (DynamicUser=)
    probe = f"nsenter -t {pid} -m -S {uid} -G {uid} -- /bin/sh -c"
    state = service.c.sh(f"{probe} 'touch /var/lib/sm-llm-exporter/probe && echo written'")
    assert state.strip() == "written"
    for outside in ("/etc/probe", "/usr/probe", "/opt/probe", "/var/lib/probe", "/root/probe"):
        r = service.c.run("/bin/sh", "-c", f"{probe} 'touch {outside}'", check=False)
        assert r.returncode != 0, outside
    assert service.c.path("/var/lib/private/sm-llm-exporter/checkpoint.json").exists()


def test_journalctl_priority_filters_its_warnings_from_its_info(service: Service) -> None:
    service.nodes.append({"name": "missing", "source": "file", "path": "/srv/dumps/none.log"})
    service.write_config()
    service.systemctl("reload", EXPORTER)
    journal = ["journalctl", "--no-pager", "-o", "cat", "-u", EXPORTER]

    def warned() -> str | None:
        out = service.c.run(*journal, "-p", "warning", check=False).stdout
        return out if "none.log" in out else None

    warnings = wait_for(warned, DEADLINE_S, "the warning of the missing dump")
    assert "serving /metrics" not in warnings  # (an info line)
    every = service.c.run(*journal).stdout
    assert "serving /metrics" in every and "none.log" in every


def test_the_watchdog_restarts_a_frozen_daemon_with_exact_counters(service: Service) -> None:
    """WatchdogSec= shortened by a drop-in (30 s in the unit) so the test waits seconds."""
    dropin = service.c.path(f"/etc/systemd/system/{EXPORTER}.d/watchdog.conf")
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(f"[Service]\nWatchdogSec={WATCHDOG_S}s\nRestartSec=1s\n")
    service.systemctl("daemon-reload")
    service.systemctl("restart", EXPORTER)
    wait_for(lambda: counted(service, "local"), DEADLINE_S, "counted before")
    pid, restarts = service.show("MainPID"), int(service.show("NRestarts"))
    service.c.run("kill", "-STOP", pid)
    wait_for(
        lambda: service.show("MainPID") not in (pid, "0") and service.show("SubState") == "running",
        DEADLINE_S,
        "a new daemon, started by systemd",
    )
    assert int(service.show("NRestarts")) == restarts + 1
    assert (
        "watchdog"
        in service.c.run(
            "journalctl", "--no-pager", "-o", "cat", "-u", EXPORTER, check=False
        ).stdout
    )
    m = wait_for(lambda: counted(service, "local"), DEADLINE_S, "counted after")
    assert_exact(m, "local")
    assert_exact(m, "remote")
