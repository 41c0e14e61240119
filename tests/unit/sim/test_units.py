"""The allocation unit: pools whose every gang is whole groups of hosts are scheduled in those groups, exactly."""

from __future__ import annotations

import dataclasses

import pytest

from crossrail.sim import CheckpointModel, FailureSpec, SimJob, Simulation, SyntheticSpec, synthetic
from crossrail.sim import simulation as simulation_module
from crossrail.sim.fleets import build_fleet
from crossrail.sim.units import scheduling_fleet, unit_hosts
from crossrail.spec import Fleet

HOUR = 3600.0


def fleet(chips: int = 4096, per_host: int = 8) -> Fleet:
    return build_fleet([{"name": "tpu-a", "accelerator": "tpu", "chip_type": "v5p", "chips": chips,
                         "chips_per_host": per_host}])  # fmt: skip


def big_jobs(seed: int = 4) -> list[SimJob]:
    spec = SyntheticSpec(jobs=16, span_s=86_400, mix={"pretraining": 1.0}, sizes=(256, 512, 1024, 2048),
                         median_s=6 * HOUR, sigma=0.8, seed=seed)  # fmt: skip
    return synthetic(spec)


def test_a_pool_of_whole_host_gangs_is_scheduled_in_their_largest_common_unit() -> None:
    f = fleet()
    jobs = big_jobs()
    (pool,) = f.pools
    k = unit_hosts(pool, jobs)
    assert k > 1
    assert (256 // 8) % k == 0  # every gang is a whole number of units, the pool too
    assert scheduling_fleet(f, jobs).pools[0].chips_per_host == 8 * k
    assert scheduling_fleet(f, jobs).pools[0].chips == pool.chips


@pytest.mark.parametrize(
    "odd",
    [
        SimJob("small", "experiment", 4, work_s=HOUR),
        SimJob("shrinks", "pretraining", 512, work_s=HOUR, elastic=True, min_chips=264),
        SimJob("workers", "pretraining", 512, work_s=HOUR, workers=4),
    ],
    ids=["a-job-smaller-than-a-host", "an-elastic-job", "a-data-parallel-gang"],
)
def test_one_job_that_could_take_any_host_count_keeps_the_pool_in_hosts(odd: SimJob) -> None:
    f = fleet()
    assert unit_hosts(f.pools[0], [*big_jobs(), odd]) == 1
    assert scheduling_fleet(f, [*big_jobs(), odd]) is f


def test_scheduling_in_units_admits_the_same_runs_at_the_same_times(monkeypatch: pytest.MonkeyPatch) -> None:
    failures = FailureSpec(chip_mtbf_s=5_000 * HOUR)
    ckpt = CheckpointModel(cost_s=30.0, restore_s=300.0, detect_s=60.0)

    def simulate() -> Simulation:
        sim = Simulation(fleet(), big_jobs(), failures=failures, checkpoint=ckpt, seed=5, quantum_s=60.0)
        sim.run()
        return sim

    units = simulate()
    monkeypatch.setattr(simulation_module, "scheduling_fleet", lambda f, _jobs: f)
    hosts = simulate()

    assert units.sched.fleet.pools[0].chips_per_host > hosts.sched.fleet.pools[0].chips_per_host == 8
    assert sum(r.interruptions for r in hosts.runs.values()) > 10
    assert [dataclasses.astuple(r) for r in units.runs.values()] == [
        dataclasses.astuple(r) for r in hosts.runs.values()
    ]
