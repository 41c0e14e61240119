"""Placement rules kept from v0, gangs and slice shapes, FIFO modes, fair share, elastic runs."""

from __future__ import annotations

import pytest

from crossrail.scheduling import Admission, Request
from crossrail.scheduling.types import Decision, Pending

from .builders import HOUR, T0, admitted, gpu, queue, req, scheduler, tpu

MIXED = [tpu(chips=16, cost_per_chip_hour=4.0), gpu(chips=16, cost_per_chip_hour=3.0)]


@pytest.mark.parametrize(
    ("fields", "at", "pool", "why"),
    [
        pytest.param({"prefer": "tpu"}, T0, "tpu", "tpu preferred", id="preferred-accelerator-first"),
        pytest.param({"prefer": "any"}, T0, "gpu", "no accelerator preference (any)", id="no-preference-cheapest"),
        pytest.param(
            {"prefer": "tpu", "avoid_pool": "tpu"},
            T0,
            "gpu",
            "retry moved off tpu, where the previous attempt ended",
            id="retry-avoids-the-failed-pool",
        ),
        pytest.param(
            {"prefer": "tpu", "allow": ("gpu",)}, T0, "gpu", "no tpu pool is allowed", id="preference-not-allowed"
        ),
    ],
)
def test_placement_follows_the_v0_rules(fields: dict[str, object], at: float, pool: str, why: str) -> None:
    sched = scheduler(MIXED, [])
    sched.submitted(req("r", "a", 8, **fields))

    (admission,) = sched.cycle(at).admitted

    assert admission.pool == pool
    assert admission.reason.startswith(why)


def test_other_accelerators_only_after_the_fallback_wait() -> None:
    sched = scheduler(MIXED, [], fallback_wait_s=60.0)
    sched.started(req("holder", "a", 16), "tpu", 16, T0)
    sched.submitted(req("r", "a", 8, prefer="tpu"))

    early = sched.cycle(T0 + 59)
    late = sched.cycle(T0 + 60)

    assert early.blocked["r"] == "tpu has 0 free chips; needs 8"
    assert late.admitted[0].reason.startswith("fell back after waiting 1m for a tpu pool; gpu had 16 free chips")


def test_a_best_effort_head_waiting_for_its_fallback_comes_back_on_time() -> None:
    sched = scheduler(MIXED, [queue("a", {"tpu": 16, "gpu": 16}, queueing="best_effort_fifo")], fallback_wait_s=60.0)
    sched.started(req("holder", "a", 16), "tpu", 16, T0)
    sched.submitted(req("r", "a", 8, prefer="tpu"))

    assert "r" in sched.cycle(T0 + 1).blocked
    assert sched.cycle(T0 + 30).blocked == {}  # set aside: not tried again until its fallback time
    assert admitted(sched.cycle(T0 + 61)) == {"r": ("gpu", 8)}


def test_a_gang_gets_all_its_chips_or_none() -> None:
    sched = scheduler([gpu(chips=16)], [])
    sched.started(req("holder", "a", 8), "gpu", 8, T0)
    sched.submitted(req("gang", "a", 16))

    result = sched.cycle(T0)

    assert result.admitted == []
    assert result.blocked["gang"] == "gpu has 8 free chips; needs 16"


@pytest.mark.parametrize(
    ("chips", "fragmented", "expected"),
    [
        pytest.param(12, False, "no slice shape of tpu fits 12 chips (shapes hold 2, 4, 8, 16", id="not-a-slice-shape"),
        pytest.param(8, True, "tpu has 8 free chips, but not 2 wholly free hosts of 4", id="fragmented"),
        pytest.param(4, True, "tpu has 8 free chips, but not one host of 4", id="no-host-with-room"),
    ],
)
def test_slices_keep_their_shape_and_hosts(chips: int, fragmented: bool, expected: str) -> None:
    sched = scheduler([tpu(chips=16, topologies=["1x2", "2x2x1", "2x2x2", "2x2x4"])], [])
    for i in range(8):
        sched.submitted(req(f"pair-{i}", "a", 2, queued_at=T0 - 10 + i))
    placed = sched.cycle(T0 - 1).admitted
    if fragmented:  # two free chips left on each of the four hosts
        one_per_host = {a.hosts[0][0]: a.run for a in placed}
        for run in one_per_host.values():
            sched.finished(run, T0 - 1)
    sched.submitted(req("slice", "a", chips))

    result = sched.cycle(T0)

    assert result.admitted == []
    assert result.blocked["slice"].startswith(expected)


def test_a_gpu_gang_above_one_host_takes_whole_hosts() -> None:
    sched = scheduler([gpu(chips=32)], [])
    sched.submitted(req("two-hosts", "a", 16))

    (admission,) = sched.cycle(T0).admitted

    assert admission.hosts == ((0, 8), (1, 8))


def test_a_strict_fifo_queue_waits_behind_its_head() -> None:
    sched = scheduler([gpu(chips=8)], [queue("a", {"gpu": 8})])
    sched.started(req("holder", "a", 4), "gpu", 4, T0)
    sched.submitted(req("big", "a", 8))
    sched.submitted(req("small", "a", 4, queued_at=T0 + 1))

    result = sched.cycle(T0 + 2)

    assert result.admitted == []
    assert list(result.blocked) == ["big"]


