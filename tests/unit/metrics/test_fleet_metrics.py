"""JCT, goodput, makespan and utilization: the numbers the simulator reports, folded from events."""

from __future__ import annotations

import pytest

from crossrail.core import Event, EventType
from crossrail.metrics import MetricsAccumulator, compute

T0 = 1_000.0


def log() -> list[Event]:
    """Pool p (16 chips) from T0; run a (8 chips) queued 100 s, ran 1 h, was interrupted (1,800 s kept),
    retried for 30 min and succeeded; run b (eval) queued and never started."""
    e = [
        Event(EventType.CAPACITY_CHANGED, T0, None, None, {"pool": "p", "chips_before": 0, "chips_after": 16}),
        Event(EventType.SUBMITTED, T0, "a", None, {"stage": "pretrain", "chips": 8}),
        Event(EventType.QUEUED, T0, "a", None, {"stage": "pretrain"}),
        Event(EventType.STARTED, T0 + 100, "a", 1, {"pool": "p", "chips": 8}),
        Event(EventType.FAILED, T0 + 3700, "a", 1, {"pool": "p", "final": False, "useful_chip_s": 8 * 1800.0}),
        Event(EventType.QUEUED, T0 + 3700, "a", None, {"stage": "pretrain"}),
        Event(EventType.STARTED, T0 + 3700, "a", 2, {"pool": "p", "chips": 8}),
        Event(EventType.SUCCEEDED, T0 + 5500, "a", 2, {"pool": "p", "useful_chip_s": 8 * 1800.0}),
        Event(EventType.SUBMITTED, T0 + 10, "b", None, {"stage": "eval", "chips": 4}),
    ]
    return [Event(x.type, x.ts, x.run, x.attempt, x.data, seq=i) for i, x in enumerate(e, start=1)]


def test_jct_goodput_makespan_and_utilization_come_from_the_events() -> None:
    report = compute(log(), now=T0 + 5500)
    totals = report.totals

    assert totals.jct.count == 1
    assert totals.jct.p50 == 5500.0
    assert totals.useful_chip_hours == pytest.approx(8.0)
    assert totals.chip_hours == pytest.approx(8 * 5400 / 3600)
    assert totals.goodput == pytest.approx(3600 / 5400)
    assert report.makespan_s == 5500.0
    assert report.capacity_chip_hours == pytest.approx(16 * 5500 / 3600)
    assert report.utilization == pytest.approx(8 * 5400 / (16 * 5500))
    assert report.as_dict()["fleet"]["utilization"] == report.utilization


def test_a_log_without_capacity_or_useful_work_reports_none_rather_than_guessing() -> None:
    events = [e for e in log() if e.type is not EventType.CAPACITY_CHANGED]
    for i, e in enumerate(events):
        events[i] = Event(
            e.type, e.ts, e.run, e.attempt, {k: v for k, v in e.data.items() if k != "useful_chip_s"}, e.seq
        )
    report = compute(events, now=T0 + 5500)

    assert (report.utilization, report.capacity_chip_hours, report.totals.goodput) == (None, None, None)
    assert "fleet" not in report.as_dict()


def test_stage_totals_merge_every_pool_of_a_stage() -> None:
    acc = MetricsAccumulator()
    for event in log():
        acc.add(event)
    stages = {g.stage: g for g in acc.stage_totals(T0 + 5500)}

    assert set(stages) == {"pretrain", "eval"}
    assert stages["pretrain"].pool == "*"
    assert stages["pretrain"].recoveries == 1
    assert stages["eval"].runs == 1
    assert stages["eval"].jct.count == 0
