"""Random valid run stories: snapshots taken while feeding events equal compute() on the same prefix,
and the totals equal what the stories themselves say happened."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossrail.core import Event
from crossrail.metrics import GroupMetrics, MetricsAccumulator, Report, compute

from .stories import T0, Story, tell

STAGES = ("pretrain", "posttrain", "eval")
POOLS = ("tpu-a", "gpu-b", "gpu-c")
PRICES = (0.5, 1.25, 2.0, 3.0)
RETRYABLE = ("failed-retryably", "preempted")
LAST_ENDS = ("succeeded", "failed", "cancelled", "running", *RETRYABLE)
END_STEPS: dict[str, Callable[[Story], Story]] = {
    "succeeded": Story.succeed,
    "failed": Story.fail,
    "cancelled": lambda s: s.cancel(running=True),
    "failed-retryably": lambda s: s.fail(final=False),
    "preempted": Story.preempt,
}
seconds = st.integers(min_value=0, max_value=20_000)


@dataclass(frozen=True)
class AttemptPlan:
    queue_s: int
    pool: str
    chips: int
    price: float
    run_s: int
    end: str
    retry_s: int


@dataclass(frozen=True)
class RunPlan:
    stage: str
    offset_s: int
    attempts: list[AttemptPlan]
    cancel_while_queued: bool  # for a run that never started, or whose last attempt is being retried
    cancel_after_s: int


@st.composite
def run_plans(draw: st.DrawFn) -> RunPlan:
    count = draw(st.integers(min_value=0, max_value=3))
    ends = [draw(st.sampled_from(RETRYABLE)) for _ in range(count - 1)]
    ends += [draw(st.sampled_from(LAST_ENDS))] if count else []
    attempts = [
        AttemptPlan(
            queue_s=draw(seconds),
            pool=draw(st.sampled_from(POOLS)),
            chips=draw(st.integers(min_value=1, max_value=64)),
            price=draw(st.sampled_from(PRICES)),
            run_s=draw(seconds),
            end=end,
            retry_s=draw(seconds),
        )
        for end in ends
    ]
    return RunPlan(
        stage=draw(st.sampled_from(STAGES)),
        offset_s=draw(seconds),
        attempts=attempts,
        cancel_while_queued=draw(st.booleans()),
        cancel_after_s=draw(seconds),
    )


@dataclass
class Truth:
    """What the plans say happened, tallied independently of crossrail.metrics."""

    outcomes: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("succeeded", "failed", "cancelled", "active"), 0)
    )
    attempts: int = 0
    finished_attempts: int = 0
    recoveries: int = 0
    waiting: int = 0
    # chips, price, start and end (None while running) of every attempt
    usage: list[tuple[int, float, float, float | None]] = field(default_factory=list)

    def chip_hours_and_cost(self, now: float) -> tuple[float, float]:
        hours = [(chips * ((now if end is None else end) - start) / 3600, p) for chips, p, start, end in self.usage]
        return math.fsum(h for h, _ in hours), math.fsum(h * p for h, p in hours)


def tell_plan(n: int, plan: RunPlan, truth: Truth) -> Story:
    story = Story(f"run-{n}", stage=plan.stage, at=T0 + plan.offset_s)
    outcome = "active"
    for attempt in plan.attempts:
        story.wait(attempt.queue_s).start(attempt.pool, price=attempt.price, chips=attempt.chips)
        truth.attempts += 1
        if attempt.end == "running":
            truth.usage.append((attempt.chips, attempt.price, story.now, None))
            break
        start = story.now
        story.wait(attempt.run_s)
        truth.usage.append((attempt.chips, attempt.price, start, story.now))
        truth.finished_attempts += 1
        END_STEPS[attempt.end](story)
        if attempt.end in RETRYABLE:
            story.wait(attempt.retry_s).retry()
        else:
            outcome = attempt.end
    truth.recoveries += max(0, len(plan.attempts) - 1)
    queued = not plan.attempts or plan.attempts[-1].end in RETRYABLE
    if queued and plan.cancel_while_queued:
        story.wait(plan.cancel_after_s).cancel()
        outcome = "cancelled"
    truth.waiting += queued and not plan.cancel_while_queued
    truth.outcomes[outcome] += 1
    return story


def told(plans: list[RunPlan]) -> tuple[list[Event], Truth]:
    truth = Truth()
    stories = [tell_plan(n, plan, truth) for n, plan in enumerate(plans, start=1)]
    return tell(*stories), truth


@settings(deadline=None)
@given(st.lists(run_plans(), max_size=12), st.lists(st.integers(min_value=0, max_value=400), max_size=4))
@pytest.mark.slow
def test_snapshots_while_feeding_equal_compute_on_the_same_prefix(plans: list[RunPlan], cuts: list[int]) -> None:
    events, _ = told(plans)
    accumulator = MetricsAccumulator()
    fed = 0
    for cut in sorted(min(c, len(events)) for c in cuts):
        for event in events[fed:cut]:
            accumulator.add(event)
        fed = cut
        now = (events[cut - 1].ts if cut else T0) + 60
        assert accumulator.report(now) == compute(events[:cut], now)
    for event in events[fed:]:
        accumulator.add(event)
    now = (events[-1].ts if events else T0) + 3600
    assert accumulator.report(now) == compute(events, now)
    report, stages = accumulator.snapshot(now)
    assert (report, stages) == (compute(events, now), accumulator.stage_totals(now))
    assert_stages_gather_their_groups(report, stages)


@settings(deadline=None)
@given(st.lists(run_plans(), max_size=12), st.integers(min_value=0, max_value=10_000))
@pytest.mark.slow
def test_totals_equal_what_the_stories_say_happened(plans: list[RunPlan], extra_s: int) -> None:
    events, truth = told(plans)
    now = (events[-1].ts if events else T0) + extra_s
    report = compute(events, now)
    totals = report.totals

    assert totals.runs == len(plans)
    assert (totals.succeeded, totals.failed, totals.cancelled, totals.active) == tuple(truth.outcomes.values())
    assert (totals.queue_time.count, totals.run_time.count) == (truth.attempts, truth.finished_attempts)
    assert totals.recoveries == truth.recoveries == totals.recovery_time.count
    assert sum(d.count for d in report.pending.values()) == truth.waiting
    chip_hours, cost = truth.chip_hours_and_cost(now)
    assert (totals.chip_hours, totals.cost) == (pytest.approx(chip_hours), pytest.approx(cost))
    assert_groups_add_up(report)


def assert_groups_add_up(report: Report) -> None:
    totals = report.totals
    for g in report.groups:
        assert g.runs == g.succeeded + g.failed + g.cancelled + g.active
    assert sum(g.runs for g in report.groups) == totals.runs
    assert sum(g.queue_time.count for g in report.groups) == totals.queue_time.count
    assert math.fsum(g.cost for g in report.groups) == pytest.approx(totals.cost)
    assert [(g.stage, g.pool) for g in report.groups] == sorted((g.stage, g.pool) for g in report.groups)


def assert_stages_gather_their_groups(report: Report, stages: list[GroupMetrics]) -> None:
    """Each stage's figures come from its own groups' values, whatever the groups share with other records."""
    assert [s.stage for s in stages] == sorted({g.stage for g in report.groups})
    for total in stages:
        groups = [g for g in report.groups if g.stage == total.stage]
        for pick in (lambda m: m.queue_time, lambda m: m.run_time, lambda m: m.recovery_time, lambda m: m.jct):
            parts = [pick(g) for g in groups if pick(g).count]
            assert pick(total).count == sum(p.count for p in parts)
            assert pick(total).max == max((p.max for p in parts), default=None)
            if parts:
                sums = math.fsum(p.count * p.mean for p in parts)
                assert pick(total).mean == pytest.approx(sums / pick(total).count)
