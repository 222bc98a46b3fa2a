"""exporter.startup.phases: what an init-timeline node's figures hold of its timeline."""

from __future__ import annotations

from exporter.startup.phases import MAX_SERIES, Figures, Phase, Timeline


def test_a_node_shows_at_most_its_series_and_with_a_dump_only_its_start_up() -> None:
    many = [Phase(f"p{i}", 10.0 + i, 11.0 + i, 0, pid=7, role="worker") for i in range(600)]
    f = Figures.of("omni", Timeline.of(10.0, 700.0, many), ["a:1: bad"], 1.5, 0.0)
    assert len(f.phases) == MAX_SERIES and f.skipped == 1 + 600 - MAX_SERIES
    assert f.named == ("a:1: bad",)
    older = Phase("load", 1.0, 5.0, 0, pid=6, role="worker")  # (a run before this dump's)
    t = Timeline.of(10.0, 20.0, [older, many[0]])
    assert [p.name for p in t.from_t0().phases] == ["p0"]
