"""Cohorts, borrowing and lending limits, reclaim, and priority preemption: scenarios a user would notice."""

from __future__ import annotations

from crossrail.scheduling import Preemption, Scheduler

from .builders import HOUR, T0, admitted, gpu, queue, req, scheduler


def test_a_queue_borrows_the_idle_quota_of_its_cohort() -> None:
    sched = scheduler([gpu(chips=16)], [queue("a", {"gpu": 8}, cohort="lab"), queue("b", {"gpu": 8}, cohort="lab")])
    sched.submitted(req("big", "a", 16))

    result = sched.cycle(T0)

    (admission,) = result.admitted
    assert (admission.chips, admission.borrowed) == (16, 8)
    assert "borrowing 8 beyond queue a's quota from cohort lab" in admission.reason


def test_without_a_cohort_a_queue_stays_within_its_own_quota() -> None:
    sched = scheduler([gpu(chips=16)], [queue("a", {"gpu": 8}), queue("b", {"gpu": 8})])
    sched.submitted(req("big", "a", 16))

    result = sched.cycle(T0)

    assert result.admitted == []
    assert result.blocked["big"] == "queue a uses 0 of its 8-chip quota on gpu; needs 16 more"


def test_borrowing_stops_at_the_borrowing_limit() -> None:
    queues = [queue("a", {"gpu": 8}, cohort="lab", borrowing_limit={"gpu": 4}), queue("b", {"gpu": 8}, cohort="lab")]
    sched = scheduler([gpu(chips=16, per_host=4)], queues)
    sched.submitted(req("sixteen", "a", 16))
    sched.submitted(req("twelve", "a", 12, queued_at=T0 + 1, priority="low"))

    result = sched.cycle(T0)

    assert "may take 12 more in cohort lab (borrowing limit 4); needs 16" in result.blocked["sixteen"]
    assert admitted(result) == {}  # strict FIFO: the 12-chip run waits behind the head

    sched.withdrawn("sixteen")
    assert admitted(sched.cycle(T0 + 1)) == {"twelve": ("gpu", 12)}


def test_a_lender_keeps_what_its_lending_limit_withholds() -> None:
    queues = [queue("a", {"gpu": 8}, cohort="lab"), queue("b", {"gpu": 8}, cohort="lab", lending_limit={"gpu": 4})]
    sched = scheduler([gpu(chips=16, per_host=4)], queues)
    sched.submitted(req("greedy", "a", 16))

    blocked = sched.cycle(T0)

    assert "may take 12 more in cohort lab; needs 16" in blocked.blocked["greedy"]
    sched.submitted(req("greedy", "a", 12))
    assert admitted(sched.cycle(T0 + 1)) == {"greedy": ("gpu", 12)}


def test_the_lender_reclaims_its_quota_from_one_borrowing_run() -> None:
    sched = scheduler([gpu(chips=16)], [queue("a", {"gpu": 8}, cohort="lab"), queue("b", {"gpu": 8}, cohort="lab")])
    sched.submitted(req("b-1", "b", 8))
    sched.submitted(req("b-2", "b", 8, queued_at=T0 + 1))
    sched.cycle(T0 + 10)
    sched.submitted(req("a-1", "a", 8, queued_at=T0 + 20))

    result = sched.cycle(T0 + 30)

    (victim,) = result.preempted
    assert victim.for_run == "a-1"
    assert victim.reason.startswith("reclaimed for a-1: queue b borrows gpu chips in cohort lab")
    assert result.blocked["a-1"].startswith(f"preempting {victim.run} to make room")
    assert sched.cycle(T0 + 40).preempted == []  # waits for the victim instead of taking a second one
    sched.finished(victim.run, T0 + 50)
    assert admitted(sched.cycle(T0 + 60)) == {"a-1": ("gpu", 8)}


