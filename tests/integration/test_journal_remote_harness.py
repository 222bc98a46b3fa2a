"""Real systemd-journal-upload to a real systemd-journal-remote: hosts on one machine, each in
a network namespace of its own (support.journal_remote).

Covered: three hosts upload a journal each, and the collector writes one file per host, in
which every entry of that host is found exactly once, with its fields and times as the host's
own journal has them (cursors new); hosts behind one address share a file and are told apart by
`_HOSTNAME`; a run resumed from `--save-state` sends the entry at the saved cursor again, and an
entry uploaded twice is stored twice; a follower sends entries as they are written.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.base.times import SECOND

from support.certs import Authority
from support.journal_remote import Collector, Identity, write_host_journal
from support.journals import T0, count_in, ent, journal_json, workload
from support.tools import wait_for

pytestmark = pytest.mark.slow

MINUTE = 60 * SECOND
NEW_IN_COLLECTOR = ("__CURSOR", "__SEQNUM", "__SEQNUM_ID")  # (the file's own, not the host's)
WAIT_S = 30.0


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[Collector]:
    with Collector(tmp_path / "collected", Authority(tmp_path / "certs")) as c:
        yield c


def kept(entry: dict[str, Any]) -> str:
    """An entry as the collector must keep it: every field and time but the cursor."""
    return json.dumps({k: v for k, v in entry.items() if k not in NEW_IN_COLLECTOR}, sort_keys=True)


def entries_of(path: Path) -> list[dict[str, Any]]:
    return journal_json("--file", str(path))


def collected(path: Path, at_least: int) -> list[dict[str, Any]]:
    """The entries of a file of the collector's, once it holds `at_least` of them."""
    wait_for(lambda: count_in(path) >= at_least, WAIT_S, f"{at_least} entries in {path.name}")
    return entries_of(path)


def by_host(entries: list[dict[str, Any]]) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for e in entries:
        out.setdefault(e["_HOSTNAME"], Counter())[kept(e)] += 1
    return out


def seqnum_id(entry: dict[str, Any]) -> str:
    cursor: str = entry["__CURSOR"]
    return cursor.partition(";")[0]


def saved_cursor(state: Path) -> str:
    lines = [x for x in state.read_text().splitlines() if x.startswith("LAST_CURSOR=")]
    assert len(lines) == 1, state.read_text()
    return lines[0].removeprefix("LAST_CURSOR=")


def test_three_hosts_one_file_each_every_entry_once(collector: Collector, tmp_path: Path) -> None:
    names = ("gpu-a", "gpu-b", "gpu-c")
    sources: dict[str, Path] = {}
    for i, name in enumerate(names):
        sources[name] = tmp_path / name / "system.journal"
        entries = workload(100 + i, T0, T0 + 22 * MINUTE)  # about 1,000 entries
        write_host_journal(sources[name], entries, Identity.of(name))
    hosts = [collector.host(name) for name in names]
    assert len({h.address for h in hosts}) == 3
    for h in hosts:
        h.upload(file=sources[h.name])

    everything: list[dict[str, Any]] = []
    for h in hosts:
        sent = entries_of(sources[h.name])
        assert len(sent) >= 900
        got = collected(h.file, len(sent))
        who = Identity.of(h.name)
        assert {(e["_HOSTNAME"], e["_MACHINE_ID"], e["_BOOT_ID"]) for e in got} == {
            (who.hostname, who.machine_id, who.boot_id)
        }, f"{h.file.name} holds another host's entries"
        assert Counter(kept(e) for e in got) == Counter(kept(e) for e in sent), h.name
        assert {seqnum_id(e) for e in got}.isdisjoint(seqnum_id(e) for e in sent)
        everything += got
    assert collector.files() == sorted(h.file for h in hosts)
    # one reader of the whole directory tells the hosts apart by _HOSTNAME alone
    assert by_host(everything) == {
        name: Counter(kept(e) for e in entries_of(path)) for name, path in sources.items()
    }


def test_one_address_shares_a_file_and_repeats_are_kept(
    collector: Collector, tmp_path: Path
) -> None:
    gateway = collector.host("gateway")  # two hosts behind one address, as behind NAT
    d, e = Identity.of("gpu-d"), Identity.of("gpu-e")
    journal_d, journal_e = tmp_path / "gpu-d.journal", tmp_path / "gpu-e.journal"
    write_host_journal(journal_d, workload(7, T0, T0 + 4 * MINUTE), d)
    write_host_journal(journal_e, workload(8, T0, T0 + 4 * MINUTE), e)
    state = tmp_path / "gpu-d.state"
    gateway.upload(file=journal_d, state=state)
    gateway.upload(file=journal_e)

    sent_d, sent_e = entries_of(journal_d), entries_of(journal_e)
    got = collected(gateway.file, len(sent_d) + len(sent_e))
    assert collector.files() == [gateway.file]
    assert by_host(got) == {
        "gpu-d": Counter(kept(x) for x in sent_d),
        "gpu-e": Counter(kept(x) for x in sent_e),
    }
    cursor = saved_cursor(state)
    assert cursor == sent_d[-1]["__CURSOR"]  # the host's own cursor of the last entry sent

    # resumed from the state file: the new entries once, and the saved cursor's entry again
    later = [ent(T0 + 10 * MINUTE + k * SECOND, f"srv  later line {k}") for k in range(20)]
    write_host_journal(journal_d, later, d)
    gateway.upload(file=journal_d, state=state)
    sent_d = entries_of(journal_d)
    expected = Counter(kept(x) for x in sent_d)
    expected[kept(next(x for x in sent_d if x["__CURSOR"] == cursor))] += 1
    got = collected(gateway.file, sum(expected.values()) + len(sent_e))
    assert by_host(got)["gpu-d"] == expected
    assert saved_cursor(state) == sent_d[-1]["__CURSOR"]

    # sent again without a state file: journal-remote stores every entry a second time
    gateway.upload(file=journal_d)
    expected += Counter(kept(x) for x in sent_d)
    got = collected(gateway.file, sum(expected.values()) + len(sent_e))
    assert by_host(got) == {"gpu-d": expected, "gpu-e": Counter(kept(x) for x in sent_e)}


def test_a_follower_sends_entries_as_they_are_written(collector: Collector, tmp_path: Path) -> None:
    host = collector.host("gpu-f")
    who = Identity.of("gpu-f")
    directory = tmp_path / "gpu-f"
    path = directory / "system.journal"
    entries = workload(9, T0, T0 + 6 * MINUTE)
    write_host_journal(path, entries[:100], who)
    state = tmp_path / "gpu-f.state"
    follower = host.follow(directory, state)
    collected(host.file, 100)
    for chunk in (entries[100:150], entries[150:]):
        write_host_journal(path, chunk, who)
        wait_for(
            lambda: count_in(host.file) >= count_in(path) or not follower.running(),
            WAIT_S,
            "the follower to send what was written",
        )
        assert follower.running(), follower.stop()
    code, err = follower.stop()
    assert code == 0, err
    sent = entries_of(path)
    assert Counter(kept(x) for x in entries_of(host.file)) == Counter(kept(x) for x in sent)
    assert saved_cursor(state) == sent[-1]["__CURSOR"]
