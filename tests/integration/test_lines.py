"""The report reads gzip, standard input and pipes as the line layer frames them, and refuses what
is not there."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from exporter.base.times import SECOND, iso

from support.dumps import T0
from support.line_dumps import workload

CLI = [sys.executable, "-m", "exporter", "report", "--since", iso(T0 - SECOND), "--until"]


def run_report(
    *args: str, stdin: bytes | None = None, shell: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    until = iso(T0 + 3600 * SECOND)
    if shell is not None:
        return subprocess.run(["bash", "-c", shell], capture_output=True, timeout=60, check=False)
    return subprocess.run(
        [*CLI, until, "--format", "json", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def requests_of(out: bytes) -> dict[str, int]:
    return {n: v["requests"] for n, v in json.loads(out)["nodes"].items()}


def test_the_report_reads_gzip_stdin_and_pipes(tmp_path: Path) -> None:
    data = workload(10, garbage=True)
    plain = tmp_path / "a.log"
    plain.write_bytes(data)
    packed = tmp_path / "b.log.gz"
    packed.write_bytes(gzip.compress(workload(7)))
    named_oddly = tmp_path / "c.log"  # gzip told by its magic bytes, not its name
    named_oddly.write_bytes(gzip.compress(workload(5, "json")))
    r = run_report(
        "--input",
        f"a={plain}",
        "--input",
        f"b={packed}",
        "--input",
        f"c={named_oddly}",
        "--input",
        "d=-",
        stdin=workload(3),
    )
    assert r.returncode == 0, r.stderr
    assert requests_of(r.stdout) == {"a": 10, "b": 7, "c": 5, "d": 3}
    # a line of `a` that is neither format is named by file and line on stderr; a garbled
    # timing line by what it says
    assert f"{plain}:3: neither journal JSON nor short-iso-precise".encode() in r.stderr
    assert b"not a token count: 'x7'" in r.stderr
    until = iso(T0 + 3600 * SECOND)
    cmd = " ".join([*CLI, until, "--format", "json"])
    r = run_report(shell=f"cat {plain} | {cmd} --input a=/dev/stdin --input b=<(zcat {packed})")
    assert r.returncode == 0, r.stderr
    assert requests_of(r.stdout) == {"a": 10, "b": 7}


def test_the_report_refuses_what_is_not_there(tmp_path: Path) -> None:
    r = run_report("--input", f"a={tmp_path / 'nope.log'}")
    assert r.returncode == 2 and b"no such file" in r.stderr
    bad = tmp_path / "cut.gz"
    bad.write_bytes(gzip.compress(workload(50))[:-40])  # a gzip stream cut short
    r = run_report("--input", f"a={bad}", "--input", "-")
    assert r.returncode == 2  # `-` is no NODE=FILE
    ok = tmp_path / "ok.log"
    ok.write_bytes(workload(2))
    r = run_report("--input", f"a={bad}", "--input", f"b={ok}")
    assert r.returncode == 1 and f"node a: cannot read {bad}".encode() in r.stderr
    assert requests_of(r.stdout)["b"] == 2  # the other node still reported
