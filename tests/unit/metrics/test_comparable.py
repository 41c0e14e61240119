"""A verdict refuses sides that measured different work, and warns when the fleet around them differed."""

from __future__ import annotations

import pytest

from crossrail.core import Event, EventType
from crossrail.metrics import FleetTimeline, RunFacts, compare, fold_runs
from crossrail.metrics.comparable import capacity_steps, differences
from crossrail.metrics.hypotheses import NOT_COMPARABLE, check_stage

from .stories import T0, Story, tell

DIGEST_A, DIGEST_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def three(
    prefix: str, pool: str, *, framework: str, at: float = T0, chips: int = 2, run_s: float = 3600
) -> list[Story]:
    """Three runs submitted at `at` that each wait a minute, then run `run_s` on `pool` and succeed."""
    stories = []
    for i, extra in enumerate((0, 60, 120)):
        s = Story(f"{prefix}-{i}", stage="post_training", chips=chips, at=at)
        s.wait(60).start(pool).runtime(framework, "bf16").wait(run_s + extra).succeed()
        stories.append(s)
    return stories


def fold(*stories: Story, events: list[Event] = ()) -> list[RunFacts]:  # type: ignore[assignment]
    now = max(s.now for s in stories) + 10
    return fold_runs([*tell(*stories), *events], now=now)


def described(runs: list[RunFacts], work: str, args: tuple[str, ...]) -> list[RunFacts]:
    """As `workspace_runs` describes each run from its recorded spec: work digest, arguments, commit, dataset."""
    for r in runs:
        r.work, r.args, r.commit, r.dataset_version = work, args, "3f9a0c2", "v7"
    return runs


def test_runs_of_another_experiment_pooled_into_a_side_are_refused_naming_digest_and_arguments() -> None:
    runs = fold(*three("gpu", "gpu-a", framework="torch"), *three("tpu", "tpu-a", framework="jax"))
    before = described(runs[:3], DIGEST_A, ("--steps", "10"))
    after = described(runs[3:5], DIGEST_A, ("--steps", "10")) + described(runs[5:], DIGEST_B, ("--steps", "20"))

    verdict = compare(before, after)

    assert verdict.refused
    assert [(d.what, d.before, d.after) for d in verdict.confounds] == [
        ("experiment digest", (DIGEST_A,), (DIGEST_A, DIGEST_B)),
        ("arguments", ("--steps 10",), ("--steps 10", "--steps 20")),
    ]
    assert verdict.sentence == (
        "refused: the sides did not measure the same work (experiment digest differs: before sha256:aaaaaaaaaaaa,"
        " after sha256:aaaaaaaaaaaa, sha256:bbbbbbbbbbbb; arguments differ: before --steps 10, after --steps 10,"
        " --steps 20); select runs of one experiment on each side, or pass --allow-confounds to judge anyway"
    )
    assert verdict.explain == []
    assert verdict.cycle.change is None


def test_allowed_confounds_give_the_verdict_and_name_each_confound() -> None:
    runs = fold(*three("gpu", "gpu-a", framework="torch"), *three("tpu", "tpu-a", framework="jax", run_s=1800))
    before = described(runs[:3], DIGEST_A, ())
    after = described(runs[3:], DIGEST_A, ())
    after[0].commit = "9b1e44d"

    verdict = compare(before, after, allow_confounds=True)

    assert not verdict.refused
    # cycles 3660, 3720, 3780 s before (mean 3720) and 1860, 1920, 1980 after (mean 1920): 1920 / 3720 − 1
    assert verdict.cycle.change == pytest.approx(1920 / 3720 - 1)
    assert verdict.sentence.startswith("research cycle shorter by 48% (95% CI ")
    assert verdict.sentence.endswith("(confounded: the sides differ in code commit)")
    assert "1h02m → 32m" in verdict.sentence  # human units: 3720 s and 1920 s


def test_a_framework_that_follows_the_accelerator_is_no_confound_but_one_that_does_not_is() -> None:
    runs = fold(
        *three("gpu", "gpu-a", framework="torch"),
        *three("tpu", "tpu-a", framework="jax"),
        *three("gpuj", "gpu-b", framework="jax"),
    )
    torch_gpu, jax_tpu, jax_gpu = runs[:3], runs[6:], runs[3:6]  # sorted by id: gpu-*, gpuj-*, tpu-*
    for side in (torch_gpu, jax_tpu, jax_gpu):
        described(side, DIGEST_A, ())

    assert differences(torch_gpu, jax_tpu) == []
    (found,) = differences(torch_gpu, jax_gpu)
    assert (found.what, found.before, found.after) == ("framework", ("torch",), ("jax",))
    assert compare(torch_gpu, jax_gpu).sentence.startswith(
        "refused: the sides did not measure the same work (framework differs: before torch, after jax)"
    )


