"""Live goodput from the steps a run's attempts report: a step counts once, steps redone are lost work."""

from __future__ import annotations

import pytest

from crossrail.core import EventType
from crossrail.metrics import METRICS, RunFacts, compute, fold_runs, table

from .stories import Story, tell


def killed_then_redone() -> Story:
    """4 chips. Attempt 1 starts after 10 s in the queue, reports step 0 at +10 s and step 100 at +110 s (1 s a
    step), checkpoints step 80 and is killed at +115 s. After 60 s it starts again, resumes from step 80, reports
    step 80 at +10 s and step 200 at +130 s, and succeeds at +131 s: steps 81..100 were done twice."""
    s = Story("sft-1", stage="post_training", chips=4)
    s.wait(10).start("gpu-a").wait(10).beat(0).wait(100).beat(100).wait(5).fail(final=False)
    s.wait(20).retry().wait(40).start("gpu-a")
    s.emit(EventType.REPORTED, attempt=2, name="resumed", data={"step": 80, "from": "file:///ck/80"})
    return s.wait(10).beat(80).wait(120).beat(200).wait(1).succeed()


def fold(*stories: Story) -> list[RunFacts]:
    return fold_runs(tell(*stories), now=max(s.now for s in stories) + 10)


def test_a_kill_mid_run_and_a_retry_that_redoes_20_steps_count_each_step_once() -> None:
    (run,) = fold(killed_then_redone())

    first, second = run.attempts
    assert (first.useful_chip_s, first.recompute_chip_s) == (4 * 100.0, 0.0)  # 100 new steps at 1 s, 4 chips
    assert (second.useful_chip_s, second.recompute_chip_s) == (4 * 100.0, 4 * 20.0)  # steps 101..200; 81..100 again
    assert run.chip_hours == pytest.approx(4 * (115 + 131) / 3600)
    # goodput = 800 useful chip-s / 984 allocated; the lost 184 are 80 recomputed, the rest start-up and the kill
    assert METRICS["goodput"].value([run]) == pytest.approx(800 / 984)
    assert METRICS["recompute_seconds"].value([run]) == 20.0
    assert METRICS["recovery_seconds"].value([run]) == 60.0  # the gap between the attempts, as before


def test_goodput_groups_by_pool_stage_and_team_with_one_definition() -> None:
    clean = Story("sft-2", stage="post_training", chips=2, team="nlp")
    clean.start("gpu-b").wait(5).beat(0).wait(50).beat(50).wait(5).succeed()

    t = table(fold(killed_then_redone(), clean), ("team", "stage", "pool"), metrics=["goodput", "recompute_seconds"])

    assert [(r.key["team"], r.key["pool"], r.values["goodput"], r.values["recompute_seconds"]) for r in t.rows] == [
        ("core", "gpu-a", pytest.approx(800 / 984), 20.0),
        ("nlp", "gpu-b", pytest.approx(100 / 120), 0.0),  # 50 steps at 1 s on 2 chips of 60 s allocated
    ]


def test_an_end_that_reports_useful_chip_seconds_keeps_them_as_the_simulator_reports_them() -> None:
    s = Story("sim-1", chips=1)
    s.start("tpu-a").beat(0).wait(10).beat(10).wait(10).emit(EventType.SUCCEEDED, attempt=1, useful_chip_s=15.0)

    (run,) = fold(s)

    assert run.attempts[0].useful_chip_s == 15.0
    assert METRICS["goodput"].value([run]) == pytest.approx(15 / 20)


def test_report_groups_measure_the_same_goodput_live_as_the_per_run_fold() -> None:
    story = killed_then_redone()

    report = compute(tell(story), now=story.now + 10)

    (group,) = report.groups
    assert (group.stage, group.pool) == ("post_training", "gpu-a")
    assert group.useful_chip_hours == pytest.approx(800 / 3600)
    assert group.goodput == pytest.approx(800 / 984)
