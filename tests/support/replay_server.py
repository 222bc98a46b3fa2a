"""A stand-in llama-server for the service tests: it prints a recorded real run's lines again,
with their recorded pace, as `sm-llm.service`'s ExecStart (so journald stamps and stores them as
it does a real server's: `_TRANSPORT=stdout`, `SYSLOG_IDENTIFIER`, `PRIORITY=6`), then waits to
be stopped. A replay, not llama-server itself: building llama-server takes 11 minutes here, and
the recording (tests/testdata/llama-server/) is its real output.

Usage: python3 replay_server.py RECORDED.journal.json
"""

from __future__ import annotations

import json
import signal
import sys
import time

UNIT = "sm-llm.service"


def server_lines(path: str) -> list[tuple[int, str]]:
    """(recorded time in µs, message) of each line the recorded server itself wrote while it
    served: up to its stop (what it says as it exits, it says when this one is stopped)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("_SYSTEMD_UNIT") == "init.scope" and str(rec.get("MESSAGE")).startswith(
                "Stopping "
            ):
                break
            if rec.get("_SYSTEMD_UNIT") == UNIT and rec.get("_TRANSPORT") == "stdout":
                out.append((int(rec["__REALTIME_TIMESTAMP"]), str(rec["MESSAGE"])))
    return out


def main() -> None:
    lines = server_lines(sys.argv[1])
    began, first = time.monotonic(), lines[0][0] if lines else 0
    for at_us, message in lines:
        delay = began + (at_us - first) / 1e6 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        print(message, flush=True)
    signal.pause()  # (a server runs until it is stopped: SIGTERM ends it)


if __name__ == "__main__":
    main()
