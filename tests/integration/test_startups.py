"""`report --startups` on a real journal (written by systemd-journal-remote) gives what it gives
on that journal's dump."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.startup.llama import DONE, STOPPED

from support.recorded import entries
from support.startups import Done


def journal_export(runs: list[str]) -> bytes:
    """The recorded entries, every field as the recording holds it (systemd's lines with
    `UNIT=`, `_PID=1` and `_SYSTEMD_UNIT=init.scope`), in journal export format."""
    out = bytearray()
    for run in runs:
        for e in entries(run):
            for key, value in e.items():
                if key == "__CURSOR":
                    continue
                data = str(value).encode()
                if all(32 <= b < 127 for b in data):
                    out += key.encode() + b"=" + data + b"\n"
                else:
                    out += key.encode() + b"\n" + len(data).to_bytes(8, "little") + data + b"\n"
            out += b"\n"
    return bytes(out)


@pytest.mark.slow
def test_report_startups_reads_them_from_a_real_journal_as_from_its_dump(
    report: Callable[..., Done], tmp_path: Path
) -> None:
    """systemd-journal-remote stores the recorded runs; the `journal` source, matched on the
    unit as `journalctl -u` matches it, reads their start-ups and systemd's lines for the unit
    as the dump gives them."""
    from support.tools import missing

    remote = Path("/lib/systemd/systemd-journal-remote")
    if not os.access(remote, os.X_OK):
        missing(f"{remote} (Debian systemd-journal-remote)")
    runs = ["restart", "embeddings_mean_abort", "parallel"]
    journal = tmp_path / "node.journal"
    done = subprocess.run(
        [str(remote), "-o", str(journal), "-"],
        input=journal_export(runs),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    config = tmp_path / "c.yaml"
    config.write_text(
        json.dumps({"nodes": [{"name": "n", "source": "journal", "files": [str(journal)]}]}),
        encoding="utf-8",
    )
    window = ["--since", "2026-01-01", "--until", "2027-01-01", "--startups", "--format", "json"]
    from_journal = report(*window, "--config", str(config))
    assert from_journal.returncode == 0, from_journal.stderr
    dump = tmp_path / "n.json"
    dump.write_text(
        "".join(json.dumps(e) + "\n" for run in runs for e in entries(run)), encoding="utf-8"
    )
    from_dump = report(*window, "--input", f"n={dump}")
    assert from_dump.returncode == 0, from_dump.stderr
    got, want = json.loads(from_journal.stdout), json.loads(from_dump.stdout)
    assert got["startups"] == want["startups"]
    assert [(r["pid"], r["ended"]) for r in got["startups"]] == [
        (11853, DONE),
        (11980, STOPPED),
        (12123, DONE),
        (12195, DONE),
    ]
    assert all(r["first_mark"] == "started" for r in got["startups"])
