"""`hosts: seen`: a node for every host whose entries of the unit are in a collector's directory,
made when the config is read, at start and at each reload, from real journal files (written by
Debian's systemd-journal-remote, each host's entries stamped with its `_HOSTNAME`)."""

from __future__ import annotations

import logging
import signal
from collections.abc import Sequence
from pathlib import Path

import pytest

from exporter.base import logs
from exporter.base.times import SECOND, iso
from exporter.commands.seen import with_hosts_seen
from exporter.config.errors import ConfigError
from exporter.config.load import parse
from exporter.sources.remote import RemoteNode

from support.daemon_process import DaemonProcess
from support.journal_remote import Identity, write_host_journal
from support.journals import (
    LAUNCH,
    OTHER,
    T0,
    UNIT,
    Entry,
    ent,
    era_d_total,
    require_journal_tools,
)
from support.scrape import sample
from support.tools import wait_for

WAIT_S = 60.0


@pytest.fixture(autouse=True)
def journal_tools() -> None:
    """systemd-journal-remote, journalctl and systemd-python, or fail in CI / skip elsewhere."""
    require_journal_tools()


def requests(n: int, unit: str = UNIT, start: int = 0) -> list[Entry]:
    """`n` era D requests of `unit`, one a second from T0 + `start` s: launch and total."""
    out = []
    for i in range(start, start + n):
        t = T0 + i * SECOND
        out += [ent(t, LAUNCH.format(i), unit), ent(t + 300_000, era_d_total(i, 100, 30), unit)]
    return out


def upload(directory: Path, address: int, host: str, entries: Sequence[Entry]) -> None:
    """`host`'s entries, as the collector stores what it uploads from 10.77.0.`address`."""
    write_host_journal(directory / f"remote-10.77.0.{address}.journal", entries, Identity.of(host))


def config_text(directory: Path, name: str = "{host}") -> str:
    return f"""\
since: {iso(T0 - SECOND)}
nodes:
  - name: a
    source: journal-remote
    directory: {directory}
    host: gpu-a
  - name: gpu-d
    source: journal-remote
    directory: {directory}
    host: elsewhere
  - name: "{name}"
    source: journal-remote
    directory: {directory}
    hosts: seen
"""


def test_a_node_is_made_for_each_host_seen_with_the_unit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """gpu-a is listed already (it keeps its node); gpu-b gets one; gpu-c has entries of
    another unit only; gpu-d's name is a listed node's; a host name that is no node name (it
    comes from the host's own journal) is skipped, escaped where it is said."""
    caplog.set_level(logging.INFO, logger="exporter.commands.seen")
    collected = tmp_path / "collected"
    for k, host in enumerate(["gpu-a", "gpu-b", "gpu-d", "bad\x1b[31mhost"]):
        upload(collected, 2 + k, host, requests(2))
    upload(collected, 9, "gpu-c", requests(2, OTHER))
    cfg = with_hosts_seen(parse(config_text(collected), "cfg.yaml", {}), "cfg.yaml")
    assert cfg.nodes == (
        RemoteNode("a", UNIT, collected, "gpu-a"),
        RemoteNode("gpu-d", UNIT, collected, "elsewhere"),
        RemoteNode("gpu-b", UNIT, collected, "gpu-b"),
    )
    said = [r.getMessage() for r in caplog.records]
    assert any("4 hosts seen, 1 nodes made" in m for m in said), said
    assert any("no node made, the name gpu-d is another node's" in m for m in said), said
    (bad,) = [r for r in caplog.records if "it makes no valid node name" in r.getMessage()]
    line = logs.TimeFormatter("%(message)s").format(bad)
    assert line.endswith("host bad\\x1b[31mhost skipped: it makes no valid node name"), line


def test_a_directory_that_cannot_be_read_refuses_the_config_or_makes_no_node(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A reload (or a check) is refused; a daemon that starts does so with its other nodes."""
    missing = tmp_path / "not-there"
    cfg = parse(config_text(missing), "cfg.yaml", {})
    with pytest.raises(ConfigError) as e:
        with_hosts_seen(cfg, "cfg.yaml")
    assert e.value.source == "cfg.yaml"
    [problem] = e.value.problems
    assert f"every host seen in the collector's directory {missing}" in problem
    assert "cannot read the directory" in problem
    caplog.set_level(logging.ERROR, logger="exporter.commands.seen")
    started = with_hosts_seen(cfg, "cfg.yaml", refuse=False)
    assert [n.name for n in started.nodes] == ["a", "gpu-d"]
    (said,) = [r.getMessage() for r in caplog.records]
    assert said == f"cfg.yaml: {problem}; no node made from it until a reload"


def test_the_daemon_takes_a_host_seen_since_at_its_reload(tmp_path: Path) -> None:
    collected = tmp_path / "collected"
    upload(collected, 2, "gpu-a", requests(3))
    upload(collected, 3, "gpu-b", requests(4))
    settings = {
        "since": iso(T0 - SECOND),
        "nodes": [
            {"name": "a", "source": "journal-remote", "directory": str(collected), "host": "gpu-a"},
            {
                "name": "lab-{host}",
                "source": "journal-remote",
                "directory": str(collected),
                "hosts": "seen",
            },
        ],
    }
    with DaemonProcess(tmp_path / "daemon", settings) as d:
        d.start()

        def entries(node: str, n: int) -> bool:
            return sample(d.metrics(), "smllm_source_entries_total", node=node) == n

        wait_for(lambda: entries("a", 6) and entries("lab-gpu-b", 8), WAIT_S, "a and b read")
        assert sample(d.metrics(), "smllm_source_up", node="lab-gpu-c") is None
        upload(collected, 4, "gpu-c", requests(5))
        d.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        wait_for(lambda: entries("lab-gpu-c", 10), WAIT_S, "c read after the reload")
        assert entries("a", 6) and entries("lab-gpu-b", 8)
    assert "2 hosts seen" in d.log_text() and "3 hosts seen" in d.log_text()
