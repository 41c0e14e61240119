"""Prometheus counts live goodput's parts by team, stage and pool: useful and recomputed chip-seconds."""

from __future__ import annotations

from typing import Any

import pytest

from crossrail.core.events import Event, EventType

pytest.importorskip("prometheus_client", reason="the api extra is not installed: pip install -e '.[api]'")
from crossrail.control.reports.prometheus import FleetCounters


def ev(kind: EventType, ts: float, attempt: int | None = None, **data: Any) -> Event:
    return Event(type=kind, ts=ts, run="sft-1", attempt=attempt, data=data)


def test_a_kill_mid_run_and_a_retry_that_redoes_20_steps_give_useful_and_recomputed_chip_seconds() -> None:
    sub = {"stage": "post_training", "team": "nlp"}
    log = [
        ev(EventType.SUBMITTED, 0, **sub, chips=4),
        ev(EventType.QUEUED, 0, **sub, queue="post"),
        ev(EventType.STARTED, 10, 1, pool="h100", chips=4, cost_per_chip_hour=3.0),
        ev(EventType.HEARTBEAT, 20, 1, step=0),
        ev(EventType.HEARTBEAT, 120, 1, step=100),  # 1 s a step
        ev(EventType.FAILED, 125, 1, pool="h100", cause="signal", final=False),
        ev(EventType.RETRIED, 125, None, cause="signal", next_attempt=2),
        ev(EventType.QUEUED, 125, **sub, queue="post"),
        ev(EventType.STARTED, 185, 2, pool="h100", chips=4, cost_per_chip_hour=3.0),
        ev(EventType.REPORTED, 190, 2, name="resumed", data={"step": 80}),
        ev(EventType.HEARTBEAT, 195, 2, step=80),
        ev(EventType.HEARTBEAT, 315, 2, step=200),
        ev(EventType.SUCCEEDED, 316, 2, pool="h100"),
    ]
    counters = FleetCounters()
    for i, e in enumerate(log, start=1):
        counters.add(Event(e.type, e.ts, e.run, e.attempt, e.data, seq=i))

    key = ("nlp", "post_training", "h100")
    assert counters.chip_s[key] == 4 * (115 + 131)
    assert counters.useful_chip_s[key] == 4 * (100 + 100)  # steps 1..100, then 101..200
    assert counters.recompute_chip_s[key] == 4 * 20  # steps 81..100 again
    families = {f.name: f for f in counters.families(now=400)}
    useful = families["crossrail_useful_chip_seconds"].samples
    assert [(s.name, s.labels, s.value) for s in useful if s.name.endswith("_total")] == [
        ("crossrail_useful_chip_seconds_total", {"team": "nlp", "stage": "post_training", "pool": "h100"}, 800.0)
    ]
