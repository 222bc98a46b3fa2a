"""The whole /metrics of each recorded llama-server run, and of the embedded demo's hour, is
its golden file (tests/testdata/metrics/), so a change to any figure shows as a diff to review.
`SMLLM_UPDATE_GOLDEN=1` rewrites them."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.base.times import SECOND
from exporter.commands.demo import NODES, SEED, node_lines, write_dumps

from support import golden
from support.dumps import START
from support.golden import AFTER_US, MASK, check, masked, metrics
from support.recorded import FIXTURES, RUNS, entries

DEMO_US = 3600 * SECOND  # the hour the demo writes at its start


@pytest.mark.parametrize("run", RUNS)
def test_recorded_run(run: str) -> None:
    times = [int(e["__REALTIME_TIMESTAMP"]) for e in entries(run)]
    text = metrics({run: FIXTURES / f"{run}.journal.json"}, min(times), max(times) + AFTER_US)
    check(run, text)


def test_demo(tmp_path: Path) -> None:
    """The demo's first hour from a fixed start, as `demo` writes it."""
    end = START + DEMO_US
    dumps = write_dumps(tmp_path, SEED, START, end)
    last = max(line.time_us for n in NODES for line in node_lines(n, SEED, START, end))
    check("demo", metrics(dumps, START, last + AFTER_US))


def test_only_the_machines_labels_are_masked() -> None:
    line = (
        'smllm_exporter_build_info{compiled="true",python="3.11.2",revision="a\\"b",'
        'version="1.2.3"} 1.0\n'
    )
    other = 'smllm_requests_total{kind="x",node="python"} 1.0\n'
    assert masked(other + line) == other + (
        f'smllm_exporter_build_info{{compiled="{MASK}",python="{MASK}",revision="{MASK}",'
        f'version="{MASK}"}} 1.0\n'
    )


def test_a_difference_shows_as_a_unified_diff(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(golden, "GOLDEN", tmp_path)
    monkeypatch.delenv(golden.UPDATE_ENV, raising=False)
    (tmp_path / "run.prom").write_text("a 1.0\nb 2.0\n", encoding="utf-8")
    golden.check("run", "a 1.0\nb 2.0\n")
    with pytest.raises(AssertionError) as refused:
        golden.check("run", "a 1.0\nb 3.0\n")
    assert "\n-b 2.0\n+b 3.0\n" in str(refused.value)
    monkeypatch.setenv(golden.UPDATE_ENV, "1")
    golden.check("run", "a 1.0\nb 3.0\n")
    assert (tmp_path / "run.prom").read_text(encoding="utf-8") == "a 1.0\nb 3.0\n"