def test_a_best_effort_queue_lets_later_runs_pass_a_head_that_does_not_fit() -> None:
    sched = scheduler([gpu(chips=8)], [queue("a", {"gpu": 8}, queueing="best_effort_fifo")])
    sched.started(req("holder", "a", 4), "gpu", 4, T0)
    sched.submitted(req("big", "a", 8))
    sched.submitted(req("small", "a", 4, queued_at=T0 + 1))

    result = sched.cycle(T0 + 2)
    sched.finished("small", T0 + 3)
    sched.finished("holder", T0 + 3)
    after = sched.cycle(T0 + 4)

    assert admitted(result) == {"small": ("gpu", 4)}
    assert list(result.blocked) == ["big"]
    assert admitted(after) == {"big": ("gpu", 8)}  # set aside until chips were freed, then first again


def test_priority_classes_go_first_across_queues() -> None:
    sched = scheduler([gpu(chips=8)], [])
    sched.submitted(req("normal-early", "a", 8, queued_at=T0 - 100))
    sched.submitted(req("critical-late", "b", 8, priority="critical"))

    assert admitted(sched.cycle(T0)) == {"critical-late": ("gpu", 8)}


def test_the_team_with_the_lower_dominant_share_goes_first() -> None:
    sched = scheduler([gpu(chips=16)], [], half_life_s=HOUR)
    sched.started(req("history", "heavy", 16), "gpu", 16, T0 - 2 * HOUR)
    sched.finished("history", T0)
    sched.submitted(req("heavy-next", "heavy", 16, queued_at=T0 - 50))
    sched.submitted(req("light-next", "light", 16, queued_at=T0))

    assert admitted(sched.cycle(T0)) == {"light-next": ("gpu", 16)}


def test_usage_history_fades_with_the_half_life() -> None:
    sched = scheduler([gpu(chips=16)], [], half_life_s=HOUR)
    sched.started(req("history", "heavy", 16), "gpu", 16, T0 - 2 * HOUR)
    sched.finished("history", T0)

    shares = [sched.cache.usage.share("team heavy", T0 + k * HOUR, lambda _: 16) for k in (0, 1, 20)]

    assert shares[0] == pytest.approx(0.75)  # two half-lives of full use: 1 - 1/4
    assert shares[1] == pytest.approx(0.375)
    assert shares[2] < 1e-5


def test_admissions_in_one_cycle_raise_the_teams_share_at_once() -> None:
    sched = scheduler([gpu(chips=32)], [queue("x", {"gpu": 32}, team="t1"), queue("y", {"gpu": 32}, team="t2")])
    for i in range(2):
        sched.submitted(req(f"t1-{i}", "x", 8, team="t1", queued_at=T0 + i))
        sched.submitted(req(f"t2-{i}", "y", 8, team="t2", queued_at=T0 + 10 + i))

    order = [a.run for a in sched.cycle(T0 + 20).admitted]

    assert order == ["t1-0", "t2-0", "t1-1", "t2-1"]


def test_an_elastic_run_takes_what_fits_and_is_offered_more_when_chips_free() -> None:
    sched = scheduler([gpu(chips=16, per_host=4)], [])
    sched.started(req("holder", "a", 8), "gpu", 8, T0)
    sched.submitted(req("elastic", "a", 16, min_chips=4))

    first = sched.cycle(T0 + 1)
    sched.finished("holder", T0 + 2)
    second = sched.cycle(T0 + 3)

    assert admitted(first) == {"elastic": ("gpu", 8)}
    assert first.grown == []
    (growth,) = second.grown
    assert (growth.run, growth.chips_from, growth.chips_to) == ("elastic", 8, 16)
    sched.resized("elastic", 16, T0 + 4)
    assert sched.pool_status()[0].free == 0


def test_no_growth_while_a_run_waits_for_the_pool() -> None:
    sched = scheduler([gpu(chips=16, per_host=4)], [])
    sched.started(req("holder", "a", 8), "gpu", 8, T0)
    sched.submitted(req("elastic", "a", 8, min_chips=4, max_chips=16))
    assert admitted(sched.cycle(T0)) == {"elastic": ("gpu", 8)}
    sched.finished("holder", T0 + 1)
    sched.submitted(req("waiting", "b", 12, queued_at=T0 + 1))
    sched.submitted(req("blocker", "b", 4, queued_at=T0))

    result = sched.cycle(T0 + 2)

    assert admitted(result) == {"blocker": ("gpu", 4)}
    assert result.blocked["waiting"] == "gpu has 4 free chips; needs 12"
    assert result.grown == []


def test_an_admission_is_a_v0_decision_and_a_request_comes_from_a_v0_pending() -> None:
    pending = Pending("r", "a", "high", T0, 8, min_chips=4, max_chips=8, allow=("gpu",), prefer="gpu")

    request = Request.from_pending(pending, team="t", duration_s=HOUR)
    sched = scheduler([gpu(chips=16)], [])
    sched.submitted(request)
    (admission,) = sched.cycle(T0).admitted

    assert (request.rank, request.low, request.high, request.tenant) == (1, 4, 8, "team t")
    assert isinstance(admission, Decision)
    assert isinstance(admission, Admission)
    assert (admission.run, admission.pool, admission.chips) == ("r", "gpu", 8)
