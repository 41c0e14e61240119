"""Placement before each simulated cycle (sim/placing.py): the simulator places waiting jobs by the plan the
agent makes (scheduling.reconcile), also where the cycle alone would pick another pool."""

from __future__ import annotations

from typing import Any

import pytest

from crossrail.sim.simulation import Simulation
from crossrail.sim.workload import SimJob
from crossrail.spec import Fleet, PlacementPolicy, default_policy


def two_tpu_pools() -> Fleet:
    pools = [
        {"name": name, "accelerator": "tpu", "chip_type": "tpu-v5p", "chips": 8, "chips_per_host": 4,
         "cost_per_chip_hour": cost}
        for name, cost in (("tpu-a", 4.0), ("tpu-b", 4.2))
    ]  # fmt: skip
    quota = {"tpu-a": 8, "tpu-b": 8}
    queues = [{"name": team, "stage": "experiment", "team": team, "quota": quota} for team in ("a", "b")]
    spec: dict[str, Any] = {"pools": pools, "queues": queues, "scheduling": {"policy": "fifo"}}
    return Fleet.model_validate(
        {"apiVersion": "crossrail/v1", "kind": "Fleet", "metadata": {"name": "two"}, "spec": spec}
    )


def job(name: str, chips: int, team: str, submit_s: float = 0.0, priority: str = "normal") -> SimJob:
    return SimJob(name, "experiment", chips, work_s=100.0, submit_s=submit_s, team=team, priority=priority,
                  accelerators=("tpu",), prefer="tpu")  # fmt: skip


# Team a ran first, so the cycle (by fair share) admits team b's y before a's x, and y takes the cheaper pool;
# the plan places in priority order (x, high, first), as the agent's placement does: x on tpu-a, y on tpu-b.
JOBS = [job("warm", 8, "a"), job("x", 8, "a", 200.0, "high"), job("y", 4, "b", 200.0)]


def starts(placement: PlacementPolicy | None) -> list[tuple[float, str | None, str]]:
    sim = Simulation(
        two_tpu_pools(), JOBS, policy="fifo", record_events=True, quantum_s=0.0, fallback_wait_s=0.0,
        placement=placement,
    )  # fmt: skip
    sim.run()
    assert sim.events is not None
    return sorted((e.ts, e.run, e.data["pool"]) for e in sim.events if str(e.type) == "started")


@pytest.mark.parametrize(
    ("placement", "expected"),
    [
        pytest.param(None, {"x": "tpu-b", "y": "tpu-a"}, id="the-cycle-alone-gives-the-cheaper-pool-to-the-first-head"),
        pytest.param(default_policy(), {"x": "tpu-a", "y": "tpu-b"}, id="placed-as-the-agent-places"),
    ],
)
def test_the_simulator_places_waiting_jobs_by_the_agents_plan(
    placement: PlacementPolicy | None, expected: dict[str, str]
) -> None:
    got = starts(placement)
    assert got[0] == (0.0, "warm", "tpu-a")
    assert {run: pool for ts, run, pool in got if ts == 200.0} == expected
