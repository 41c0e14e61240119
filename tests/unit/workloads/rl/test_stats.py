"""Stage totals for a controller, which replicas run, samplers' reservations, and the learner's batch check."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.core.clock import ManualClock
from crossrail.errors import CrossrailError
from crossrail.workloads.rl.queues import FileQueue
from crossrail.workloads.rl.settings import Rendezvous
from crossrail.workloads.rl.stages import LearnerBatch, _check, reserve_batch
from crossrail.workloads.rl.stats import FLUSH_S, StageStats, read_totals, running


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
    batch = LearnerBatch(items=[{"id": i} for i in ids], lags=lags)
    with pytest.raises(CrossrailError, match="invariants"):
        _check(batch, used, bound=2)
    _check(LearnerBatch(items=[{"id": "b"}], lags=[2]), used, bound=2)  # at the bound, fresh: fine


def test_replicas_run_once_the_newest_process_of_each_wrote_its_stats(tmp_path: Path) -> None:
    rdv, clock = Rendezvous(tmp_path), ManualClock()

    def start(part: str, replica: int, pid: int) -> int:
        """What a stage process does as it starts: its pid appended, its incarnation the lines before it."""
        path = rdv.pid_file(part, replica)
        path.parent.mkdir(parents=True, exist_ok=True)
        incarnation = len(path.read_text().split()) if path.exists() else 0
        path.write_text((path.read_text() if path.exists() else "") + f"{pid}\n")
        return incarnation

    counts = {"sampler": 2, "reward": 1}
    assert not running(rdv, counts)  # nothing started
    for part, replica in [("sampler", 0), ("sampler", 1), ("reward", 0)]:
        StageStats(rdv.stats, part, replica, start(part, replica, 100 + replica), clock).add()
    assert running(rdv, counts)
    assert not running(rdv, {"sampler": 3, "reward": 1})  # grown: the third sampler has not started
    start("sampler", 1, 200)  # replaced: the new process is importing torch, its predecessor's totals remain
    assert not running(rdv, counts)
    StageStats(rdv.stats, "sampler", 1, 1, clock).add()
    assert running(rdv, counts)


def test_samplers_waking_together_make_only_the_batches_the_learner_can_use(tmp_path: Path) -> None:
    rdv, clock = Rendezvous(tmp_path), ManualClock()
    samples, scored = FileQueue(rdv.samples, clock), FileQueue(rdv.scored, clock)
    room = 8  # groups the learner takes before a group of policy 5 goes stale (two steps of 4, bound 1)

    def reserve(replica: int) -> bool:
        ids = [f"sampler{replica}.0.{g}" for g in range(4)]
        return reserve_batch(samples, scored, f"sampler{replica}", 5, ids, bound=1, room=room)

    samples.put(3, "old", {})  # too old to count: stale before the learner could use it
    assert [reserve(0), reserve(1), reserve(2)] == [True, True, False]  # the third would only go stale
    assert len(samples.claimed_names()) == 8  # the third released its reservation
    for g in range(4):  # the first made its batch and released its reservation
        samples.put(5, f"sampler0.0.{g}", {})
    samples.release("sampler0")
    assert not reserve(2)  # still full: four made, four reserved
    samples.release("sampler1")  # the second gave up (or crashed): room for the third
    assert reserve(2)
