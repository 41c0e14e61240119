"""Metrics of hand-told event stories, checked number by number."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from crossrail.core import Event, EventType
from crossrail.metrics import Distribution, GroupMetrics, Report, compute

from .stories import T0, Story, tell

NONE = Distribution(count=0, p50=None, p95=None, mean=None, max=None)


def one(seconds: float) -> Distribution:
    return Distribution(count=1, p50=seconds, p95=seconds, mean=seconds, max=seconds)


def group(report: Report, stage: str, pool: str) -> GroupMetrics:
    found = report.group(stage, pool)
    assert found is not None, f"no group {stage} x {pool} in {[(g.stage, g.pool) for g in report.groups]}"
    return found


def test_a_successful_run_has_exact_queue_run_and_cost_numbers() -> None:
    run = Story("pre-1").wait(60).start("tpu-a", price=2.0, chips=8).wait(3600).succeed()
    report = compute(tell(run), now=run.now + 10)

    expected = GroupMetrics(
        stage="pretrain",
        pool="tpu-a",
        runs=1,
        succeeded=1,
        failed=0,
        cancelled=0,
        active=0,
        success_rate=1.0,
        queue_time=one(60.0),
        run_time=one(3600.0),
        recoveries=0,
        recovery_time=NONE,
        chip_hours=8.0,
        cost=16.0,
        cost_per_effective_run=16.0,
        jct=one(3660.0),
    )
    assert report.groups == [expected]
    assert report.totals == GroupMetrics(**{**expected.__dict__, "stage": "*", "pool": "*"})
    assert report.pending == {}
    assert report.generated_at == run.now + 10


@pytest.mark.parametrize(
    "lose_attempt",
    [
        pytest.param(lambda s: s.fail(final=False), id="failed-on-a-retryably"),
        pytest.param(lambda s: s.preempt(), id="preempted-on-a"),
    ],
)
def test_a_run_that_recovers_on_another_pool_is_billed_where_each_attempt_ran(
    lose_attempt: Callable[[Story], Story],
) -> None:
    run = Story("pre-1").wait(60).start("gpu-a", price=2.0).wait(1800)
    lose_attempt(run).wait(30).retry().wait(90).start("tpu-b", price=3.0).wait(3600).succeed()
    report = compute(tell(run), now=run.now)

    a, b = group(report, "pretrain", "gpu-a"), group(report, "pretrain", "tpu-b")
    assert (a.runs, a.succeeded, a.recoveries) == (0, 0, 0)
    assert (a.queue_time, a.run_time) == (one(60.0), one(1800.0))
    assert (a.chip_hours, a.cost, a.cost_per_effective_run) == (4.0, 8.0, None)

    assert (b.runs, b.succeeded, b.success_rate) == (1, 1, 1.0)
    assert (b.recoveries, b.recovery_time) == (1, one(120.0))
    assert b.queue_time == one(90.0), "the retry's wait starts at its own `queued`"
    assert (b.chip_hours, b.cost, b.cost_per_effective_run) == (8.0, 24.0, 24.0)

    totals = report.totals
    assert (totals.runs, totals.succeeded, totals.recoveries) == (1, 1, 1)
    assert (totals.chip_hours, totals.cost) == (12.0, 32.0)
    assert totals.cost_per_effective_run == 32.0, "the lost attempt on gpu-a is part of what success cost"


@pytest.mark.parametrize(
    "final",
    [pytest.param(True, id="failed-with-final-true"), pytest.param(None, id="failed-with-no-final-flag")],
)
def test_a_failed_run_leaves_its_group_without_a_cost_per_effective_run(final: bool | None) -> None:
    run = Story("pre-1").wait(60).start("tpu-a", price=2.0).wait(1800).fail(final=final)
    g = compute(tell(run), now=run.now).groups[0]

    assert (g.runs, g.failed, g.active, g.success_rate) == (1, 1, 0, 0.0)
    assert (g.cost, g.cost_per_effective_run) == (8.0, None)
    assert g.run_time == one(1800.0)


def test_a_run_cancelled_while_queued_counts_under_no_pool_with_no_queue_time() -> None:
    run = Story("pre-1").wait(300).cancel()
    report = compute(tell(run), now=run.now + 600)

    (g,) = report.groups
    assert (g.stage, g.pool, g.runs, g.cancelled, g.success_rate) == ("pretrain", "-", 1, 1, None)
    assert (g.queue_time, g.run_time, g.chip_hours, g.cost) == (NONE, NONE, 0.0, 0.0)
    assert report.pending == {}, "a cancelled run waits no more"


def test_a_running_attempt_is_billed_up_to_now_but_has_no_run_time_yet() -> None:
    run = Story("pre-1").wait(60).start("tpu-a", price=2.0, chips=8)
    report = compute(tell(run), now=run.now + 1800)

    (g,) = report.groups
    assert (g.runs, g.active, g.success_rate) == (1, 1, None)
    assert (g.chip_hours, g.cost, g.cost_per_effective_run) == (4.0, 8.0, None)
    assert (g.queue_time, g.run_time) == (one(60.0), NONE)
    assert report.totals.chip_hours == 4.0


def test_pending_is_the_current_wait_of_each_queued_run_by_stage() -> None:
    waiting = [Story(f"pre-{i}", at=T0 + offset) for i, offset in enumerate((0, 200, 300), start=1)]
    started = Story("pre-4").wait(10).start()
    suspended = Story("pre-5").wait(10).suspend()
    retried = Story("post-1", stage="posttrain").start().wait(100).preempt().wait(50).retry()
    report = compute(tell(*waiting, started, suspended, retried), now=T0 + 400)

    pretrain = report.pending["pretrain"]
    assert (pretrain.count, pretrain.p50, pretrain.max) == (3, 200.0, 400.0)
    assert pretrain.p95 == 380.0
    assert pretrain.mean == pytest.approx(700 / 3)
    assert report.pending["posttrain"] == one(250.0), "the wait restarts when the retry is queued"
    assert group(report, "pretrain", "-").active == 4, "pending runs and the suspended one"


def test_a_repeated_queued_event_does_not_restart_the_wait() -> None:
    run = Story("pre-1").wait(60).emit(EventType.QUEUED, stage="pretrain").wait(60)
    report = compute(tell(run), now=run.now)
    assert report.pending["pretrain"] == one(120.0)

    run.start()
    assert compute(tell(run), now=run.now).groups[0].queue_time == one(120.0)


def test_a_suspended_attempt_stops_billing_and_its_resume_queues_again() -> None:
    run = Story("pre-1").wait(60).start("tpu-a", price=1.0).wait(1800).suspend().wait(7200)
    run.resume().wait(30).start("tpu-a", price=1.0).wait(1800).succeed()
    (g,) = compute(tell(run), now=run.now).groups

    assert (g.chip_hours, g.cost, g.recoveries) == (8.0, 8.0, 0)
    assert g.queue_time == Distribution(count=2, p50=45.0, p95=58.5, mean=45.0, max=60.0)
    assert g.run_time.count == 2


def test_cancelled_runs_are_counted_apart_and_do_not_lower_the_success_rate() -> None:
    stories = [
        Story("pre-1", at=T0).start("tpu-a").wait(600).succeed(),
        Story("pre-2", at=T0 + 1).start("tpu-a").wait(600).cancel(),
        Story("pre-3", at=T0 + 2).start("tpu-a").wait(600).fail(),
    ]
    (g,) = compute(tell(*stories), now=T0 + 3600).groups

    assert (g.runs, g.succeeded, g.failed, g.cancelled, g.success_rate) == (3, 1, 1, 1, 0.5)


def test_groups_are_sorted_by_stage_then_pool_and_totals_add_them_up() -> None:
    stories = [
        Story("pre-1", at=T0).start("tpu-b").wait(3600).succeed(),
        Story("pre-2", at=T0 + 5).start("gpu-a", chips=4).wait(3600).succeed(),
        Story("eval-1", stage="eval", at=T0 + 9).start("gpu-a", chips=1).wait(3600).fail(),
        Story("post-1", stage="posttrain", at=T0 + 7),
    ]
    report = compute(tell(*stories), now=T0 + 7200)

    keys = [(g.stage, g.pool) for g in report.groups]
    assert keys == [("eval", "gpu-a"), ("posttrain", "-"), ("pretrain", "gpu-a"), ("pretrain", "tpu-b")]
    assert report.totals.runs == sum(g.runs for g in report.groups) == 4
    assert report.totals.chip_hours == 13.0
    assert report.totals.success_rate == pytest.approx(2 / 3)
    assert list(report.pending) == ["posttrain"], "only stages where a run waits"


def test_the_report_is_json_as_the_cli_and_dashboard_print_it() -> None:
    done = Story("pre-1").wait(60).start().wait(60).succeed()
    waiting = Story("eval-1", stage="eval")
    data = json.loads(json.dumps(compute(tell(done, waiting), now=done.now).as_dict()))

    assert set(data) == {"generated_at", "groups", "totals", "pending"}
    assert data["generated_at"] == done.now
    assert [(g["stage"], g["pool"]) for g in data["groups"]] == [("eval", "-"), ("pretrain", "tpu-a")]
    assert (data["totals"]["stage"], data["totals"]["pool"], data["totals"]["runs"]) == ("*", "*", 2)
    assert data["groups"][0]["queue_time"] == NONE.as_dict()
    assert data["groups"][1]["run_time"]["p50"] == 60.0
    assert data["pending"] == {"eval": {"count": 1, "p50": 120.0, "p95": 120.0, "mean": 120.0, "max": 120.0}}


def test_an_empty_log_gives_empty_totals() -> None:
    report = compute([], now=T0)

    assert (report.groups, report.pending) == ([], {})
    assert (report.totals.runs, report.totals.success_rate, report.totals.cost_per_effective_run) == (
        0,
        None,
        None,
    )


FLEET_EVENTS = [Event(type=EventType.CAPACITY_CHANGED, ts=T0, data={"pool": "tpu-a", "chips_after": 0})]

ODD_LOGS = [
    pytest.param(
        Story("pre-1").wait(60).emit(EventType.SUCCEEDED, attempt=1),
        {"pool": "-", "succeeded": 1, "run_time": 0, "chip_hours": 0.0},
        id="an-end-with-no-start-is-an-outcome-but-no-run-time",
    ),
    pytest.param(
        Story("pre-1").emit("rebalanced", pool="x").start().emit(EventType.HEARTBEAT, attempt=7).wait(3600),
        {"pool": "tpu-a", "active": 1, "chip_hours": 8.0},
        id="unknown-types-and-stray-heartbeats-are-ignored",
    ),
    pytest.param(
        Story("pre-1").start().wait(3600).succeed().wait(60).start("gpu-z").wait(60).fail(),
        {"pool": "tpu-a", "succeeded": 1, "failed": 0, "chip_hours": 8.0, "run_time": 1},
        id="events-after-the-terminal-one-change-nothing",
    ),
    pytest.param(
        Story("pre-1").start().wait(60).emit(EventType.STARTED, attempt=1, pool="gpu-z").wait(3540),
        {"pool": "tpu-a", "active": 1, "chip_hours": 8.0, "queue_time": 1},
        id="a-repeated-start-is-one-attempt",
    ),
    pytest.param(
        Story("pre-1", at=T0 + 100).start().emit(EventType.SUCCEEDED, attempt=1, at=T0),
        {"pool": "tpu-a", "succeeded": 1, "chip_hours": 0.0, "run_time": 1},
        id="an-end-stamped-before-its-start-lasts-zero-seconds",
    ),
    pytest.param(
        Story("pre-1").start().wait(1800).emit(EventType.STARTED, attempt=2, pool="tpu-a", chips=8),
        {"pool": "tpu-a", "active": 1, "chip_hours": 4.0, "run_time": 0},
        id="an-attempt-whose-end-is-missing-is-billed-until-the-next-start",
    ),
    pytest.param(
        Story("pre-1")
        .emit(EventType.PLACED, pool="gpu-p", chips=2, cost_per_chip_hour=5.0)
        .emit(EventType.STARTED, attempt=1)
        .wait(3600),
        {"pool": "gpu-p", "chip_hours": 2.0, "cost": 10.0},
        id="a-start-without-pool-takes-the-placement",
    ),
    pytest.param(
        Story("pre-1").start().wait(3600).cancel(running=False).wait(3600),
        {"pool": "tpu-a", "cancelled": 1, "chip_hours": 8.0, "run_time": 1},
        id="a-cancel-naming-no-attempt-still-stops-the-running-one",
    ),
    pytest.param(
        Story("pre-1").start().emit(EventType.STARTED, attempt=2, pool="tpu-a", chips="eight").wait(3600),
        {"pool": "tpu-a", "active": 1, "chip_hours": 8.0},
        id="a-payload-of-the-wrong-type-falls-back-to-the-submitted-chips",
    ),
]


@pytest.mark.parametrize(("run", "expected"), ODD_LOGS)
def test_odd_logs_yield_numbers_instead_of_errors(run: Story, expected: dict[str, object]) -> None:
    report = compute([*tell(run), *FLEET_EVENTS], now=run.now)

    (g,) = report.groups
    actual = {k: getattr(g, k) for k in expected}
    for name in ("run_time", "queue_time"):
        if name in actual:
            actual[name] = getattr(g, name).count
    assert actual == expected
