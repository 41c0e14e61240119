"""A resized attempt is billed at each size for the time it held it: the accumulator (reports, verdicts'
pools), `usage` (budgets, `crossrail usage`), the per-run facts and the Prometheus counters alike. Before,
each billed an attempt at the chips it started with, so a growth from 4 to 8 chips halfway through an hour
cost 4 chip-hours, not 6, and a part the backlog controller shrank was billed at its old size."""

from __future__ import annotations

from typing import Any

import pytest

from crossrail.control.reports.prometheus import FleetCounters
from crossrail.core import Event, EventType
from crossrail.metrics.accumulator import MetricsAccumulator
from crossrail.metrics.progress import chip_seconds
from crossrail.metrics.runs import fold_runs
from crossrail.metrics.usage import Usage, usage
from crossrail.sim import CheckpointModel, SimJob, Simulation
from crossrail.sim.fleets import build_fleet

T0, HOUR = 1_767_225_600.0, 3600.0
RUN = "train-1"


def _event(kind: EventType, ts: float, attempt: int | None, **data: Any) -> Event:
    return Event(kind, ts, RUN, attempt, data)


def grown() -> list[Event]:
    """4 chips at $2 for half an hour, then 8 for the other half; steps reported at 600 s (10) and 3,000 s (50)."""
    queued = {"team": "a", "stage": "pretraining", "queue": "pretraining"}
    return [
        _event(EventType.SUBMITTED, T0, None, **queued),
        _event(EventType.QUEUED, T0, None, **queued),
        _event(EventType.STARTED, T0, 1, pool="h100", chips=4, cost_per_chip_hour=2.0),
        _event(EventType.HEARTBEAT, T0 + 600, 1, step=10),
        _event(EventType.RESIZED, T0 + HOUR / 2, 1, part=None, degree_before=4, degree_after=8, chips=8),
        _event(EventType.HEARTBEAT, T0 + 3000, 1, step=50),
        _event(EventType.SUCCEEDED, T0 + HOUR, 1),
    ]


def test_chip_seconds_counts_each_size_for_its_own_time_within_the_window() -> None:
    resizes = [(100.0, 8.0), (200.0, 2.0)]
    assert chip_seconds(4, 0.0, None, 0.0, 300.0) == 1200.0
    assert chip_seconds(4, 0.0, resizes, 0.0, 300.0) == 4 * 100 + 8 * 100 + 2 * 100
    assert chip_seconds(4, 0.0, resizes, 150.0, 250.0) == 8 * 50 + 2 * 50
    assert chip_seconds(4, 0.0, resizes, 0.0, 50.0) == 200.0  # before the first resize
    assert chip_seconds(4, 0.0, resizes, 400.0, 300.0) == 0.0  # an empty window


def test_the_accumulator_bills_the_grown_attempt_at_each_size_and_prices_its_steps_at_the_mean() -> None:
    acc = MetricsAccumulator()
    for e in grown():
        acc.add(e)

    report = acc.report(T0 + 2 * HOUR)

    assert report.totals.chip_hours == pytest.approx(6.0)  # 4 x 0.5 h + 8 x 0.5 h (was 4.0)
    assert report.totals.cost == pytest.approx(12.0)
    # 40 steps from 600 s to 3,000 s at 6 chips on average: 360 chip-s a step, 50 new steps.
    assert report.totals.useful_chip_hours == pytest.approx(360 * 50 / HOUR)
    assert report.totals.run_time.max == pytest.approx(HOUR)  # the attempt's length is unchanged


def test_a_running_grown_attempt_counts_at_its_new_size_up_to_now() -> None:
    acc = MetricsAccumulator()
    for e in grown()[:-1]:
        acc.add(e)

    assert acc.report(T0 + HOUR).totals.chip_hours == pytest.approx(6.0)
    assert acc.report(T0 + HOUR / 4).totals.chip_hours == pytest.approx(1.0)  # before the growth: 4 chips


def test_usage_for_budgets_bills_the_growth() -> None:
    assert usage(grown(), until=T0 + 2 * HOUR) == [Usage("a", "pretraining", "h100", 6.0, 12.0, 1)]
    # A window that starts after the growth sees only the 8-chip half hour.
    assert usage(grown(), until=T0 + 2 * HOUR, since=T0 + HOUR / 2)[0].chip_hours == pytest.approx(4.0)


def test_the_per_run_facts_bill_the_growth_and_keep_it_through_their_record() -> None:
    (run,) = fold_runs(grown(), now=T0 + 2 * HOUR)

    assert run.chip_hours == pytest.approx(6.0)
    assert run.attempts[0].resizes == [(T0 + HOUR / 2, 8.0)]
    assert run.useful_chip_hours == pytest.approx(360 * 50 / HOUR)
    again = type(run).from_dict(run.as_dict())  # `simulate --json --records` writes facts so
    assert again.chip_hours == pytest.approx(6.0)


def test_the_prometheus_counters_bill_the_growth_and_every_part_of_a_pipeline() -> None:
    counters = FleetCounters()
    for e in grown():
        counters.add(e)
    assert counters.chip_s[("a", "pretraining", "h100")] == pytest.approx(6 * HOUR)

    pipe = FleetCounters()
    rl = {"team": "rl", "stage": "reinforcement_learning", "queue": "rl"}
    for e in [
        Event(EventType.QUEUED, T0, "rl-1", None, rl),
        Event(EventType.STARTED, T0, "rl-1", 1, {"pool": "tpu", "chips": 4, "part": "learner"}),
        Event(EventType.STARTED, T0, "rl-1", 2, {"pool": "gpu", "chips": 2, "part": "sampler"}),
        Event(EventType.RESIZED, T0 + HOUR / 2, "rl-1", 2, {"part": "sampler", "chips": 6}),
        Event(EventType.SUCCEEDED, T0 + HOUR, "rl-1", 1, {"part": "learner"}),
    ]:
        pipe.add(e)
    # The learner's 4 chip-hours, the sampler's 2 x 0.5 + 6 x 0.5 (its start no longer closes the learner's).
    assert pipe.chip_s[("rl", "reinforcement_learning", "tpu")] == pytest.approx(4 * HOUR)
    assert pipe.chip_s[("rl", "reinforcement_learning", "gpu")] == pytest.approx(4 * HOUR)
    assert pipe.running_usage(T0 + 2 * HOUR) == {}  # the run's end stopped the sampler too


def test_the_simulator_bills_a_growth_it_makes() -> None:
    """8 chips: `short` (4, 100 s) and `train` (4..8, 400 s) start together; `train` grows to 8 at 100 s and
    ends at 250 s: 4 x 100 + 8 x 150 chip-seconds, beside `short`'s 400."""
    fleet = build_fleet([{"name": "h100", "accelerator": "gpu", "chip_type": "h100", "chips": 8, "chips_per_host": 8}])
    jobs = [
        SimJob("short", "experiment", 4, work_s=100.0),
        SimJob("train", "pretraining", 4, work_s=400.0, max_chips=8),
    ]
    sim = Simulation(fleet, jobs, checkpoint=CheckpointModel(), quantum_s=0.0)
    result = sim.run()

    assert sim.runs["train"].end_s == pytest.approx(250.0)
    by_stage = {g.stage: g for g in result.report.groups}
    assert by_stage["pretraining"].chip_hours == pytest.approx((4 * 100 + 8 * 150) / HOUR)
    assert by_stage["experiment"].chip_hours == pytest.approx(400 / HOUR)
