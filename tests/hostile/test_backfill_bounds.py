"""The backfill's bounds: its settings default to the config's (the daemon's), an `--until`
ahead of now is refused, and so is a window whose samples would pass a bound, with the
figures, before anything is read or written."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from exporter.accounting.settings import DEFAULT_PHASE_BUCKETS_S, Settings
from exporter.base.kinds import DEFAULT_RULES, KindRule, Kinds
from exporter.base.times import SECOND, iso
from exporter.config.schema import Config
from exporter.ingest.settings import settings
from exporter.report import openmetrics as backfill

from support.outputs import SINCE_US, WINDOW, cli, node_dump

DAY_S = 86_400
REFUSAL_S = 30.0  # (a refusal comes before any reading: a run over this deadline fails)


def test_settings_default_to_the_configs_own_defaults() -> None:
    d, s = Config(), settings(Config())
    assert s.kinds == d.kinds
    assert s.max_request_us == d.max_request_seconds * SECOND
    assert s.stall_us == d.stall_seconds * SECOND
    assert s.buckets_s == d.duration_buckets
    assert s.slots == d.slots
    assert s.clock_allowance_us == d.clock_allowance_seconds * SECOND
    assert s.start_timeout_us == d.start_timeout_seconds * SECOND
    assert s.slow_start_share == d.slow_start_share


def test_settings_of_a_config_take_each_value_and_the_reports_options_over_it() -> None:
    cfg = Config(
        max_request_seconds=900,
        stall_seconds=120,
        duration_buckets=(1.0, 10.0),
        slots=3,
        clock_allowance_seconds=30,
        start_timeout_seconds=300,
        slow_start_share=0.5,
        kinds=Kinds((KindRule("big", 100), KindRule("small", 0))),
    )
    s = settings(cfg)
    assert s == Settings(
        cfg.kinds,
        900 * SECOND,
        120 * SECOND,
        (1.0, 10.0),
        3,
        30 * SECOND,
        300 * SECOND,
        0.5,
        DEFAULT_PHASE_BUCKETS_S,
        DEFAULT_PHASE_BUCKETS_S,
    )
    kinds = Kinds(DEFAULT_RULES)
    assert settings(cfg, kinds, 60) == dataclasses.replace(
        s, kinds=kinds, max_request_us=60 * SECOND
    )


@pytest.mark.slow
def test_an_until_ahead_of_now_is_refused_and_now_is_taken(tmp_path: Path) -> None:
    dump = node_dump(tmp_path / "dumps")
    out = tmp_path / "ahead.om"
    ahead = iso(int((time.time() + 30 * DAY_S) * SECOND))
    backfill_args = ["--format", "openmetrics", "--step", "1h", "--output", str(out)]
    ran = cli("report", "--since", iso(SINCE_US), "--until", ahead, *dump, *backfill_args)
    errors = ran.lines("ERROR")
    assert ran.code == 2 and len(errors) == 1, ran.err
    assert f"--until {ahead}" in errors[0] and "ahead of now" in errors[0]
    assert not out.exists()
    # up to now: taken (with the warning that its last hours overlap Prometheus's head block)
    ran = cli("report", "--since", "-2h", "--until", "now", *dump, *backfill_args)
    assert ran.code == 0, ran.err
    assert out.read_text().endswith("# EOF\n")


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--output", "--output-dir"])
def test_a_backfill_over_the_bound_is_refused_before_anything_is_written(
    tmp_path: Path, option: str
) -> None:
    """Fifty-odd years at a 1 s step: about 1.7 billion steps of some 80 series."""
    target = tmp_path / "om"
    window = ["--since", "1971-01-01T00:00:00", "--until", WINDOW[1]]
    ran = cli(
        "report",
        *window,
        *node_dump(tmp_path / "dumps"),
        *["--format", "openmetrics", "--step", "1s", option, str(target)],
        timeout=REFUSAL_S,
    )
    errors = ran.lines("ERROR")
    assert ran.code == 2 and len(errors) == 1, ran.err
    steps = (SINCE_US - 31_536_000 * SECOND) // SECOND + 1
    assert f"{steps:,} steps of" in errors[0]
    assert f"over the bound of {backfill.MAX_SAMPLES:,} samples" in errors[0]
    assert not target.exists()


def test_the_size_is_refused_over_the_bound_or_the_room_left() -> None:
    day = backfill.estimate(["a", "b"], settings(Config()), 0, DAY_S * SECOND, 15 * SECOND)
    assert day.steps == DAY_S // 15 + 1 and day.series > 2 * 50
    assert backfill.too_big(day, None) == ""
    assert backfill.too_big(day, day.bytes) == ""
    short = backfill.too_big(day, day.bytes - 1)
    assert f"{day.samples:,} samples" in short and "free" in short
    many = dataclasses.replace(day, steps=backfill.MAX_SAMPLES // day.series + 1)
    assert "over the bound" in backfill.too_big(many, None)
