"""Fleet utilization from capacity over time: used chip-hours since capacity was recorded / chips on offer."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.core import Event, EventType
from crossrail.metrics import compute

from .stories import T0, Story, tell


def capacity(ts: float, pool: str, chips: int) -> Event:
    return Event(EventType.CAPACITY_CHANGED, ts, None, None, {"pool": pool, "chips_after": chips})


def test_utilization_over_a_fleet_change_matches_a_hand_count() -> None:
    # An 8-chip run before any capacity was recorded; then tpu-a and gpu-a offer 8 chips each from T0, and
    # gpu-a grows to 16 at T0 + 30 min. A 4-chip hour on tpu-a from T0; an 8-chip hour on gpu-a from T0 + 30 min.
    early = Story("pre-0", chips=8, at=T0 - 3600).start("gpu-a").wait(1800).succeed()
    on_tpu = Story("pre-1", chips=4, at=T0).start("tpu-a").wait(3600).succeed()
    on_gpu = Story("pre-2", chips=8, at=T0 + 1800).start("gpu-a").wait(3600).succeed()
    fleet = [capacity(T0, "tpu-a", 8), capacity(T0, "gpu-a", 8), capacity(T0 + 1800, "gpu-a", 16)]
    log = sorted([*tell(early, on_tpu, on_gpu), *fleet], key=lambda e: e.ts)

    report = compute(log, now=T0 + 7200)

    # on offer: 16 chips for 30 min, then 24 for 90 min = 8 + 36 = 44 chip-hours; used since T0: 4 + 8 = 12
    assert report.capacity_chip_hours == pytest.approx(44.0)
    assert report.totals.chip_hours == pytest.approx(4 + 4 + 8)  # the early run still costs what it cost
    assert report.utilization == pytest.approx(12 / 44)
    assert report.capacity_since == T0
    assert report.fleet_dict()["capacity_since"] == T0


def test_the_agent_records_the_initial_fleet_once_and_a_hand_edit_as_it_now_is(tmp_path: Path) -> None:
    from crossrail.control.agent.capacity import record_capacity
    from crossrail.spec import load_fleet
    from crossrail.store import Store

    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    path = Path(__file__).parents[3] / "src/crossrail/control/ops/templates/fleet.yaml"
    fleet = load_fleet(path)

    first = record_capacity(store, fleet, now=T0)
    again = record_capacity(store, fleet, now=T0 + 60)
    pools = [p.model_copy(update={"chips": 16}) if p.name == "h100" else p for p in fleet.spec.pools]
    grown = fleet.model_copy(update={"spec": fleet.spec.model_copy(update={"pools": pools})})
    edited = record_capacity(store, grown, now=T0 + 120)

    assert [(e.data["pool"], e.data["chips_before"], e.data["chips_after"]) for e in first] == [
        ("h100", 0, 8),
        ("tpu-v5p", 0, 8),
    ]
    assert again == []
    assert [(e.data["pool"], e.data["chips_before"], e.data["chips_after"], e.data["reason"]) for e in edited] == [
        ("h100", 8.0, 16, "recorded: the fleet file as it now is")
    ]
    assert compute(store.events(), now=T0 + 3720).capacity_chip_hours == pytest.approx(16 * 2 / 60 + 24 * 1)
