"""Round-based policies in the agent: time slicing on time-sliced pools, outside the preemption bound."""

from __future__ import annotations

from typing import Any

from crossrail.scheduling import Scheduler

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
