"""The level-triggered path the agent takes: sync the scheduler to the store's runs, then cycle."""

from __future__ import annotations

from crossrail.scheduling import Running

from .builders import T0, admitted, gpu, queue, req, scheduler


def test_sync_holds_exactly_the_runs_the_store_has() -> None:
    sched = scheduler([gpu(chips=8)], [queue("a", {"gpu": 8})])
    first, second = req("first", "a", 8), req("second", "a", 8, queued_at=T0 + 1)

    sched.sync([first, second], [], T0)
    assert admitted(sched.cycle(T0)) == {"first": ("gpu", 8)}
    sched.sync([second], [Running(first, "gpu", 8, started_at=T0 + 5)], T0 + 10)
    assert sched.cache.allocs["first"].started_at == T0 + 5
    assert sched.cycle(T0 + 10).admitted == []
    sched.sync([second], [], T0 + 20)  # first ended

    assert admitted(sched.cycle(T0 + 20)) == {"second": ("gpu", 8)}
    assert sched.pending == 0


def test_an_admission_the_agent_did_not_record_is_released_by_the_next_sync() -> None:
    sched = scheduler([gpu(chips=8)], [queue("a", {"gpu": 8})])
    sched.sync([req("cancelled", "a", 8)], [], T0)
    sched.cycle(T0)

    sched.sync([], [], T0 + 1)

    assert sched.pool_status()[0].free == 8
    assert sched.pending == 0


def test_a_scheduler_rebuilt_by_sync_decides_like_one_fed_event_by_event() -> None:
    pools, queues = [gpu(chips=32)], [queue("a", {"gpu": 16}, cohort="c"), queue("b", {"gpu": 16}, cohort="c")]
    running = [Running(req("r1", "a", 8), "gpu", 8, T0), Running(req("r2", "b", 16), "gpu", 16, T0)]
    waiting = [req("w1", "a", 8, queued_at=T0 + 1), req("w2", "b", 8, queued_at=T0 + 2)]
    fed = scheduler(pools, queues)
    for r in running:
        fed.started(r.request, r.pool, r.chips, r.started_at)
    for w in waiting:
        fed.submitted(w)
    rebuilt = scheduler(pools, queues)
    rebuilt.sync(waiting, running, T0 + 3)

    assert admitted(fed.cycle(T0 + 3)) == admitted(rebuilt.cycle(T0 + 3)) == {"w1": ("gpu", 8)}


def test_sync_keeps_preemption_history_between_passes() -> None:
    sched = scheduler([gpu(chips=8)], [queue("a", {"gpu": 8})], max_preemptions=1)
    low = req("low", "a", 8, priority="low")
    high = req("high", "a", 8, priority="high", queued_at=T0 + 1)
    sched.sync([high], [Running(low, "gpu", 8, T0)], T0 + 1)
    assert [p.run for p in sched.cycle(T0 + 1).preempted] == ["low"]
    sched.sync([], [Running(high, "gpu", 8, T0 + 2)], T0 + 2)  # low was preempted, high runs
    sched.sync([high], [Running(low, "gpu", 8, T0 + 3)], T0 + 3)  # and back again, high requeued

    result = sched.cycle(T0 + 4)

    assert result.preempted == []
    assert "high" in result.blocked


def test_a_run_queued_again_gives_up_the_chips_it_held() -> None:
    sched = scheduler([gpu(chips=8)], [queue("a", {"gpu": 8})])
    sched.started(req("retry", "a", 8), "gpu", 8, T0)

    sched.submitted(req("retry", "a", 8, queued_at=T0 + 5, avoid_pool="gpu"))

    (admission,) = sched.cycle(T0 + 6).admitted
    assert admission.reason.startswith("retry on the same pool")
