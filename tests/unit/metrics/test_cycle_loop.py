"""The research cycle as a loop: train, then evaluate; an eval's score is credited to the run it evaluated."""

from __future__ import annotations

from crossrail.core import EventType
from crossrail.metrics import METRICS, fold_runs
from crossrail.metrics.verdict import cycle_definition

from .stories import Story, tell


def trained_then_evaluated() -> tuple[Story, Story]:
    """sft-1 is submitted, waits 60 s, trains 3600 s and succeeds; its eval, submitted then, waits 120 s, runs
    600 s and reports its score 540 s in: the loop closes 660 s after training ended."""
    train = Story("sft-1", stage="post_training", chips=4)
    train.wait(60).start("gpu-a").wait(3600).succeed()
    evaluation = Story("eval-1", stage="eval", chips=1, at=train.now, parent_run="sft-1")
    evaluation.wait(120).start("gpu-a").wait(540)
    score = {"evaluated_run": "sft-1", "checkpoint": "file:///ck/sft-1/3600", "step": 3600}
    evaluation.emit(EventType.EVALUATED, attempt=1, **score, metric="eval_pass_rate", value=0.625)
    evaluation.emit(EventType.EVALUATED, attempt=1, **score, metric="eval_loss", value=1.75)
    evaluation.wait(60).succeed()
    return train, evaluation


def test_an_eval_score_is_credited_to_the_run_it_evaluated() -> None:
    train, evaluation = trained_then_evaluated()
    runs = {r.id: r for r in fold_runs(tell(train, evaluation), now=evaluation.now + 1)}

    assert METRICS["eval_pass_rate"].value([runs["sft-1"]]) == 0.625
    assert METRICS["eval_loss"].value([runs["sft-1"]]) == 1.75
    assert METRICS["eval_pass_rate"].value([runs["eval-1"]]) is None  # the score is its parent's, not the eval's


def test_the_cycle_runs_from_submission_to_the_evaluation_result() -> None:
    train, evaluation = trained_then_evaluated()
    runs = {r.id: r for r in fold_runs(tell(train, evaluation), now=evaluation.now + 1)}

    sft = runs["sft-1"]
    assert sft.cycle_s == 60 + 3600 + 120 + 540
    assert METRICS["research_cycle_seconds"].value([sft]) == 4320
    assert runs["eval-1"].cycle_s == 120 + 600  # an eval's own cycle ends at its own success
    assert cycle_definition([sft], [runs["eval-1"]]) == (
        "research cycle: before: submission → evaluation result; after: submission → success (no run evaluated)"
    )


def test_an_eval_of_an_intermediate_checkpoint_does_not_end_the_cycle_before_training_does() -> None:
    train = Story("sft-2", stage="post_training", chips=4)
    train.wait(60).start("gpu-a").wait(1800)
    train.emit(EventType.EVALUATED, attempt=1, evaluated_run="sft-2", metric="eval_loss", value=2.5, step=900)
    train.wait(1800).succeed()

    (run,) = fold_runs(tell(train), now=train.now + 1)

    assert run.cycle_s == 60 + 3600
    assert not run.evaluated
    assert run.score("eval_loss") == 2.5
