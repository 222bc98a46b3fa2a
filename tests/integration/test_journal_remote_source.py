"""The `journal-remote` source end to end: three hosts upload their journals with real
systemd-journal-upload to a real systemd-journal-remote (HTTPS, `--split-mode=host`, the
certificates made here, each host in a network namespace of its own: support.journal_remote),
and the daemon follows the collector's directory.

Covered: the daemon's counters for each node equal those of a daemon reading that host's own
journal file (the `journal` kind): every request, token, busy second and entry, the cross-node
figures too; the entry journal-upload sends again after a restart (from its `--save-state`) is
stored twice by the collector and counted once; a host no node names is read into no node.
(Entries that arrive while the daemon runs are covered with the reader itself: here they would
be late, behind the watermark, as a host's upload that lags is.)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from exporter.base.times import SECOND
from exporter.config.schema import Config
from exporter.daemon.daemon import Daemon
from exporter.sources.journal import JournalNode
from exporter.sources.registry import NodeConfig
from exporter.sources.remote import RemoteNode

from support.certs import Authority
from support.daemon_thread import DaemonThread
from support.journal_remote import Collector, Identity, write_host_journal
from support.journals import T0, UNIT, count_in, iso, journal_json, workload
from support.scrape import Samples, parse_metrics, sample
from support.tools import wait_for

pytestmark = pytest.mark.slow

MINUTE = 60 * SECOND
NAMES = ("gpu-a", "gpu-b", "gpu-c")
LAST_US = T0 + 21 * MINUTE  # past every entry written (a node's last comes 10 s after its end)
WAIT_S = 60.0
# what tells one way of reading from another, not what was read
OWN_TO_THE_SOURCE = ("smllm_source_", "smllm_checkpoint_", "smllm_exporter_", "process_")
IDLE = {
    ("smllm_mix_seconds_total", (("mix", "idle"),)),
    ("smllm_concurrency_seconds_total", (("nodes_busy", "0"),)),
}


def config(tmp_path: Path, name: str, nodes: Sequence[NodeConfig]) -> Config:
    return Config(
        state_dir=tmp_path / name,
        listen_host="127.0.0.1",
        listen_port=0,
        since=iso(T0 - SECOND),
        nodes=tuple(nodes),
    )


def unit_entries(path: Path) -> int:
    """The entries of `path` that `journalctl -u` shows for the unit (what a node reads)."""
    return len(journal_json("--file", str(path), "-u", UNIT))


def served(d: DaemonThread, want: dict[str, int]) -> Samples | None:
    """What the daemon serves, once each node has read the entries `want` says and every figure
    is final past the last entry."""
    s = parse_metrics(d.metrics())
    settled = sample(s, "smllm_accounted_until_timestamp_seconds")
    if settled is None or settled * SECOND < LAST_US:
        return None  # (the cross-node figures are not final past the last request yet)
    for node, n in want.items():
        if sample(s, "smllm_source_entries_total", node=node) != n:
            return None
    return s


def counters(s: Samples) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every counter and histogram sample but the source's own, and the idle time, which runs
    on to the watermark: to the wall clock, once every node is read to its end."""
    return {
        key: v
        for key, v in s.items()
        if key[0].endswith(("_total", "_sum", "_count", "_bucket"))
        and not key[0].startswith(OWN_TO_THE_SOURCE)
        and key not in IDLE
    }


def test_three_hosts_uploading_count_as_their_own_journals(tmp_path: Path) -> None:
    own: dict[str, Path] = {n: tmp_path / "hosts" / n / "system.journal" for n in NAMES}
    stray = tmp_path / "hosts" / "stray" / "system.journal"
    states = {n: tmp_path / "hosts" / n / "upload.state" for n in NAMES}
    halves = {}
    for i, name in enumerate(NAMES):
        entries = workload(200 + i, T0, T0 + 20 * MINUTE)
        half = len(entries) // 2
        halves[name] = (entries[:half], entries[half:])
        write_host_journal(own[name], halves[name][0], Identity.of(name))
    write_host_journal(stray, workload(299, T0, T0 + 5 * MINUTE), Identity.of("stray"))

    with Collector(tmp_path / "collected", Authority(tmp_path / "certs")) as collector:
        hosts = {n: collector.host(n) for n in NAMES}
        for name, host in hosts.items():
            host.upload(file=own[name], state=states[name])
            write_host_journal(own[name], halves[name][1], Identity.of(name))
            before = count_in(host.file)
            host.upload(file=own[name], state=states[name])
            # journal-upload sends the entry at its saved cursor again: stored twice
            assert count_in(host.file) - before == len(halves[name][1]) + 1
        collector.host("stray").upload(file=stray)
        assert len(collector.files()) == len(NAMES) + 1
        whole = {n: unit_entries(own[n]) for n in NAMES}
        nodes = [RemoteNode(n, UNIT, collector.directory, n) for n in NAMES]
        with DaemonThread(Daemon(config(tmp_path, "remote", nodes), publish_seconds=0.1)) as d:
            remote = wait_for(lambda: served(d, whole), WAIT_S, "the collector's files read")

    journals = [JournalNode(n, UNIT, files=(own[n],)) for n in NAMES]
    with DaemonThread(Daemon(config(tmp_path, "own", journals), publish_seconds=0.1)) as d:
        reference = wait_for(lambda: served(d, whole), WAIT_S, "the hosts' own journals read")

    assert {k[1] for k in remote if k[0] == "smllm_source_up"} == {(("node", n),) for n in NAMES}
    assert counters(remote) == counters(reference)
    for name in NAMES:
        requests = sample(remote, "smllm_requests_total", node=name, kind="extraction")
        assert requests is not None and requests > 0
