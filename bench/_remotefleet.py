"""Many hosts' journals sent by real systemd-journal-upload to one real systemd-journal-remote.

The collector is the test suite's (tests/support/journal_remote.py, imported from there):
`systemd-journal-remote --listen-https --split-mode=host` in a network namespace of its own,
its server certificate from a CA made here, writing one file per client address into a
directory. That directory is what the exporter reads, as an operator's exporter does.

A network namespace per host is too heavy for thousands of hosts, so the hosts sit behind a
few gateways. A gateway is a network namespace with an address of its own and one
`systemd-journal-upload --follow` of a directory. In that directory one journal file holds the
entries of every host behind the gateway, each entry with its host's `_HOSTNAME`,
`_MACHINE_ID` and `_BOOT_ID`; `systemd-journal-remote -o FILE -` writes it from journal export
format as the entries come due. The collector names its files after the client's address, so
the hosts behind one gateway share one of its files, as hosts behind one NAT address do; the
exporter tells them apart by `_HOSTNAME`, as it must there.

The writer process (`python bench/_remotefleet.py --t0 US --hosts N DIR...`, one DIR a gateway;
`Fleet` starts it): host i (`_fleet.EndingJournal(i, T0)`, named as `_journalctl` names it) is
behind gateway i mod the number of DIRs. It writes each host's entries once their time has
come: the backlog from T0 at once (a second of journal at a time), then as the clock goes, in
time order within each gateway. It prints one JSON line (the hosts' names and the writers'
PIDs), then answers each line read on its standard input with one JSON line:

- `stats`: the entries written so far, and up to what time;
- `end`: every host's journal ends after the requests started by now; the answer is how many
  requests each host has in all (what the exporter must count). It writes the rest of those
  requests, closes the journal files, prints `{"done": ENTRIES}` and exits.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from _fleet import EndingJournal
from _journalctl import ENTRIES_PER_REQUEST, UNIT, NodeJournal, now_us

from exporter.base.times import SECOND

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.certs import Authority  # (the test suite's harness, found there)
from support.journal_remote import (
    JOURNAL_UPLOAD,
    Collector,
    Follower,
)
from support.journals import JOURNAL_REMOTE

TICK_S = 0.2  # how often the writer looks at the clock
SLICE_US = SECOND  # the backlog goes out a second of journal at a time
STOP_S = 30.0  # for the writer to finish and exit
FILE = "hosts.journal"  # a gateway's journal file (and those it rotates to beside it)
N_ENTRIES_AT = 152  # the journal file header's n_entries (little-endian 64-bit)
DROPPED = ("__CURSOR",)  # journal-remote makes its own
# what the harness raises (it is written for pytest)
HARNESS_FAILURES = (pytest.fail.Exception, pytest.skip.Exception)
TOOLS = (("unshare", "util-linux"), ("nsenter", "util-linux"), ("ip", "iproute2"))


def missing() -> list[str]:
    """What this machine lacks for the collector and the gateways (nothing when all is here)."""
    out = [] if os.geteuid() == 0 else ["root (a network namespace per gateway)"]
    for path in (JOURNAL_REMOTE, JOURNAL_UPLOAD):
        if not Path(path).exists():
            out.append(f"{path} (Debian's systemd-journal-remote)")
    out += [f"{tool} ({package})" for tool, package in TOOLS if not _which(tool)]
    return out


def _which(tool: str) -> bool:
    return any(
        os.access(Path(d) / tool, os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep)
    )


def entries_in(directory: Path) -> int:
    """The entries in the journal files of `directory`, from their headers."""
    n = 0
    for path in directory.iterdir():
        if not path.name.endswith((".journal", ".journal~")):
            continue
        try:
            with path.open("rb") as f:
                f.seek(N_ENTRIES_AT)
                head = f.read(8)
        except OSError:
            continue
        if len(head) == 8:
            n += struct.unpack("<Q", head)[0]
    return n


# -- the writer (its own process) -------------------------------------------------------------


class Exporter:
    """A host's entries in export format, as its journald stored them. The host's own fields
    are formatted once: only the times and MESSAGE are an entry's own (the writer of thousands
    of hosts shares the machine with the exporter)."""

    OWN = ("__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "MESSAGE")

    def __init__(self, journal: NodeJournal) -> None:
        self.journal = journal
        record = journal.record(journal.entry(0))
        record["_MACHINE_ID"] = journal.machine
        self.host = "".join(
            f"{k}={v}\n" for k, v in record.items() if k not in DROPPED and k not in self.OWN
        ).encode()

    def __call__(self, seq: int) -> tuple[int, bytes]:
        e = self.journal.entry(seq)
        mono = e.time_us - self.journal.boot_us
        head = f"__REALTIME_TIMESTAMP={e.time_us}\n__MONOTONIC_TIMESTAMP={mono}\n".encode()
        return e.time_us, head + self.host + f"MESSAGE={e.message}\n\n".encode()


class Gateway:
    """One gateway's journal file, written by systemd-journal-remote from export format."""

    def __init__(self, directory: Path, journals: Sequence[EndingJournal]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.journals = journals
        self.exports = [Exporter(j) for j in journals]
        self.next = [0] * len(journals)  # each host's next entry
        with (directory.parent / f"{directory.name}.log").open("wb") as log:
            self.proc = subprocess.Popen(
                [JOURNAL_REMOTE, "-o", str(directory / FILE), "-"],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def write(self, until_us: int) -> int:
        """Every entry due by `until_us`, in time order: how many."""
        due: list[tuple[int, bytes]] = []
        for k, journal in enumerate(self.journals):
            seq, entry = self.next[k], self.exports[k]
            for e in journal.upto(seq, until_us):
                due.append(entry(e.seq))
                seq = e.seq + 1
            self.next[k] = seq
        if due:
            due.sort(key=lambda d: d[0])
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"".join(d[1] for d in due))
            self.proc.stdin.flush()
        return len(due)

    def complete(self) -> bool:
        """Every host's journal written to its end (after `end`)."""
        return all(
            j.limit is not None and seq >= j.limit * ENTRIES_PER_REQUEST
            for j, seq in zip(self.journals, self.next, strict=True)
        )

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(STOP_S)


def write(t0_us: int, hosts: int, directories: Sequence[Path]) -> int:
    """The writer process (see the module's docstring)."""
    journals = [EndingJournal(i, t0_us) for i in range(hosts)]
    gateways = [Gateway(d, journals[g :: len(directories)]) for g, d in enumerate(directories)]
    hello = {"names": [j.name for j in journals], "pids": [g.proc.pid for g in gateways]}
    print(json.dumps(hello), flush=True)
    asked: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            asked.put(line.strip())
        asked.put("")  # the end of the input: stop

    threading.Thread(target=read, daemon=True).start()
    written, until, ending = 0, t0_us, False
    while True:
        while not asked.empty():
            what = asked.get()
            if what == "stats":
                print(json.dumps({"entries": written, "until_us": until}), flush=True)
            elif what == "end":
                now = now_us()
                print(json.dumps({j.name: j.end(now) for j in journals}), flush=True)
                ending = True
            elif not what:
                ending = True
                for j in journals:
                    j.end(0)
        now = now_us()
        until = min(now, until + SLICE_US)
        written += sum(g.write(until) for g in gateways)
        if ending and all(g.complete() for g in gateways):
            break
        if until == now:
            time.sleep(TICK_S)
    codes = [g.close() for g in gateways]
    print(json.dumps({"done": written, "codes": codes}), flush=True)
    return 0 if not any(codes) else 1


# -- the fleet (the benchmark's side) -----------------------------------------------------------


class Fleet:
    """The collector, `gateways` gateways each with its uploader, and the writer of `hosts`
    hosts' journals, from `t0_us` on; all in `directory`."""

    def __init__(self, directory: Path, hosts: int, gateways: int, t0_us: int) -> None:
        self.t0_us = t0_us
        self.directory = directory / "collected"
        self.sources = [directory / "gateways" / f"gw{g}" for g in range(gateways)]
        self.collector: Collector | None = None
        self.followers: list[Follower] = []
        self.writer = subprocess.Popen(
            [sys.executable, __file__, "--t0", str(t0_us), "--hosts", str(hosts)]
            + [str(s) for s in self.sources],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            hello = self._read()
            self.names: list[str] = hello["names"]
            self.writer_pids: list[int] = hello["pids"]
            self.collector = Collector(self.directory, Authority(directory / "certs"))
            for g, source in enumerate(self.sources):
                gateway = self.collector.host(f"gateway{g}")
                state = directory / f"gw{g}.state"
                self.followers.append(gateway.follow(source, state))
        except HARNESS_FAILURES as failed:
            self.close()
            raise RuntimeError(str(failed)) from failed
        except BaseException:
            self.close()
            raise

    def pids(self) -> list[int]:
        """The processes standing in for the hosts: writers, uploaders, the collector."""
        out = [self.writer.pid, *self.writer_pids, *(f.proc.pid for f in self.followers)]
        if self.collector is not None and self.collector.proc is not None:
            out.append(self.collector.proc.pid)
        return out

    def rows(self) -> list[dict[str, Any]]:
        """The hosts as the exporter's config lists them: a node each."""
        return [
            {
                "name": name,
                "source": "journal-remote",
                "directory": str(self.directory),
                "host": name,
                "unit": UNIT,
            }
            for name in self.names
        ]

    def down(self) -> str | None:
        """What went wrong with the uploaders or the collector; None while they all run."""
        for g, f in enumerate(self.followers):
            if not f.running():
                return f"gateway{g}'s journal-upload exited: {f.stop()}"
        c = self.collector
        if c is not None and c.proc is not None and c.proc.poll() is not None:
            return f"journal-remote exited: {c.log()[-2000:]}"
        if self.writer.poll() is not None:
            return f"the writer exited ({self.writer.returncode})"
        return None

    def written(self) -> int:
        """Entries in the gateways' journal files."""
        return sum(entries_in(s) for s in self.sources if s.exists())

    def collected(self) -> int:
        """Entries in the collector's files."""
        return entries_in(self.directory) if self.directory.exists() else 0

    def _read(self) -> Any:
        assert self.writer.stdout is not None
        line = self.writer.stdout.readline()
        if not line:
            raise RuntimeError(f"the writer exited ({self.writer.poll()})")
        return json.loads(line)

    def _ask(self, what: str) -> Any:
        assert self.writer.stdin is not None
        self.writer.stdin.write(f"{what}\n")
        self.writer.stdin.flush()
        return self._read()

    def stats(self) -> dict[str, int]:
        """The entries written so far (`entries`) and up to what time (`until_us`)."""
        stats: dict[str, int] = self._ask("stats")
        return stats

    def end(self) -> dict[str, int]:
        """End every host's journal after the requests started by now: their number, a host."""
        written: dict[str, int] = self._ask("end")
        return written

    def finish(self) -> int:
        """After `end`: wait for the writer to write the rest and exit; the entries written."""
        done: dict[str, Any] = self._read()
        self.writer.wait(STOP_S)
        if any(done["codes"]):
            raise RuntimeError(f"systemd-journal-remote -o exited {done['codes']}")
        entries: int = done["done"]
        return entries

    def close(self) -> None:
        """The writer, the uploaders, the collector and the namespaces, ended."""
        if self.writer.stdin is not None and not self.writer.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.writer.stdin.close()
        try:
            self.writer.wait(STOP_S)
        except subprocess.TimeoutExpired:
            self.writer.kill()
            self.writer.wait()
        if self.collector is not None:
            try:
                self.collector.close()
            except HARNESS_FAILURES as failed:
                raise RuntimeError(str(failed)) from failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--t0", type=int, required=True, help="the journals' start, in microseconds")
    ap.add_argument("--hosts", type=int, required=True)
    ap.add_argument("directories", type=Path, nargs="+", help="a gateway's directory each")
    args = ap.parse_args(argv)
    return write(args.t0, args.hosts, args.directories)


if __name__ == "__main__":
    sys.exit(main())
