"""The process's own metrics as prometheus_client's collectors write them: the same families,
help texts, types, order and labels, and the same values read from /proc (those that move
between two reads within a margin)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.exposition.process import ProcessMetrics
from exporter.exposition.reference import ProcessReference

SAMPLE = re.compile(r"^([a-z_]+)(\{[^}]*\})? (\S+)$")
# how far a value may move between the two reads (rss and the CPU time go on meanwhile)
MARGIN = {
    "process_virtual_memory_bytes": 16 << 20,
    "process_resident_memory_bytes": 16 << 20,
    "process_cpu_seconds_total": 1.0,
    "process_open_fds": 4,
}


def split(text: bytes) -> tuple[list[str], dict[str, tuple[str, float]]]:
    """(every line with its value blanked, {sample name: (labels, value)})."""
    shape, values = [], {}
    for line in text.decode().splitlines():
        m = SAMPLE.match(line)
        if m is None:
            shape.append(line)
            continue
        shape.append(f"{m[1]}{m[2] or ''} _")
        values[m[1]] = (m[2] or "", float(m[3]))
    return shape, values


def close(ours: dict[str, tuple[str, float]], theirs: dict[str, tuple[str, float]]) -> list[str]:
    wrong = []
    for name, (_, value) in theirs.items():
        if abs(ours[name][1] - value) > MARGIN.get(name, 0):
            wrong.append(f"{name}: ours {ours[name][1]}, prometheus_client {value}")
    return wrong


@pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
def test_the_process_metrics_are_prometheus_clients(openmetrics: bool) -> None:
    ours_m, theirs_m = ProcessMetrics(), ProcessReference()
    if openmetrics:
        theirs_shape, theirs = split(theirs_m.openmetrics())
        ours_shape, ours = split(ours_m.openmetrics())
    else:
        theirs_shape, theirs = split(theirs_m.text())
        ours_shape, ours = split(ours_m.text())
    assert ours_shape == theirs_shape
    assert "process_resident_memory_bytes" in ours and "python_info" in ours
    assert close(ours, theirs) == []


def test_without_proc_only_python_info_is_written(tmp_path: Path) -> None:
    """A machine without /proc (or a /proc that cannot be read): prometheus_client writes no
    process_* family then, and neither does this."""
    m = ProcessMetrics(proc=tmp_path / "no-proc")
    _, values = split(m.text())
    assert list(values) == ["python_info"]
    assert m.openmetrics().endswith(b"# EOF\n")


def test_a_limit_that_is_no_number_leaves_the_descriptors_out(tmp_path: Path) -> None:
    (tmp_path / "self" / "fd").mkdir(parents=True)
    (tmp_path / "stat").write_bytes(b"cpu 1 2 3\nbtime 1700000000\n")
    stat = "1 (a) b) S " + " ".join(str(n) for n in range(1, 50))
    (tmp_path / "self" / "stat").write_text(stat)
    (tmp_path / "self" / "limits").write_text(
        "Limit Soft Hard Units\nMax open files unlimited unlimited files\n"
    )
    m = ProcessMetrics(proc=tmp_path)
    _, values = split(m.text())
    assert "process_open_fds" not in values and "process_max_fds" not in values
    # the fields after the command's last ")", from 0 (the state, S): vsize 20, utime 11
    assert values["process_virtual_memory_bytes"][1] == 20.0
    assert values["process_cpu_seconds_total"][1] == 11 / m.ticks + 12 / m.ticks
