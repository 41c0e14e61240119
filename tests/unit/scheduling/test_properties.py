"""Properties over random fleets and workloads, on a virtual clock advanced by the test."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossrail.scheduling import CycleResult, Request, Scheduler, SchedulerConfig
from crossrail.spec import Fleet

from .builders import T0, fleet
from .strategies import at, check_admissions, check_invariants, fleets, requests

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GRACE = 120.0


def _scheduler(built: Fleet, **config: object) -> Scheduler:
    base = SchedulerConfig.from_fleet(built, fallback_wait_s=300.0)
    return Scheduler.from_fleet(built, SchedulerConfig(**{**base.__dict__, "grace_s": GRACE, **config}))


@SETTINGS
@given(data=st.data(), built=fleets())
@pytest.mark.slow
def test_no_cycle_breaks_capacity_quota_gangs_or_slice_shapes(data: st.DataObject, built: Fleet) -> None:
    sched = _scheduler(built)
    asked: dict[str, Request] = {}
    for step in range(12):
        for i in range(data.draw(st.integers(0, 5))):
            req = data.draw(requests(built, f"r{step}-{i}", at(step)))
            asked[req.run] = req
            sched.submitted(req)
        _fleet_event(data, sched, built)
        result = sched.cycle(at(step))
        check_admissions(result, asked, sched)
        check_invariants(sched, built)
        for p in result.preempted:
            sched.finished(p.run, at(step) + 30)
        running = sorted(sched.cache.allocs)
        for run in data.draw(st.lists(st.sampled_from(running), unique=True)) if running else []:
            sched.finished(run, at(step) + 30)
        check_invariants(sched, built)


def _fleet_event(data: st.DataObject, sched: Scheduler, built: Fleet) -> None:
    """Now and then a pool is drained, undrained, loses hosts or gains them."""
    pool = data.draw(st.sampled_from(built.pools))
    event = data.draw(st.sampled_from(["none", "none", "drain", "undrain", "resize"]))
    if event == "drain":
        sched.drain(pool.name, preempt=data.draw(st.booleans()))
    elif event == "undrain":
        sched.undrain(pool.name)
    elif event == "resize":
        sched.capacity_changed(pool.name, pool.chips_per_host * data.draw(st.integers(0, 2 * pool.hosts)))


@SETTINGS
@given(data=st.data(), built=fleets())
@pytest.mark.slow
def test_with_finite_load_every_run_is_admitted_eventually(data: st.DataObject, built: Fleet) -> None:
    count = data.draw(st.integers(1, 20))
    workload = [data.draw(requests(built, f"r{i}", at(i % 5), sizes=(1, 2, 4, 8))) for i in range(count)]
    feasible = [r for r in workload if _fits_alone(built, r)]
    sched = _scheduler(built)
    ends: dict[str, float] = {}
    started: set[str] = set()
    for minute in range(2000):
        now = at(minute)
        for r in feasible:
            if r.queued_at == now:
                sched.submitted(r)
        for run, end in sorted(ends.items()):
            if end <= now:
                sched.finished(run, now)
                del ends[run]
        result = sched.cycle(now)
        _follow(result, sched, ends, started, feasible, now)
        if not sched.pending and not ends and minute >= 5:
            break
    assert started == {r.run for r in feasible}
    assert sched.pending == 0


def _follow(
    result: CycleResult, sched: Scheduler, ends: dict[str, float], started: set[str], reqs: list[Request], now: float
) -> None:
    """Admitted runs end after their duration; preempted ones stop within the grace and queue again."""
    by_run = {r.run: r for r in reqs}
    for a in result.admitted:
        started.add(a.run)
        ends[a.run] = now + (by_run[a.run].duration_s or 60.0)
    for p in result.preempted:
        ends.pop(p.run, None)
        sched.finished(p.run, now + 60)
        sched.submitted(by_run[p.run])


def _fits_alone(built: Fleet, req: Request) -> bool:
    alone = _scheduler(built)
    alone.submitted(req)
    return bool(alone.cycle(req.queued_at + 10_000).admitted)


@SETTINGS
@given(data=st.data())
def test_a_reservation_gets_its_full_capacity_at_its_start(data: st.DataObject) -> None:
    hosts = data.draw(st.integers(2, 6))
    built = fleet(
        [{"name": "p", "accelerator": "gpu", "chip_type": "h100", "chips": 4 * hosts, "chips_per_host": 4}],
        [
            {"name": "q", "stage": "experiment", "quota": {"p": 4 * hosts}, "queueing": "best_effort_fifo"},
            {"name": "owners", "stage": "experiment", "team": "owner"},
        ],
    )
    sched = _scheduler(built)
    reserved = 4 * data.draw(st.integers(1, hosts))
    start = at(data.draw(st.integers(10, 60)))
    sched.reserve("hold", "p", reserved, start, 3600.0, team="owner")
    runtime: dict[str, float] = {}
    for i in range(data.draw(st.integers(1, 16))):
        declared = data.draw(st.sampled_from([None, 300.0, 900.0, 3600.0]))
        actual = data.draw(st.sampled_from([120.0, 600.0, 1800.0, 7200.0]))  # often more than declared
        chips = data.draw(st.sampled_from([1, 2, 4, 8]))
        sched.submitted(Request(f"b{i}", "q", chips, queued_at=T0, team="other", duration_s=declared))
        runtime[f"b{i}"] = actual
    ends: dict[str, float] = {}
    now = T0
    while now < start:
        for run, end in sorted(ends.items()):
            if end <= now:
                sched.finished(run, now)
                del ends[run]
        result = sched.cycle(now)
        for a in result.admitted:
            ends[a.run] = now + runtime[a.run]
        for p in result.preempted:
            ends[p.run] = min(ends[p.run], now + p.grace_s)
        now += 60.0
    for run, end in sorted(ends.items()):
        if end <= start:
            sched.finished(run, start)
    sched.submitted(Request("owner-run", "owners", reserved, queued_at=start, team="owner"))

    result = sched.cycle(start)

    assert [(a.run, a.chips, a.reservation) for a in result.admitted if a.run == "owner-run"] == [
        ("owner-run", reserved, "hold")
    ]
