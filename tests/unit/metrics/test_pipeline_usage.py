"""A pipeline's parts run at once, each an attempt of its own: the metrics and the usage behind budgets bill
every part for its own time, not only the part that started last.

The story: a learner (4 chips) and a sampler (2 chips) start together and run an hour; the sampler is lost
half-way and its replacement runs the rest; the learner succeeds, which ends the run, and the sampler is
stopped with it (the agent and the simulator record no event for a part stopped because its run ended).
"""

from __future__ import annotations

from typing import Any

import pytest

from crossrail.core import Event, EventType
from crossrail.metrics.accumulator import MetricsAccumulator
from crossrail.metrics.runs import fold_runs
from crossrail.metrics.usage import Usage, usage

T0, HOUR = 1_767_225_600.0, 3600.0
RUN = "rl-1"


def _event(kind: EventType, ts: float, attempt: int | None, **data: Any) -> Event:
    return Event(kind, ts, RUN, attempt, data)


def pipeline() -> list[Event]:
    queued = {"team": "rl", "stage": "reinforcement_learning", "queue": "rl"}
    return [
        _event(EventType.SUBMITTED, T0, None, **queued),
        _event(EventType.QUEUED, T0, None, **queued),
        _event(EventType.STARTED, T0, 1, pool="tpu", chips=4, cost_per_chip_hour=2.0, part="learner"),
        _event(EventType.STARTED, T0, 2, pool="gpu", chips=2, cost_per_chip_hour=3.0, part="sampler"),
        _event(EventType.FAILED, T0 + HOUR / 2, 2, part="sampler", final=False),
        _event(EventType.RETRIED, T0 + HOUR / 2, None, part="sampler", next_attempt=3),
        _event(EventType.STARTED, T0 + HOUR / 2, 3, pool="gpu", chips=2, cost_per_chip_hour=3.0, part="sampler"),
        _event(EventType.SUCCEEDED, T0 + HOUR, 1, part="learner"),
    ]


def test_the_metrics_bill_every_part_for_its_own_time() -> None:
    acc = MetricsAccumulator()
    for e in pipeline():
        acc.add(e)

    report = acc.report(T0 + 2 * HOUR)

    by_pool = {g.pool: g for g in report.groups}
    assert by_pool["tpu"].chip_hours == pytest.approx(4.0)  # the learner's hour
    assert by_pool["tpu"].cost == pytest.approx(8.0)
    assert by_pool["gpu"].chip_hours == pytest.approx(2.0)  # two samplers, half an hour each
    assert by_pool["gpu"].cost == pytest.approx(6.0)
    assert report.totals.chip_hours == pytest.approx(6.0)
    assert (report.totals.runs, report.totals.succeeded, report.totals.active) == (1, 1, 0)


def test_usage_for_budgets_bills_every_part_and_stops_the_parts_with_their_run() -> None:
    rows = usage(pipeline(), until=T0 + 2 * HOUR)

    assert rows == [
        Usage("rl", "reinforcement_learning", "gpu", chip_hours=2.0, cost=6.0, attempts=2),
        Usage("rl", "reinforcement_learning", "tpu", chip_hours=4.0, cost=8.0, attempts=1),
    ]


def test_a_plain_runs_lost_end_is_still_billed_up_to_its_next_start() -> None:
    events = [
        Event(EventType.QUEUED, T0, "r-1", None, {"team": "a", "stage": "eval"}),
        Event(EventType.STARTED, T0, "r-1", 1, {"pool": "p", "chips": 1}),
        Event(EventType.STARTED, T0 + HOUR, "r-1", 2, {"pool": "p", "chips": 1}),  # attempt 1's end was lost
        Event(EventType.SUCCEEDED, T0 + 2 * HOUR, "r-1", 2, {}),
    ]
    acc = MetricsAccumulator()
    for e in events:
        acc.add(e)

    assert usage(events, until=T0 + 3 * HOUR)[0].chip_hours == pytest.approx(2.0)
    assert acc.report(T0 + 3 * HOUR).totals.chip_hours == pytest.approx(2.0)


def test_a_parts_success_that_leaves_its_pipeline_going_does_not_end_the_run() -> None:
    events = pipeline()
    learner_end = events.pop()
    events.append(_event(EventType.SUCCEEDED, T0 + 0.75 * HOUR, 3, part="sampler", final=False))
    acc = MetricsAccumulator()
    for e in events:
        acc.add(e)
    midway = acc.report(T0 + 0.9 * HOUR).totals
    acc.add(learner_end)
    done = acc.report(T0 + 2 * HOUR).totals

    assert (midway.active, midway.succeeded) == (1, 0)
    assert (done.active, done.succeeded) == (0, 1)
    assert done.chip_hours == pytest.approx(4.0 + 1.0 + 0.5)  # learner 1 h x 4; samplers 0.5 h and 0.25 h x 2


def test_the_per_run_facts_end_each_part_when_it_ends_and_the_rest_with_the_run() -> None:
    (run,) = fold_runs(pipeline(), now=T0 + 2 * HOUR)

    ends = {(a.number, a.part): (a.ended_ts, a.end) for a in run.attempts}
    assert ends == {
        (1, "learner"): (T0 + HOUR, "succeeded"),
        (2, "sampler"): (T0 + HOUR / 2, "failed"),
        (3, "sampler"): (T0 + HOUR, None),  # stopped with its run: no end of its own
    }
    assert (run.outcome, run.ended_ts) == ("succeeded", T0 + HOUR)
