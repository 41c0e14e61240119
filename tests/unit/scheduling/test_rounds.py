"""Round-based policies in the agent: time slicing on time-sliced pools, outside the preemption bound."""

from __future__ import annotations

from typing import Any

from crossrail.scheduling import Scheduler
from crossrail.scheduling.estimate import PlacementWork, PoolInfo
from crossrail.scheduling.rounds import estimated_rates, served_by_type

from .builders import T0, admitted, fleet, gpu, queue, req, scheduler

ROUND = 600.0
NO_PREEMPTION = {"max_per_window": 0}  # the bound forbids every ordinary preemption


def _sliced(policy: str = "las", *, time_sliced: bool = True, **queues: Any) -> Scheduler:
    spec = {"scheduling": {"policy": policy, "round": "10m"}, "preemption": NO_PREEMPTION}
    qs = [queue(name, quota) for name, quota in queues.items()]
    return scheduler([gpu(chips=8, time_sliced=time_sliced)], qs, spec=spec)


def _one_running_one_waiting(sched: Scheduler) -> None:
    sched.started(req("first", "a", 8), "gpu", 8, T0)
    sched.submitted(req("second", "b", 8, queued_at=T0))
    assert sched.cycle(T0 + 1).preempted == []  # opens the first round; "first" is too young to swap out


def test_las_swaps_the_longest_served_run_out_at_the_round_boundary_outside_the_bound() -> None:
    sched = _sliced()
    _one_running_one_waiting(sched)

    result = sched.cycle(T0 + 1 + ROUND)

    (stop,) = result.preempted
    assert (stop.run, stop.pool, stop.for_run) == ("first", "gpu", "second")
    assert stop.reason == "round boundary on time-sliced gpu: policy las gives the next round to second"
    assert result.blocked["second"].startswith("waiting for 1 preempted run(s) to stop: first")
    assert "first" not in sched.cache.preempted_at  # not counted against the preemption bound


def test_the_swapped_run_comes_back_when_the_other_has_had_more_service() -> None:
    sched = _sliced()
    _one_running_one_waiting(sched)
    sched.cycle(T0 + 1 + ROUND)
    sched.finished("first", T0 + 610)
    sched.submitted(req("first", "a", 8, queued_at=T0 + 610, attained_s=8 * 610))

    assert admitted(sched.cycle(T0 + 611)) == {"second": ("gpu", 8)}
    assert sched.cycle(T0 + 1 + 2 * ROUND).preempted == []  # second: 8 x 590 s < first's 8 x 610 s
    (stop,) = sched.cycle(T0 + 1 + 3 * ROUND).preempted
    assert (stop.run, stop.for_run) == ("second", "first")


def test_a_pool_that_is_not_time_sliced_is_never_swapped() -> None:
    sched = _sliced(time_sliced=False)
    _one_running_one_waiting(sched)
    result = sched.cycle(T0 + 1 + ROUND)
    assert result.preempted == []
    assert "second" in result.blocked


def test_an_ordering_policy_never_swaps_even_on_a_time_sliced_pool() -> None:
    sched = _sliced("fifo")
    assert sched.rounds is None
    _one_running_one_waiting(sched)
    assert sched.cycle(T0 + 1 + ROUND).preempted == []


def test_a_head_whose_queue_has_no_quota_there_swaps_nothing_out() -> None:
    sched = _sliced(a={"gpu": 8}, b={})
    _one_running_one_waiting(sched)
    assert sched.cycle(T0 + 1 + ROUND).preempted == []


def test_max_min_fairness_time_slices_too() -> None:
    sched = _sliced("max_min_fairness")
    _one_running_one_waiting(sched)
    (stop,) = sched.cycle(T0 + 1 + ROUND).preempted
    assert (stop.run, stop.for_run) == ("first", "second")


def test_marking_a_pool_time_sliced_in_the_fleet_file_starts_swapping_there() -> None:
    sched = _sliced(time_sliced=False)
    _one_running_one_waiting(sched)
    spec = {"scheduling": {"policy": "las", "round": "10m"}, "preemption": NO_PREEMPTION}
    changes = sched.apply_fleet(fleet([gpu(chips=8, time_sliced=True)], [], **spec))
    assert [(c.kind, c.detail) for c in changes] == [("pool_settings", "time_sliced changed")]
    (stop,) = sched.cycle(T0 + 1 + ROUND).preempted
    assert stop.run == "first"


# --- the rates the live agent gives heterogeneity-aware policies -------------------------------------------


def _pools(slow_speed: float = 0.5) -> list[PoolInfo]:
    return [
        PoolInfo("fast", "gpu", "h100", 8, relative_speed=1.0),
        PoolInfo("slow", "gpu", "a100", 8, relative_speed=slow_speed),
        PoolInfo("slow-2", "gpu", "a100", 8, relative_speed=slow_speed / 2),
    ]


def test_a_runs_rates_per_chip_type_are_its_declared_work_over_the_estimate_on_that_types_fastest_pool() -> None:
    work = PlacementWork(run="r", chips=1, reference_s=600.0)
    assert estimated_rates(work, _pools()) == (("a100", 0.5), ("h100", 1.0))  # the pools' speeds, as simulated


def test_measured_runs_of_the_same_work_replace_a_pools_declared_speed() -> None:
    work = PlacementWork(run="r", chips=1, reference_s=600.0, run_times={"slow": [2400.0, 2400.0]})
    assert estimated_rates(work, _pools()) == (("a100", 0.25), ("h100", 1.0))  # 600 s of work in 2400 s there


def test_no_rates_without_a_duration_an_estimate_on_every_chip_type_or_a_difference_between_them() -> None:
    assert estimated_rates(PlacementWork(run="r", chips=1), _pools()) == ()  # no declared work to count in
    uniform = [
        PoolInfo("x", "gpu", "h100", 8),
        PoolInfo("y", "gpu", "a100", 8),
        PoolInfo("z", "gpu", "a100", 8, relative_speed=0.5),
    ]
    assert estimated_rates(PlacementWork(run="r", chips=1, reference_s=600.0), uniform) == ()  # fastest per type alike
    gpu_only = PlacementWork(run="r", chips=1, reference_s=600.0, allow=("gpu",))
    assert estimated_rates(gpu_only, [*_pools(), PoolInfo("v5p", "tpu", "tpu-v5p", 8, relative_speed=2.0)]) == (
        ("a100", 0.5),  # every chip type is rated, as the simulator rates them; rates() zeroes those it may not use
        ("h100", 1.0),
        ("tpu-v5p", 2.0),
    )


def test_service_by_pool_is_summed_by_the_pools_chip_types() -> None:
    specs = {p.name: p for p in fleet([gpu("fast", chip_type="h100"), gpu("slow", chip_type="a100")]).spec.pools}
    assert served_by_type({"fast": 10.0, "slow": 5.0, "gone": 7.0}, specs) == (("a100", 5.0), ("h100", 10.0))
