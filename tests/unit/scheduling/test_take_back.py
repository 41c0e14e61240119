"""A cycle does not start a run its next pass would preempt: a run it admitted earlier is a victim by the
usual rules, taken back (never started) and queued again, so the cycle's decisions are a fixpoint both
drivers reach, the agent passing again at once and the simulator at its next event."""

from __future__ import annotations

from .builders import T0, admitted, gpu, queue, req, scheduler


def test_a_higher_class_behind_in_fifo_order_takes_the_chips_and_the_next_pass_changes_nothing() -> None:
    sched = scheduler([gpu(chips=8)], [], policy="fifo")
    sched.submitted(req("normal-first", "a", 8, queued_at=T0))
    sched.submitted(req("high-second", "a", 8, priority="high", queued_at=T0 + 60))
    result = sched.cycle(T0 + 120)
    assert admitted(result) == {"high-second": ("gpu", 8)}
    assert not result.preempted
    again = sched.cycle(T0 + 120)
    assert again.admitted == []
    assert again.preempted == []
    assert list(sched.queues.requests) == ["normal-first"]


def test_a_run_taken_back_competes_again_in_the_same_cycle() -> None:
    sched = scheduler([gpu(chips=8), gpu("gpu-b", chips=8)], [], policy="fifo")
    sched.started(req("busy", "other", 8), "gpu-b", 8, T0)
    sched.submitted(req("normal-first", "a", 8, queued_at=T0, pool="gpu", runs_on=("gpu", "gpu-b")))
    sched.submitted(req("high-second", "a", 8, priority="high", queued_at=T0 + 60, runs_on=("gpu",)))
    sched.finished("busy", T0 + 120)
    result = sched.cycle(T0 + 120)
    assert admitted(result) == {"high-second": ("gpu", 8), "normal-first": ("gpu-b", 8)}
    assert not result.preempted


def test_taking_back_a_fresh_run_and_preempting_a_running_one_make_room_together() -> None:
    sched = scheduler([gpu(chips=8)], [], policy="fifo")
    sched.started(req("running", "a", 4), "gpu", 4, T0)
    sched.submitted(req("normal-first", "a", 4, queued_at=T0))
    sched.submitted(req("high-second", "a", 8, priority="high", queued_at=T0 + 60))
    result = sched.cycle(T0 + 120)
    assert not result.admitted
    assert [p.run for p in result.preempted] == ["running"]
    assert sched.nominated == {"high-second": {"running"}}
    sched.finished("running", T0 + 130)
    assert admitted(sched.cycle(T0 + 130)) == {"high-second": ("gpu", 8)}


def test_a_lender_reclaims_its_quota_from_a_borrower_the_same_cycle_admitted() -> None:
    queues = [queue("a", {"gpu": 8}, cohort="lab"), queue("b", {"gpu": 8}, cohort="lab")]
    sched = scheduler([gpu(chips=16)], queues, policy="fifo")
    sched.submitted(req("b-1", "b", 8, team="lab", queued_at=T0))
    sched.submitted(req("b-2", "b", 8, team="lab", queued_at=T0 + 1))
    sched.submitted(req("a-1", "a", 8, team="lab", queued_at=T0 + 20))
    result = sched.cycle(T0 + 30)
    assert admitted(result) == {"b-1": ("gpu", 8), "a-1": ("gpu", 8)}
    assert not result.preempted
    assert "b-2" in result.blocked  # taken back (the last admitted first), then blocked in its turn
    assert sched.cycle(T0 + 30).preempted == []
