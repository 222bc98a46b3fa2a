"""Init timelines from outside: their names cannot drive a terminal, their files cannot take the
daemon's memory (issue 27).

`report --init-timeline` prints a phase name, a role or a file name with control characters
escaped (`\\x1b`, `\\n`): a table row stays one line. What one timeline reads is bounded in all,
not only file by file: a run directory whose worker files each stay under the 64 MiB a file may
hold, but not together, is refused before any is read, the node and the sum named (the daemon
as a process, on sparse files, its peak memory read from /proc; in-process, with the bound
lowered, on many small files of real phases).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from exporter.sources.inittimeline import InitTimelineNode
from exporter.startup import vllm as inittimeline
from exporter.startup import vllmwatch

from support.cli import Cli
from support.daemon_process import DaemonProcess, file_nodes
from support.tools import wait_for

T0 = 1_790_000_000.0
RAW_CONTROLS = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")
DEADLINE_S = 20.0
MIB = 1 << 20


def phase(name: str, start: float, end: float, pid: int = 11, role: str = "worker") -> str:
    """One line of a worker file, as vllm-omni's init_timeline.py writes it."""
    record = {"name": name, "start": start, "end": end, "stage_id": 0, "pid": pid, "role": role}
    return json.dumps(record) + "\n"


def test_report_init_timeline_escapes_control_characters_in_names(cli: Cli, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "worker_11.jsonl").write_text(
        phase("load\x1b[2J\n2030 FORGED row", T0, T0 + 2)
        + phase("warm\x9b31m\x07up", T0 + 2, T0 + 3, role="w\x1b]0;owned\x07")
    )
    # a file named with ESC, holding a malformed line: its skipped reason names it
    (run / "worker_\x1b[31m.jsonl").write_text('{"name": "x"}\n')
    code, out, err = cli("report", "--init-timeline", str(run))
    assert code == 0, err
    assert not RAW_CONTROLS.search(out), repr(out)
    assert not RAW_CONTROLS.search(err), repr(err)
    rows = [line for line in out.splitlines() if line.startswith("    0 ")]
    assert len(rows) == 2, out  # (each phase one row)
    assert "load\\x1b[2J\\n2030 FORGED" in rows[0]  # (cut at 28 characters, as the seed's)
    assert "w\\x1b]0;owned\\x07" in rows[1] and "warm\\x9b31m\\x07up" in rows[1]
    assert not [line for line in out.splitlines() if line.startswith("2030")]
    assert f"  {run}/worker_\\x1b[31m.jsonl:1: no 'start'" in out.splitlines()
    # as JSON: the names as they are (JSON escapes them), the table escaped like the text's
    code, out, err = cli("report", "--init-timeline", str(run), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert [p["name"] for p in doc["phases"]] == [
        "load\x1b[2J\n2030 FORGED row",
        "warm\x9b31m\x07up",
    ]
    assert not RAW_CONTROLS.search(doc["table"]), doc["table"]
    assert "load\\x1b[2J\\n2030 FORGED" in doc["table"]


def worker_files(run: Path, files: int, lines: int) -> int:
    """`files` worker files of `lines` real phases each; their size in all."""
    run.mkdir(parents=True, exist_ok=True)
    total = 0
    for f in range(files):
        text = "".join(
            phase(f"phase_{i}", T0 + i, T0 + i + 0.5, pid=1000 + f) for i in range(lines)
        )
        (run / f"worker_{1000 + f}.jsonl").write_text(text)
        total += len(text.encode())
    return total


def test_worker_files_over_the_total_are_refused_naming_node_and_sum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    total = worker_files(run, 40, 10)  # (each file ~1 KiB, under the bound a file may hold)
    node = InitTimelineNode("omni", run)
    loaded = vllmwatch.read(node)
    assert isinstance(loaded, inittimeline.Loaded) and len(loaded.timeline.phases) == 400
    # (raising=False: where there is no such bound the node reads them all, and this fails)
    monkeypatch.setattr(inittimeline, "MAX_TOTAL_BYTES", total - 1, raising=False)
    error = vllmwatch.read(node)
    assert error == (
        f"init-timeline node omni: {run}: 40 files of {total} bytes in all, over the "
        f"{total - 1} bytes one timeline may read; refused (move the worker files of old "
        "start-ups away)"
    )
    monkeypatch.setattr(inittimeline, "MAX_TOTAL_BYTES", total)
    loaded = vllmwatch.read(node)
    assert isinstance(loaded, inittimeline.Loaded) and len(loaded.timeline.phases) == 400


def test_a_run_directory_with_too_many_worker_files_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    worker_files(run, 11, 1)
    (run / "other.txt").write_text("not a worker file\n")  # (not counted)
    monkeypatch.setattr(inittimeline, "MAX_WORKER_FILES", 11, raising=False)
    loaded = vllmwatch.read(InitTimelineNode("omni", run))
    assert isinstance(loaded, inittimeline.Loaded) and len(loaded.files) == 11
    monkeypatch.setattr(inittimeline, "MAX_WORKER_FILES", 10)
    assert vllmwatch.read(InitTimelineNode("omni", run)) == (
        f"init-timeline node omni: {run}: more than 10 worker_*.jsonl files; refused (move "
        "those of old start-ups away)"
    )
    # the signature that says when to read again lists no further either, and never raises
    assert (str(run), "too many") in inittimeline.signature([run])


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident memory (VmHWM)."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE)
    assert found is not None, status
    return int(found[1]) * 1024


@pytest.mark.slow
def test_the_daemon_refuses_a_run_directory_over_the_total_before_reading_it(
    tmp_path: Path,
) -> None:
    """Three sparse worker files of 60 MiB, each under the 64 MiB a file may hold: the node says
    what they come to and is not read; the daemon's peak memory stays far below one file."""
    run = tmp_path / "run"
    run.mkdir()
    size = 60 * MIB
    for pid in (1, 2, 3):
        with (run / f"worker_{pid}.jsonl").open("wb") as f:
            f.truncate(size)
    dump = tmp_path / "node0.log"
    dump.write_text("")
    settings = {
        "nodes": [
            *file_nodes({"node0": dump}),
            {"name": "omni", "source": "init-timeline", "path": str(run), "poll_seconds": 0.2},
        ]
    }
    with DaemonProcess(tmp_path / "daemon", settings) as d:
        d.start()
        said = wait_for(
            lambda: [x for x in d.log_text().splitlines() if f"{run}:" in x],
            DEADLINE_S,
            "what came of reading the node logged",
        )
        peak = peak_rss_bytes(d.pid)
        text = d.stop()
    assert peak < size, f"peak {peak / MIB:.0f} MiB"  # (reading them all took 213 MiB)
    assert said[0].endswith(
        f"init-timeline node omni: {run}: 3 files of {3 * size} bytes in all, over the "
        f"{64 * MIB} bytes one timeline may read; refused (move the worker files of old "
        "start-ups away)"
    ), said
    assert text.count("init-timeline node omni:") == 1  # (said once, not at every look)
