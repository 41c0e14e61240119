"""The fleet's scheduling policy orders the agent's pending work; quotas, fair share and preemption stay as they are."""

from __future__ import annotations

import pytest

from crossrail.errors import UsageError
from crossrail.scheduling import Request
from crossrail.scheduling.policies import POLICY_NAMES, get_policy
from crossrail.scheduling.policies.admission import admission_order, priority_order, view_of
from crossrail.spec.fleet import ROUND_BASED_POLICIES, PolicyName

from .builders import HOUR, T0, admitted, fleet, gpu, queue, req, scheduler


def test_the_fleet_accepts_exactly_the_policies_crossrail_has() -> None:
    assert PolicyName.__args__ == POLICY_NAMES  # type: ignore[attr-defined]
    assert {n for n in POLICY_NAMES if get_policy(n).round_based} == ROUND_BASED_POLICIES  # validate's warning


def test_the_fleet_names_its_policy_and_round_and_marks_time_sliced_pools() -> None:
    built = fleet([gpu(time_sliced=True)], scheduling={"policy": "las", "round": "10m"})
    assert (built.spec.scheduling.policy, built.spec.scheduling.round_s) == ("las", 600.0)
    assert built.spec.pools[0].time_sliced
    default = fleet([gpu()])
    assert (default.spec.scheduling.policy, default.spec.scheduling.round_s) == ("priority", 360.0)
    assert not default.spec.pools[0].time_sliced


def test_the_default_key_orders_like_the_priority_policy() -> None:
    reqs = [
        req("low-early", "a", 1, priority="low", queued_at=T0),
        req("crit-late", "a", 1, priority="critical", queued_at=T0 + 9),
        req("normal-mid", "a", 1, queued_at=T0 + 5),
        req("odd-class", "a", 1, priority="whatever", queued_at=T0 - 5),
    ]
    policy = get_policy("priority")
    by_policy = sorted(reqs, key=lambda r: policy.key(view_of(r)))
    assert sorted(reqs, key=lambda r: (*priority_order(r), r.run)) == by_policy
    assert [r.run for r in by_policy] == ["crit-late", "normal-mid", "low-early", "odd-class"]


def test_an_unknown_policy_in_a_hand_made_config_is_refused() -> None:
    with pytest.raises(UsageError, match="policies are: fifo, priority"):
        admission_order("shortest")


def _two_full_gangs(policy: str, second_queue: str = "b") -> list[str]:
    sched = scheduler([gpu(chips=8)], [], policy=policy)
    sched.submitted(req("normal-first", "a", 8, queued_at=T0))
    sched.submitted(req("critical-second", second_queue, 8, priority="critical", queued_at=T0 + 60))
    return list(admitted(sched.cycle(T0 + 120)))


def test_priority_admits_the_critical_run_first_and_fifo_the_earlier_one() -> None:
    assert _two_full_gangs("priority") == ["critical-second"]
    assert _two_full_gangs("fifo") == ["normal-first"]


def test_fifo_does_not_start_a_run_a_higher_class_of_its_queue_would_preempt() -> None:
    """Within one queue a higher class still preempts a lower one, whatever the policy's order: fifo's earlier
    normal run is not started only to be preempted by the critical one at the next cycle."""
    assert _two_full_gangs("priority", "a") == ["critical-second"]
    assert _two_full_gangs("fifo", "a") == ["critical-second"]


def test_las_admits_the_run_that_has_had_least_service_first() -> None:
    sched = scheduler([gpu(chips=8)], [], policy="las")
    sched.submitted(req("retried", "a", 8, queued_at=T0, attained_s=8 * HOUR))
    sched.submitted(req("fresh", "a", 8, queued_at=T0 + 60))
    assert admitted(sched.cycle(T0 + 120)) == {"fresh": ("gpu", 8)}


def test_las_never_admits_beyond_a_queue_quota() -> None:
    queues = [queue("full", {"gpu": 4}), queue("room", {"gpu": 4})]
    sched = scheduler([gpu(chips=8)], queues, policy="las")
    sched.started(req("holding", "full", 4), "gpu", 4, T0)
    sched.submitted(req("least-served", "full", 4, queued_at=T0))
    sched.submitted(req("most-served", "room", 4, queued_at=T0 + 60, attained_s=10 * HOUR))
    result = sched.cycle(T0 + 120)
    assert admitted(result) == {"most-served": ("gpu", 4)}
    assert "least-served" in result.blocked


def test_fair_share_still_comes_before_the_policy_order_across_teams() -> None:
    sched = scheduler([gpu(chips=16)], [], policy="las", half_life_s=HOUR)
    sched.started(req("history", "heavy", 16), "gpu", 16, T0 - 2 * HOUR)
    sched.finished("history", T0)
    sched.submitted(req("heavy-unserved", "heavy", 16, queued_at=T0 - 50))
    sched.submitted(req("light-served", "light", 16, queued_at=T0, attained_s=HOUR))
    assert admitted(sched.cycle(T0)) == {"light-served": ("gpu", 16)}


def test_changing_the_fleet_policy_reorders_work_already_waiting() -> None:
    sched = scheduler([gpu(chips=8)], [])
    sched.submitted(req("normal-first", "a", 8, queued_at=T0))
    sched.submitted(req("critical-second", "b", 8, priority="critical", queued_at=T0 + 60))
    sched.queues.park(sched.queues.requests["normal-first"], None)  # set aside runs are reordered too
    changes = sched.apply_fleet(fleet([gpu(chips=8)], scheduling={"policy": "fifo"}))
    assert [c.kind for c in changes] == ["policy"]
    assert sched.config.policy == "fifo"
    assert admitted(sched.cycle(T0 + 120)) == {"normal-first": ("gpu", 8)}


def test_a_request_view_carries_what_ordering_needs() -> None:
    view = view_of(Request("r", "q", 4, priority="high", queued_at=5.0, attained_s=7.0))
    assert (view.priority, view.submitted_at, view.chips, view.attained_s, view.pool) == (2, 5.0, 4, 7.0, None)