def test_a_borrower_within_its_own_quota_is_never_reclaimed() -> None:
    sched = scheduler([gpu(chips=16)], [queue("a", {"gpu": 8}, cohort="lab"), queue("b", {"gpu": 8}, cohort="lab")])
    sched.submitted(req("a-1", "a", 8))
    sched.submitted(req("b-1", "b", 8))
    sched.cycle(T0)
    sched.submitted(req("a-2", "a", 8))

    result = sched.cycle(T0 + 10)

    assert result.preempted == []
    assert "a-2" in result.blocked


def _two_low_runs() -> tuple[Scheduler, float]:
    sched = scheduler([gpu(chips=16)], [queue("a", {"gpu": 16})])
    sched.submitted(req("low-checkpointed", "a", 8, priority="low"))
    sched.submitted(req("low-fresh", "a", 8, priority="low", queued_at=T0 + 1))
    sched.cycle(T0)
    sched.started("low-checkpointed", "gpu", 8, T0)
    sched.started("low-fresh", "gpu", 8, T0 + 600)
    sched.checkpointed("low-checkpointed", T0 + 55 * 60)
    return sched, T0 + HOUR


def test_higher_priority_preempts_the_lower_priority_run_that_loses_least_work() -> None:
    sched, now = _two_low_runs()
    sched.submitted(req("urgent", "a", 8, priority="high", queued_at=now))

    result = sched.cycle(now)

    assert [(p.run, p.grace_s) for p in result.preempted] == [("low-checkpointed", 300.0)]
    assert "high outranks low in queue a; 5m of work since its last checkpoint" in result.preempted[0].reason


def test_one_large_victim_beats_two_small_ones() -> None:
    sched = scheduler([gpu(chips=16)], [queue("a", {"gpu": 16})])
    for run, chips, at in (("small-1", 4, T0 + 50), ("small-2", 4, T0 + 50), ("large", 8, T0)):
        sched.started(req(run, "a", chips, priority="low"), "gpu", chips, at)
    sched.submitted(req("urgent", "a", 8, priority="critical"))

    result = sched.cycle(T0 + 60)

    assert [p.run for p in result.preempted] == ["large"]


def test_equal_priority_never_preempts() -> None:
    sched = scheduler([gpu(chips=8)], [queue("a", {"gpu": 8})])
    sched.started(req("running", "a", 8), "gpu", 8, T0)
    sched.submitted(req("waiting", "a", 8))

    result = sched.cycle(T0 + 10)

    assert result.preempted == []
    assert result.blocked["waiting"] == "gpu has 0 free chips; needs 8"


def test_a_run_is_preempted_at_most_max_per_window_times() -> None:
    sched = scheduler([gpu(chips=8)], [queue("a", {"gpu": 8})], max_preemptions=1, preemption_window_s=HOUR)
    sched.started(req("victim", "a", 8, priority="low"), "gpu", 8, T0)
    sched.submitted(req("first", "a", 8, priority="high"))
    assert [p.run for p in sched.cycle(T0 + 60).preempted] == ["victim"]
    sched.finished("victim", T0 + 120)
    sched.cycle(T0 + 180)  # first runs
    sched.finished("first", T0 + 240)
    sched.submitted(req("victim", "a", 8, priority="low", queued_at=T0 + 120))
    sched.cycle(T0 + 300)  # the victim runs again
    sched.submitted(req("second", "a", 8, priority="high", queued_at=T0 + 310))

    protected = sched.cycle(T0 + 360)
    later = sched.cycle(T0 + 60 + HOUR + 1)

    assert protected.preempted == []
    assert protected.blocked["second"] == "gpu has 0 free chips; needs 8"
    assert [p.run for p in later.preempted] == ["victim"]


def test_preemption_carries_the_configured_grace() -> None:
    sched = scheduler([gpu(chips=8)], [queue("a", {"gpu": 8})], grace_s=42.0)
    sched.started(req("victim", "a", 8, priority="low"), "gpu", 8, T0)
    sched.submitted(req("urgent", "a", 8, priority="critical"))

    (preemption,) = sched.cycle(T0 + 1).preempted

    assert preemption == Preemption("victim", "gpu", 8, 42.0, preemption.reason, for_run="urgent")
    assert preemption.reason.startswith("preempted for urgent: critical outranks low")
