"""streams.replay.run: a run's rate (folding chorus.messages again from the broker is in
tests/integration)."""

from __future__ import annotations

from streams.registry import registered_projections
from streams.replay import Replayer
from streams.replay.run import ReplayRun


def test_a_run_without_time_has_no_rate() -> None:
    run = ReplayRun(Replayer(registered_projections([])), spans=[], seconds=0.0)
    assert (run.records, run.rate) == (0, 0.0)
