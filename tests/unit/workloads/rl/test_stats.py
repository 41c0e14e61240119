"""Stage totals for a controller, and the learner's invariant check on every batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.core.clock import ManualClock
from crossrail.errors import CrossrailError
from crossrail.workloads.rl.stages import Batch, _check
from crossrail.workloads.rl.stats import FLUSH_S, StageStats, read_totals


def test_totals_sum_every_incarnation_of_a_part(tmp_path: Path) -> None:
    clock = ManualClock()
    first = StageStats(tmp_path, "sampler", 0, 0, clock)
    first.add(samples=32, busy_s=1.0)
    replaced = StageStats(tmp_path, "sampler", 0, 1, clock)  # the first crashed; its totals stay counted
    replaced.add(samples=8, busy_s=0.5, held_s=0.25)
    learner = StageStats(tmp_path, "learner", 0, 0, clock)
    learner.add(samples=128, idle_s=0.5, lag=2)
    learner.add(samples=128, idle_s=0.25, lag=1)  # within FLUSH_S of the last write: not yet on disk
    assert read_totals(tmp_path)["learner"].samples == 128
    clock.advance(FLUSH_S)
    learner.add(lag=0)
    totals = read_totals(tmp_path)
    assert (totals["sampler"].samples, totals["sampler"].busy_s, totals["sampler"].held_s) == (40, 1.5, 0.25)
    assert (totals["learner"].samples, totals["learner"].idle_s, totals["learner"].max_lag) == (256, 0.75, 2)


@pytest.mark.parametrize(
    ("lags", "ids", "used"),
    [
        pytest.param([3], ["a"], set(), id="lag over the bound"),
        pytest.param([-1], ["a"], set(), id="a sample from a future policy"),
        pytest.param([0, 0], ["a", "a"], set(), id="one id twice in a batch"),
        pytest.param([0], ["a"], {"a"}, id="an id counted by an earlier update"),
    ],
)
def test_the_learner_refuses_a_batch_that_breaks_its_invariants(
    lags: list[int], ids: list[str], used: set[str]
) -> None:
    batch = Batch(items=[{"id": i} for i in ids], lags=lags)
    with pytest.raises(CrossrailError, match="invariants"):
        _check(batch, used, bound=2)
    _check(Batch(items=[{"id": "b"}], lags=[2]), used, bound=2)  # at the bound, fresh: fine
