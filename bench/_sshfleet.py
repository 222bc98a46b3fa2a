"""Many nodes' `journalctl` over SSH in a process of its own, and what the exporter needs for them.

The server process (`python bench/_sshfleet.py NODES DIR [--old] [--t0 US]`; `Fleet` starts
it): NODES asyncssh servers on 127.0.0.1 (`_journalctl.Node`, each on a port the kernel picks),
with the host key and the authorised client key that `Keys.write` left in DIR. Every node's
journal starts at T0 (microseconds; default now, to the second), so a T0 in the past gives each
node a backlog of requests before the exporter starts. It prints one JSON line (the ports, the
nodes' names, T0), then answers each line read on its standard input with one JSON line:

- `end`: every node's journal ends after the requests started by now (`_fleet.EndingJournal`);
  the answer is how many requests each node has in all: what the exporter must count;
- anything else: each node's `Counts` (bytes sent, the same entries unfiltered, requests sent).

It ends at the end of its input.

`Fleet` is the client side: the keys generated and written, the server started, one
`known_hosts` for every node (as `sm-llm-exporter known-hosts` prints one for a fleet), the
nodes' rows for the exporter's config.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from _fleet import EndingJournal
from _journalctl import UNIT, Keys, Node, now_us

from exporter.base.times import SECOND

STOP_S = 20.0  # for the server to exit at the end of its input


async def serve(nodes: int, directory: Path, old: bool, t0_us: int | None = None) -> None:
    """The nodes' servers; their ports on stdout, then an answer for every line read."""
    keys = Keys.read(directory)
    t0 = (now_us() if t0_us is None else t0_us) // SECOND * SECOND
    journals = [EndingJournal(i, t0) for i in range(nodes)]
    served = [Node(journal, old=old) for journal in journals]
    ports = [await node.listen(keys) for node in served]
    print(json.dumps({"ports": ports, "names": [j.name for j in journals], "t0": t0}), flush=True)
    while True:  # one JSON line per line read; end on EOF
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            break
        if line.strip() == "end":
            now = now_us()
            print(json.dumps({j.name: j.end(now) for j in journals}), flush=True)
        else:
            print(json.dumps({n.journal.name: asdict(n.counts) for n in served}), flush=True)
    for node in served:
        if node.acceptor is not None:
            node.acceptor.close()


class Fleet:
    """The server process of `nodes` nodes, with keys and known_hosts in `directory`."""

    def __init__(
        self, directory: Path, nodes: int, *, old: bool = False, t0_us: int | None = None
    ) -> None:
        keys = Keys.generate()
        self.client_key = keys.write(directory)
        command = [sys.executable, __file__, str(nodes), str(directory)]
        command += [*(["--old"] if old else []), *(["--t0", str(t0_us)] if t0_us else [])]
        self.server = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            hello = self._read()
        except BaseException:
            self.close()
            raise
        self.ports: list[int] = hello["ports"]
        self.names: list[str] = hello["names"]
        self.t0_us: int = hello["t0"]
        self.known_hosts = keys.known_hosts(directory / "known_hosts", self.ports)

    @property
    def pid(self) -> int:
        return self.server.pid

    def pids(self) -> list[int]:
        """The processes standing in for the nodes: the server."""
        return [self.server.pid]

    def down(self) -> str | None:
        """What went wrong with the server; None while it runs."""
        code = self.server.poll()
        return None if code is None else f"the ssh servers exited ({code})"

    def rows(self) -> list[dict[str, Any]]:
        """The nodes as the exporter's config lists them."""
        return [
            {
                "name": name,
                "source": "ssh",
                "host": "127.0.0.1",
                "port": port,
                "user": "bench",
                "unit": UNIT,
                "known_hosts": str(self.known_hosts),
                "client_keys": [str(self.client_key)],
            }
            for name, port in zip(self.names, self.ports, strict=True)
        ]

    def _read(self) -> Any:
        assert self.server.stdout is not None
        line = self.server.stdout.readline()
        if not line:
            raise RuntimeError(f"the ssh servers exited ({self.server.poll()})")
        return json.loads(line)

    def _ask(self, what: str) -> Any:
        assert self.server.stdin is not None
        self.server.stdin.write(f"{what}\n")
        self.server.stdin.flush()
        return self._read()

    def stats(self) -> dict[str, dict[str, int]]:
        """Each node's `Counts` so far."""
        stats: dict[str, dict[str, int]] = self._ask("stats")
        return stats

    def end(self) -> dict[str, int]:
        """End every node's journal after the requests started by now: their number, a node."""
        written: dict[str, int] = self._ask("end")
        return written

    def close(self) -> None:
        """The end of the server's input, then its exit (killed if it takes too long)."""
        if self.server.stdin is not None and not self.server.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.server.stdin.close()
        try:
            self.server.wait(STOP_S)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("nodes", type=int)
    ap.add_argument("dir", type=Path)
    ap.add_argument("--old", action="store_true")
    ap.add_argument("--t0", type=int, help="the journals' start, in microseconds")
    args = ap.parse_args(argv)
    asyncio.run(serve(args.nodes, args.dir, args.old, args.t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
