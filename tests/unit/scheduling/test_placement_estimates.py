"""Placement by estimates, told as stories: leaving the preferred pool, staying under hysteresis, drains."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from crossrail.scheduling.estimate import Busy, PlacementWork, PoolInfo, estimate_placements, run_time_s
from crossrail.scheduling.plan import plan

from .builders import HOUR, T0, fleet, gpu, req, scheduler, tpu


def pools_of(*specs: dict[str, Any]) -> list[PoolInfo]:
    return [PoolInfo.from_spec(p) for p in fleet(list(specs)).spec.pools]


def pretraining(run: str = "pt", chips: int = 8, **extra: Any) -> PlacementWork:
    fields: dict[str, Any] = {
        "stage": "pretraining",
        "reference_s": 10 * HOUR,
        "prefer": "tpu",
        "objective": "throughput_per_cost",
        "queued_at": T0,
        **extra,
    }
    return PlacementWork(run, chips, **fields)


TPU = tpu(chips=16, cost_per_chip_hour=4.0)
FAST_GPU = gpu(chips=16, cost_per_chip_hour=3.0, relative_speed=1.25)


def test_pretraining_leaves_its_busy_preferred_tpu_for_a_gpu_pool_that_finishes_sooner_and_cheaper() -> None:
    pools = pools_of(TPU, FAST_GPU)
    busy = [Busy("big", "tpu", 16, T0 + 2 * HOUR)]

    planned = plan([pretraining()], busy, pools, T0)
    choice = planned.choices["pt"]

    assert choice.pool == "gpu"
    assert choice.reason.startswith("left preferred tpu: gpu finishes 4h sooner and costs $128.00 less")
    tpu_terms, gpu_terms = choice.candidate("tpu"), choice.candidate("gpu")
    assert tpu_terms is not None
    assert gpu_terms is not None
    assert (tpu_terms.wait_s, tpu_terms.run_s, tpu_terms.cost) == (2 * HOUR, 10 * HOUR, 8 * 10 * 4.0)
    assert (gpu_terms.wait_s, gpu_terms.run_s, gpu_terms.cost) == (0.0, 8 * HOUR, 8 * 8 * 3.0)
    assert [c.pool for c in choice.candidates] == ["gpu", "tpu"]
    assert planned.starts["pt"].pool == "gpu"
    assert planned.starts["pt"].start == T0

    sched = scheduler([TPU, FAST_GPU], [])
    sched.started(req("big", "a", 16), "tpu", 16, T0)
    sched.submitted(req("pt", "a", 8, prefer="tpu", pool=choice.pool, pool_reason=choice.reason))
    (admission,) = sched.cycle(T0).admitted
    assert admission.pool == "gpu"
    assert admission.reason.startswith("left preferred tpu: gpu finishes 4h sooner")


def test_pretraining_stays_on_its_preferred_tpu_when_the_gpu_gains_less_than_the_margin() -> None:
    pools = pools_of(TPU, gpu(chips=16, cost_per_chip_hour=3.9))  # 2.5% cheaper, no faster

    choice = plan([pretraining()], [], pools, T0, prefer_margin=0.25).choices["pt"]

    assert choice.pool == "tpu"
    assert choice.reason.startswith("tpu preferred: tpu result in 10h")
    assert "gpu gains less than the 25% margin" in choice.reason
    assert plan([pretraining()], [], pools, T0, prefer_margin=0.0).choices["pt"].pool == "gpu"


def test_a_placed_run_stays_for_a_small_gain_and_moves_for_a_clear_one() -> None:
    pools = pools_of(tpu(chips=16), gpu(chips=16))
    placed = pretraining(prefer="any", objective="time_to_result", current="gpu")
    slightly = {"tpu": 0.0, "gpu": 0.5 * HOUR}  # the gpu frees 30 min later: 5% of a 10.5 h result
    clearly = {"tpu": 0.0, "gpu": 3 * HOUR}

    stay = estimate_placements(placed, pools, slightly, hysteresis=0.1)
    move = estimate_placements(placed, pools, clearly, hysteresis=0.1)

    assert (stay.pool, stay.moved) == ("gpu", False)
    assert stay.reason.startswith("stays on gpu")
    assert "tpu gains less than the 10% hysteresis" in stay.reason
    assert (move.pool, move.moved) == ("tpu", True)
    assert move.reason.startswith("re-placed from gpu: tpu finishes 3h sooner")


def test_a_gain_below_the_minimum_does_not_move_a_run() -> None:
    pools = pools_of(tpu(chips=16), gpu(chips=16))
    placed = PlacementWork("r", 8, reference_s=600.0, current="gpu")

    choice = estimate_placements(placed, pools, {"tpu": 0.0, "gpu": 300.0}, hysteresis=0.1, min_gain_s=600.0)

    assert (choice.pool, choice.moved) == ("gpu", False)


def test_a_pending_run_is_re_placed_when_its_pool_drains() -> None:
    sched = scheduler([TPU, FAST_GPU], [])
    sched.started(req("big", "a", 16), "gpu", 16, T0)
    sched.submitted(req("pt", "a", 16, prefer="tpu", pool="tpu", pool_reason="tpu preferred"))
    sched.started(req("other", "a", 16), "tpu", 16, T0)
    assert sched.cycle(T0).admitted == []

    sched.drain("tpu")
    sched.finished("big", T0 + HOUR)
    drained = pools_of({**TPU, "drained": True}, FAST_GPU)
    choice = plan([pretraining(chips=16, current="tpu")], [], drained, T0 + HOUR).choices["pt"]
    sched.submitted(req("pt", "a", 16, prefer="tpu", pool=choice.pool, pool_reason=choice.reason))

    assert (choice.pool, choice.moved) == ("gpu", True)
    assert choice.reason.startswith("re-placed from tpu (drained: takes no new work)")
    (admission,) = sched.cycle(T0 + HOUR).admitted
    assert admission.pool == "gpu"
    assert admission.reason.startswith("re-placed from tpu")


def test_time_to_result_takes_the_sooner_pool_even_when_it_costs_more() -> None:
    pools = pools_of(tpu(chips=16, cost_per_chip_hour=1.0), gpu(chips=16, cost_per_chip_hour=5.0))
    work = PlacementWork("ft", 8, stage="post_training", reference_s=HOUR, objective="time_to_result")

    choice = estimate_placements(work, pools, {"tpu": 2 * HOUR, "gpu": 0.0})

    assert choice.pool == "gpu"
    assert choice.reason.startswith("best time to result: gpu result in 1h")


def test_cost_objective_takes_the_cheaper_pool_even_when_it_waits() -> None:
    pools = pools_of(tpu(chips=16, cost_per_chip_hour=1.0), gpu(chips=16, cost_per_chip_hour=5.0))
    work = PlacementWork("sweep", 8, reference_s=HOUR, objective="cost")

    assert estimate_placements(work, pools, {"tpu": 2 * HOUR, "gpu": 0.0}).pool == "tpu"


def test_mixed_behaves_like_any_for_a_single_part_run() -> None:
    pools = pools_of(tpu(chips=16), gpu(chips=16))
    waits = {"tpu": HOUR, "gpu": 0.0}
    mixed = estimate_placements(PlacementWork("rl", 8, reference_s=HOUR, prefer="mixed"), pools, waits)
    anything = estimate_placements(PlacementWork("rl", 8, reference_s=HOUR, prefer="any"), pools, waits)

    assert mixed.pool == anything.pool == "gpu"
    assert mixed.reason == anything.reason


def test_interruptions_can_make_a_cheap_pool_the_slower_one() -> None:
    """Spot-like GPUs: 0.01 per chip-hour x 8 chips x 10 h = 0.8 interruptions, each losing 1 h + 30 min."""
    flaky = gpu(chips=16, interruptions_per_chip_hour=0.01, restore="30m")
    pools = pools_of(tpu(chips=16), flaky)
    work = PlacementWork("r", 8, reference_s=10 * HOUR, checkpoint_every_s=2 * HOUR)

    choice = estimate_placements(work, pools, {"tpu": 0.5 * HOUR, "gpu": 0.0})

    gpu_terms = choice.candidate("gpu")
    assert gpu_terms is not None
    assert gpu_terms.recovery_s == pytest.approx(0.8 * 1.5 * HOUR)
    assert choice.pool == "tpu"


def test_pools_that_cannot_take_the_run_are_listed_with_why() -> None:
    pools = pools_of(tpu(chips=16), gpu(chips=16, drained=True), gpu("small", chips=8))
    work = PlacementWork("r", 16, reference_s=HOUR, allow=("gpu", "tpu"))

    choice = estimate_placements(work, pools, {"tpu": 0.0})
    notes = {c.pool: c.note for c in choice.candidates}

    assert choice.pool == "tpu"
    assert notes == {"tpu": "", "gpu": "drained: takes no new work", "small": "needs 16 chips; the pool has 8"}
    none = estimate_placements(replace(work, allow=("cpu",)), pools, {"tpu": 0.0})
    assert none.pool is None
    assert none.reason.startswith("no pool can take the run (tpu: tpu is not allowed")


def test_a_run_no_slice_shape_of_a_tpu_pool_fits_is_planned_on_a_pool_that_can_hold_it() -> None:
    pools = pools_of(tpu(chips=8, topologies=["2x2x1", "2x2x2"]), gpu(chips=8, relative_speed=0.9))
    evaluation = PlacementWork("ev", 1, stage="eval", reference_s=300.0, queued_at=T0)

    choice = plan([evaluation], [], pools, T0).choices["ev"]

    assert choice.pool == "gpu"
    assert choice.candidate("tpu").note == "no slice of the pool has 1 chips"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("gpu_cost", "pool"),
    [pytest.param(3.3, "tpu", id="17pct-cheaper-inside-the-margin-stays"), pytest.param(2.8, "gpu", id="30pct-moves")],
)
def test_a_resumed_run_leaves_its_preferred_tpu_only_beyond_the_margin_as_at_first_placement(
    gpu_cost: float, pool: str
) -> None:
    pools = pools_of(TPU, gpu(chips=16, cost_per_chip_hour=gpu_cost))
    first = plan([pretraining()], [], pools, T0, hysteresis=0.1, prefer_margin=0.25).choices["pt"]
    # Suspended and resumed (or retried without fault, or replanned): held to where it was placed.
    again = plan([pretraining(current=first.pool)], [], pools, T0, hysteresis=0.1, prefer_margin=0.25).choices["pt"]

    assert (first.pool, again.pool) == (pool, pool)
    if pool == "tpu":
        assert not again.moved
        assert "gpu gains less than the 25% margin for leaving preferred tpu" in again.reason
    moved = plan([pretraining(current="tpu")], [], pools, T0, hysteresis=0.1, prefer_margin=0.25).choices["pt"]
    assert moved.pool == pool
    if pool == "gpu":
        assert moved.reason.startswith("re-placed from tpu: gpu costs")
        assert "10% hysteresis and the 25% margin for leaving preferred tpu" in moved.reason


def test_run_time_is_the_median_of_the_newest_seven_measured_runs_on_that_pool_else_the_declared_duration() -> None:
    pools = pools_of(tpu(chips=16), gpu(chips=16))
    tpu_pool, gpu_pool = pools
    newest_first = [40.0, 42.0, 38.0, 41.0, 39.0, 44.0, 43.0, 900.0, 900.0]  # two old slow runs beyond the seven
    work = pretraining(run_times={"tpu": newest_first})

    assert run_time_s(work, tpu_pool, pools) == (41.0, "measured from 7 runs")
    assert run_time_s(work, gpu_pool, pools) == (10 * HOUR, "relative_speed")  # nothing measured there
    assert run_time_s(pretraining(run_times={"tpu": [30.0]}), tpu_pool, pools) == (30.0, "measured from 1 run")
