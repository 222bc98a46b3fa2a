"""Checkpoints spaced so that taking their state holds the event loop a bounded share of the time."""

from __future__ import annotations

import pytest

from exporter.daemon.publish import LOOP_PACE, pace


@pytest.mark.parametrize(
    ("due_s", "took_s", "want"),
    [
        (1.0, 0.0, 1.0),  # (nothing measured yet: the configured pace)
        (1.0, 0.01, 1.0),  # (200 nodes: well under the share)
        (1.0, 0.2, 0.2 * LOOP_PACE),  # (thousands: spaced out)
        (0.1, 0.01, 0.01 * LOOP_PACE),  # (a caught-up publish too)
    ],
)
def test_the_loop_spends_at_most_its_share_on_checkpoint_states(
    due_s: float, took_s: float, want: float
) -> None:
    got = pace(due_s, took_s)
    assert got == pytest.approx(want)
    assert took_s / got <= 1 / LOOP_PACE + 1e-12
