"""Reservations with backfill, drains and capacity changes, and fleet re-application."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from crossrail.errors import PlacementError

from .builders import HOUR, T0, admitted, fleet, gpu, queue, req, scheduler, tpu

START = T0 + 2 * HOUR
GRACE = 300.0


def _reserved(**extra: object):  # type: ignore[no-untyped-def]
    """A 16-chip TPU pool (4 hosts) with 8 chips reserved for team frontier from START for 4h."""
    queues = [queue("research", {"tpu": 16}, queueing="best_effort_fifo"), queue("frontier", {})]
    sched = scheduler([tpu(chips=16)], queues, grace_s=GRACE, **extra)
    sched.reserve("big-run", "tpu", 8, START, 4 * HOUR, team="frontier")
    return sched


def test_a_reservation_takes_work_only_from_runs_that_end_before_it_starts() -> None:
    sched = _reserved()
    sched.submitted(req("long", "research", 8))  # unknown duration: the unreserved hosts
    sched.submitted(req("too-long", "research", 4, duration_s=2 * HOUR, queued_at=T0 + 1))
    sched.submitted(req("short", "research", 8, duration_s=HOUR, queued_at=T0 + 2))

    result = sched.cycle(T0)

    assert admitted(result) == {"long": ("tpu", 8), "short": ("tpu", 8)}
    assert "some reserved by big-run (8 chips held for team frontier starting in 2h)" in result.blocked["too-long"]
    assert "only runs expected to end before it starts may use them" in result.blocked["too-long"]


def test_backfill_that_overstays_is_preempted_so_the_reservation_is_whole_at_its_start() -> None:
    sched = _reserved()
    sched.submitted(req("long", "research", 8))
    sched.submitted(req("backfill", "research", 8, duration_s=HOUR, queued_at=T0 + 1))
    sched.cycle(T0)

    assert sched.cycle(START - GRACE - 60).preempted == []
    claim = sched.cycle(START - GRACE)
    sched.finished("backfill", START - 10)
    sched.submitted(req("frontier-run", "frontier", 8, queued_at=START - 5))
    at_start = sched.cycle(START)

    assert [(p.run, p.grace_s) for p in claim.preempted] == [("backfill", GRACE)]
    assert "reservation big-run starts on its hosts" in claim.preempted[0].reason
    (admission,) = at_start.admitted
    assert (admission.run, admission.chips, admission.reservation) == ("frontier-run", 8, "big-run")
    assert "inside reservation big-run" in admission.reason


def test_reserved_chips_do_not_count_against_the_owners_quota_until_the_reservation_ends() -> None:
    sched = _reserved()
    sched.submitted(req("frontier-run", "frontier", 8, queued_at=START))
    sched.submitted(req("frontier-more", "frontier", 4, queued_at=START + 1))

    during = sched.cycle(START)

    assert admitted(during) == {"frontier-run": ("tpu", 8)}
    assert during.blocked["frontier-more"] == (
        "reservation big-run has no room for 4 chips; outside it, queue frontier uses 0 of its 0-chip quota on tpu; "
        "needs 4 more"
    )
    sched.cycle(START + 4 * HOUR)
    assert sched.cache.used[("frontier", "tpu")] == 8
    assert sched.reservation_status(START + 4 * HOUR) == []


def test_a_reservation_for_runs_that_name_it() -> None:
    sched = scheduler([tpu(chips=16)], [queue("a", {"tpu": 8})])
    sched.reserve("eval-window", "tpu", 8, T0, HOUR)
    sched.submitted(req("named", "a", 8, reservation="eval-window"))
    sched.submitted(req("other", "a", 8, queued_at=T0 + 1))

    result = sched.cycle(T0)

    assert [(a.run, a.reservation) for a in result.admitted] == [("named", "eval-window"), ("other", None)]
    (status,) = sched.reservation_status(T0)
    assert (status.state, status.pinned_chips, status.in_use_chips) == ("active", 8, 8)


def test_unreserving_returns_the_hosts_to_everyone() -> None:
    sched = _reserved()
    sched.submitted(req("long", "research", 16))
    assert "long" in sched.cycle(T0).blocked

    assert sched.unreserve("big-run") is True
    assert admitted(sched.cycle(T0 + 1)) == {"long": ("tpu", 16)}
    assert sched.unreserve("big-run") is False


@pytest.mark.parametrize(
    ("name", "chips", "message"),
    [
        pytest.param("half-host", 6, "6 chips are not whole hosts of 4", id="not-whole-hosts"),
        pytest.param("too-big", 12, "tpu can spare 8 chips from then on", id="overlapping-holds-exceed-the-pool"),
        pytest.param("big-run", 4, "reservation big-run exists", id="name-taken"),
    ],
)
def test_a_reservation_the_pool_cannot_hold_is_refused(name: str, chips: int, message: str) -> None:
    sched = _reserved()

    with pytest.raises(PlacementError, match=message):
        sched.reserve(name, "tpu", chips, START + HOUR, HOUR)


def test_reservations_in_the_fleet_spec_are_held_from_the_start() -> None:
    start = datetime.fromtimestamp(START, UTC).isoformat()
    spec = {"reservations": [{"name": "big-run", "pool": "tpu", "chips": 8, "start": start, "duration": "4h"}]}
    sched = scheduler([tpu(chips=16)], [queue("a", {"tpu": 16})], spec=spec)
    sched.submitted(req("everything", "a", 16))

    assert "everything" in sched.cycle(T0).blocked
    (status,) = sched.reservation_status(T0)
    assert (status.start, status.end, status.state) == (START, START + 4 * HOUR, "upcoming")


def test_a_drained_pool_takes_no_new_work_and_lets_running_work_finish() -> None:
    sched = scheduler([gpu("h100", chips=16), gpu("a100", chips=16, cost_per_chip_hour=9.0)], [])
    sched.submitted(req("running", "a", 8))
    sched.cycle(T0)
    sched.drain("h100")
    sched.submitted(req("next", "a", 8, queued_at=T0 + 1))

    result = sched.cycle(T0 + 10)

    assert result.preempted == []
    assert admitted(result) == {"next": ("a100", 8)}
    assert "running" in sched.cache.allocs
    sched.undrain("h100")
    sched.submitted(req("after", "a", 8, queued_at=T0 + 20))
    assert admitted(sched.cycle(T0 + 30)) == {"after": ("h100", 8)}


def test_draining_with_the_preempt_policy_preempts_running_work() -> None:
    sched = scheduler([gpu(chips=16)], [], spec={"preemption": {"on_drain": "preempt", "grace": "2m"}})
    sched.submitted(req("running", "a", 8))
    sched.cycle(T0)
    sched.drain("gpu")

    (preemption,) = sched.cycle(T0 + 10).preempted

    assert (preemption.run, preemption.grace_s) == ("running", 120.0)
    assert preemption.reason == "gpu is drained and its policy preempts running work"
    assert sched.cycle(T0 + 20).preempted == []  # told once


def test_lost_hosts_take_no_new_work_and_leave_once_their_work_ends() -> None:
    sched = scheduler([gpu(chips=32)], [])
    sched.submitted(req("one", "a", 8))
    sched.submitted(req("two", "a", 8, queued_at=T0 + 1))
    sched.cycle(T0)

    sched.capacity_changed("gpu", 8)  # two free hosts go at once, one busy host is leaving
    sched.submitted(req("three", "a", 8, queued_at=T0 + 2))
    shrunk = sched.cycle(T0 + 10)

    (pool,) = sched.pool_status()
    assert (pool.capacity, pool.free, pool.leaving_hosts) == (8, 0, 1)
    assert shrunk.blocked["three"] == "gpu has 0 free chips; needs 8"
    sched.finished("one", T0 + 20)
    sched.finished("two", T0 + 20)
    assert admitted(sched.cycle(T0 + 30)) == {"three": ("gpu", 8)}
    (pool,) = sched.pool_status()
    assert (pool.capacity, pool.free, pool.leaving_hosts) == (8, 0, 0)


def test_added_hosts_admit_waiting_work_at_once() -> None:
    sched = scheduler([gpu(chips=8)], [])
    sched.submitted(req("big", "a", 16))
    assert sched.cycle(T0).blocked["big"] == "gpu has 8 chips; needs 16"

    sched.capacity_changed("gpu", 16)

    assert admitted(sched.cycle(T0 + 1)) == {"big": ("gpu", 16)}
    with pytest.raises(PlacementError, match="whole hosts of 8"):
        sched.capacity_changed("gpu", 12)


def test_a_reservation_on_lost_hosts_moves_to_hosts_that_remain() -> None:
    sched = scheduler([tpu(chips=16)], [])
    hold = sched.reserve("r", "tpu", 8, START, HOUR)
    before = list(hold.hosts)

    sched.capacity_changed("tpu", 8)

    (status,) = sched.reservation_status(T0)
    assert before == [2, 3]
    assert (status.state, status.pinned_chips) == ("upcoming", 8)
    sched.capacity_changed("tpu", 4)
    assert sched.reservation_status(T0)[0].state == "short"


def test_applying_a_changed_fleet_resizes_drains_and_reserves() -> None:
    old = fleet([gpu(chips=16), gpu("spare", chips=8)], [queue("a", {"gpu": 16})])
    start = datetime.fromtimestamp(START, UTC).isoformat()
    new = fleet(
        [gpu(chips=32, drained=True)],
        [queue("a", {"gpu": 8})],
        reservations=[{"name": "r", "pool": "gpu", "chips": 8, "start": start, "duration": "1h"}],
    )
    from crossrail.scheduling import Scheduler

    sched = Scheduler.from_fleet(old)
    sched.submitted(req("x", "a", 8))

    changes = sched.apply_fleet(new)

    assert [str(c) for c in changes] == [
        "gpu: 16 -> 32 chips (2 hosts join)",
        "gpu: drained: takes no new work",
        "spare: removed; running work finishes, no new work starts",
        "queues: a changed",
        "r: holds 8 chips of gpu from 2026-01-01T02:00:00+00:00 for 1h",
    ]
    result = sched.cycle(T0)
    assert result.admitted == []
    assert result.blocked["x"] == "gpu is drained and takes no new work"
    assert [p.name for p in sched.pool_status()] == ["gpu"]


def test_a_pool_with_running_work_keeps_its_host_size() -> None:
    sched = scheduler([gpu(chips=16)], [])
    sched.started(req("x", "a", 8), "gpu", 8, T0)

    with pytest.raises(PlacementError, match="chips_per_host cannot change while work runs there"):
        sched.apply_fleet(fleet([gpu(chips=16, per_host=4)], []))