def test_fleet_capacity_and_load_that_differ_between_the_windows_are_named_warnings() -> None:
    # gpu-a offers 8 chips from T0 and 16 from T0 + 5000 s; three 2-chip runs before, three 4-chip runs after.
    grown = [
        Event(EventType.CAPACITY_CHANGED, T0, None, None, {"pool": "gpu-a", "chips_before": 0, "chips_after": 8}),
        Event(EventType.CAPACITY_CHANGED, T0 + 5000, None, None, {"pool": "gpu-a", "chips_after": 16}),
    ]
    stories = [
        *three("b", "gpu-a", framework="torch"),
        *three("x", "gpu-a", framework="torch", at=T0 + 10_000, chips=4),
    ]
    runs = fold(*stories, events=grown)
    before, after = described(runs[:3], DIGEST_A, ()), described(runs[3:], DIGEST_A, ())
    fleet = FleetTimeline(capacity_steps(grown), runs)

    verdict = compare(before, after, fleet=fleet)

    assert not verdict.refused
    # each window runs from the first submission to the last end: 3,780 s; chips busy 2 × (3600 + 3660 + 3720)
    # = 21,960 chip-s before, 4 × the same after: 5.81 and 11.6 chips on average
    assert [d.sentence() for d in verdict.warnings] == [
        "fleet capacity differs: 8 chips on offer before, 16 after (+100%)",
        "fleet load differs: 5.81 chips in use before, 11.6 after (+100%)",
    ]
    assert "; warning: fleet capacity differs: 8 chips" in verdict.sentence


def test_too_few_runs_a_side_get_no_verdict_and_say_the_minimum() -> None:
    runs = described(
        fold(*three("gpu", "gpu-a", framework="torch"), *three("tpu", "tpu-a", framework="jax")), DIGEST_A, ()
    )

    assert compare(runs[:2], runs[3:]).sentence == (
        "cannot judge the research cycle: n too small (2 succeeded runs before, 3 after; need at least 3 a side)"
    )


def test_policy_check_calls_confounded_runs_not_comparable_and_says_why_a_named_metric_is_left_out() -> None:
    runs = fold(*three("gpu", "gpu-a", framework="torch"), *three("tpu", "tpu-a", framework="jax"))
    described(runs[:3], DIGEST_A, ())
    described(runs[3:], DIGEST_B, ())

    refused = check_stage("post_training", "tpu", ["eval_pass_rate"], runs)
    assert refused.status == NOT_COMPARABLE
    assert refused.sentence.startswith("post_training on tpu vs gpu: not comparable (experiment digest differs")

    described(runs[3:], DIGEST_A, ())
    judged = check_stage("post_training", "tpu", ["eval_pass_rate"], runs)
    assert judged.status != NOT_COMPARABLE
    assert judged.notes == ("eval_pass_rate left out: no post_training run on tpu has a value for it",)


def test_cost_with_the_fleets_idle_share_sees_a_fleet_30_percent_larger() -> None:
    # The same three 2-chip runs before and after; gpu-a offers 10 chips before and 13 after.
    offered = [
        Event(EventType.CAPACITY_CHANGED, T0, None, None, {"pool": "gpu-a", "chips_after": 10}),
        Event(EventType.CAPACITY_CHANGED, T0 + 5000, None, None, {"pool": "gpu-a", "chips_after": 13}),
    ]
    stories = [*three("b", "gpu-a", framework="torch"), *three("x", "gpu-a", framework="torch", at=T0 + 10_000)]
    runs = fold(*stories, events=offered)
    before, after = described(runs[:3], DIGEST_A, ()), described(runs[3:], DIGEST_A, ())
    fleet = FleetTimeline(capacity_steps(offered), runs)

    allocated = compare(before, after, fleet=fleet)
    idle = compare(before, after, fleet=fleet, cost="fleet")

    def cost(v: object) -> float | None:
        return next(c.change for c in v.explain if c.metric == "cost_per_effective_run")  # type: ignore[attr-defined]

    assert cost(allocated) == pytest.approx(0.0)
    assert cost(idle) == pytest.approx(0.3)
    # 21,960 chip-s in use over 3,780 s: 5.81 chips of 10 on offer before (×1.72), of 13 after (×2.24)
    assert idle.cost_basis == "cost: the fleet's, idle share included (before ×1.72, after ×2.24 the allocated cost)"
    assert allocated.cost_basis == "cost: the chip-hours the runs were allocated, at their pools' prices"
