"""Capacity that arrives, simulated: a spot pool reclaims work at its interruption rate, a flex-start pool holds
an admitted job for its provisioning wait, and a high enough reclaim rate moves the job to on-demand capacity."""

from __future__ import annotations

from typing import Any

import pytest

from crossrail.sim import CheckpointModel, SimJob, Simulation
from crossrail.sim.fleets import build_fleet
from crossrail.spec import Fleet

HOUR = 3600.0
CKPT = CheckpointModel(cost_s=10.0, restore_s=60.0, interval="fixed", interval_s=1800.0)


def spot_fleet(rate: float, **on_demand: Any) -> Fleet:
    """A spot H100 pool at a third of the price, beside an on-demand one; the spot pool reclaims at `rate`."""
    spot = {"name": "h100-spot", "accelerator": "gpu", "chip_type": "h100", "chips": 16, "chips_per_host": 8,
            "cost_per_chip_hour": 1.0, "interruptions_per_chip_hour": rate, "restore": "1m"}  # fmt: skip
    demand = {"name": "h100", "accelerator": "gpu", "chip_type": "h100", "chips": 16, "chips_per_host": 8,
              "cost_per_chip_hour": 3.0, **on_demand}  # fmt: skip
    return build_fleet([spot, demand])


def job(name: str = "sft", hours: float = 4.0) -> SimJob:
    # pretraining: placed for throughput per cost (the default policy), so price and interruptions both count
    return SimJob(name, "pretraining", 8, hours * HOUR, estimate_s=hours * HOUR)


@pytest.mark.parametrize(
    ("rate", "pool"),
    [(0.0, "h100-spot"), (0.01, "h100-spot"), (0.5, "h100")],
    ids=["a spot pool that never reclaims", "a rare reclaim", "a reclaim every quarter hour of the job"],
)
def test_the_spot_pools_preemption_rate_decides_where_the_job_runs(rate: float, pool: str) -> None:
    result = Simulation(spot_fleet(rate), [job()], checkpoint=CKPT, seed=3).run()

    rec = result.runs["sft"]
    assert rec.outcome == "succeeded"
    assert rec.pool == pool


def test_a_spot_pool_reclaims_running_work_at_its_rate_and_the_job_retries_from_its_checkpoint() -> None:
    fleet = spot_fleet(0.25, drained=True)  # nowhere else to go: the job stays on spot however often it is hit
    jobs = [job(f"sft-{i}", hours=4.0) for i in range(2)]
    every = CheckpointModel(cost_s=10.0, restore_s=60.0, interval="fixed", interval_s=600.0)

    result = Simulation(fleet, jobs, checkpoint=every, seed=11).run()

    # 0.25 x 8 chips = 2 reclaims an hour: about 8 in each job's 4 hours (fewer than 4 in all: p < 1e-3)
    reclaims = [result.runs[j.name].interruptions for j in jobs]
    assert sum(reclaims) >= 4
    for j in jobs:
        rec = result.runs[j.name]
        assert rec.outcome == "succeeded"
        assert rec.attempts == rec.interruptions + 1
        assert 0 < rec.lost_s <= rec.interruptions * 600.0  # never more than a checkpoint interval each
    again = Simulation(fleet, jobs, checkpoint=every, seed=11).run()
    assert [again.runs[j.name].interruptions for j in jobs] == reclaims  # the same seed draws the same reclaims


def test_a_flex_start_pool_holds_the_job_for_its_provisioning_wait() -> None:
    flex = {"name": "h100-flex", "accelerator": "gpu", "chip_type": "h100", "chips": 16, "chips_per_host": 8,
            "cost_per_chip_hour": 1.0, "provisioning": "flex-start", "provisioning_wait": "20m"}  # fmt: skip
    fleet = build_fleet([flex])

    rec = Simulation(fleet, [job(hours=1.0)], checkpoint=CheckpointModel(), seed=1).run().runs["sft"]

    assert rec.pool == "h100-flex"
    assert rec.end_s == pytest.approx(HOUR + 20 * 60)
    assert rec.useful_s == pytest.approx(HOUR)
