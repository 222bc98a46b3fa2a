"""exporter.report.openmetrics: the replay's samples, as the daemon's ticks would have made them."""

from __future__ import annotations

from typing import Any

from exporter.base.records import Batch, LogLine
from exporter.base.times import SECOND
from exporter.report import openmetrics as backfill

from support.backfill_window import NODES, SINCE, STEP, UNTIL, lines_of
from support.settings import default_settings
from support.workload import KINDS


def test_the_samples_do_not_depend_on_the_step() -> None:
    """Ticks come with the lines, as the daemon's do: a request longer than
    max_request_seconds (late) is placed against the watermark of its own tick, not of the
    step's, so a 15 s and a 60 s step agree wherever both sample."""
    lines = lines_of()
    longest = max(ls[-1].time_us for ls in lines.values())
    head = "id  1 | task 99999 |"
    start, end = SINCE + 3600 * SECOND + 123_456, SINCE + 3600 * SECOND + 123_456 + 700 * SECOND
    assert end < longest
    late = [
        LogLine("c", start, "", 4242, f"slot launch_slot_: {head} processing task"),
        LogLine(
            "c",
            end,
            "",
            4242,
            f"slot print_timing: {head} total time = {700_000:.2f} ms /  700 tokens",
        ),
        LogLine("c", end, "", 4242, f"slot      release: {head} stop processing: n_tokens = 700"),
    ]
    lines["c"] = sorted(lines["c"] + late, key=lambda ln: ln.time_us)

    def sampled(step_us: int) -> dict[int, Any]:
        replay = backfill.Replay(NODES, default_settings(KINDS, slots=2), SINCE, UNTIL, step_us)
        for n, ls in lines.items():
            replay.add(Batch(n, tuple(ls)))
        return {
            t: (
                snap.watermark_us,
                snap.concurrency_us,
                snap.mix_us,
                [(n.busy_us, n.slot_busy_us, n.late, n.entries) for n in snap.nodes],
            )
            for t, snap in replay.snapshots()
        }

    fine, coarse = sampled(STEP), sampled(60 * SECOND)
    assert any(v[3][2][2] for v in coarse.values())  # (the request did come late)
    common = sorted(set(fine) & set(coarse))
    assert len(common) > 250
    assert [fine[t] for t in common] == [coarse[t] for t in common]
