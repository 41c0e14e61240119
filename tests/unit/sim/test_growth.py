"""Elastic runs grow in the simulator as live: the cycle's `grown` proposals are taken, the attempt runs its
remaining work at the larger size's rate, and a `resized` event says so."""

from __future__ import annotations

from typing import Any

import pytest

from crossrail.core import EventType
from crossrail.sim import CheckpointModel, FailureSpec, SimJob, Simulation
from crossrail.sim.fleets import build_fleet
from crossrail.sim.workload import jobs_from_rows
from crossrail.spec import Fleet

HOUR = 3600.0
FREE_CHECKPOINTS = CheckpointModel()  # no checkpoint cost, no restore: JCTs are work over rate alone


def one_pool(chips: int = 8, per_host: int = 8) -> Fleet:
    return build_fleet([{"name": "h100", "accelerator": "gpu", "chip_type": "h100", "chips": chips,
                         "chips_per_host": per_host}])  # fmt: skip


def simulate(jobs: list[SimJob], fleet: Fleet | None = None, **kw: Any) -> Simulation:
    sim = Simulation(fleet or one_pool(), jobs, checkpoint=kw.pop("checkpoint", FREE_CHECKPOINTS),
                     record_events=True, quantum_s=0.0, **kw)  # fmt: skip
    sim.run()
    return sim


def jct(sim: Simulation, name: str) -> float:
    rec = sim.runs[name]
    assert rec.outcome == "succeeded"
    assert rec.end_s is not None
    return rec.end_s - rec.submit_s


def resized(sim: Simulation, run: str) -> list[dict[str, Any]]:
    assert sim.events is not None
    return [
        dict(e.data, at=e.ts, attempt=e.attempt) for e in sim.events if e.type is EventType.RESIZED and e.run == run
    ]


def test_an_elastic_job_on_an_idle_pool_takes_its_max_chips_and_finishes_in_proportion() -> None:
    rigid = simulate([SimJob("train", "pretraining", 4, work_s=400.0)])
    elastic = simulate([SimJob("train", "pretraining", 4, work_s=400.0, max_chips=8)])

    assert jct(rigid, "train") == pytest.approx(400.0)
    assert jct(elastic, "train") == pytest.approx(200.0)  # admitted at 8 chips: twice the rate
    assert resized(elastic, "train") == []  # admitted large: nothing grew


def test_an_elastic_job_grows_when_its_neighbour_ends_and_its_remaining_work_goes_at_the_larger_rate() -> None:
    """8 chips: `short` (4, 100 s) and `train` (4..8, 400 s) start together; at 100 s `short` ends, the cycle
    proposes 4 -> 8 for `train`, and its remaining 300 s of work at 4 chips take 150 s at 8: it ends at 250 s."""
    jobs = [SimJob("short", "experiment", 4, work_s=100.0), SimJob("train", "pretraining", 4, work_s=400.0)]
    rigid = simulate(jobs)
    elastic = simulate([jobs[0], SimJob("train", "pretraining", 4, work_s=400.0, max_chips=8)])

    assert jct(rigid, "train") == pytest.approx(400.0)
    assert jct(elastic, "train") == pytest.approx(250.0)
    [grown] = resized(elastic, "train")
    assert grown["at"] == pytest.approx(100.0)
    assert grown["attempt"] == 1
    assert (grown["degree_before"], grown["degree_after"], grown["chips"], grown["part"]) == (4, 8, 8, None)
    assert grown["reason"].endswith("no run waiting for them")
    rec = elastic.runs["train"]
    assert rec.attempts == 1
    assert rec.allocated_chip_s == pytest.approx(4 * 100.0 + 8 * 150.0)  # each size for its own time
    assert elastic.sched.cache.allocs == {}


def test_an_elastic_job_does_not_grow_on_a_pool_another_run_waits_for() -> None:
    """`short` ends at 100 s but `next` waits for those chips: it is admitted, and `train` keeps its 4."""
    jobs = [
        SimJob("short", "experiment", 4, work_s=100.0),
        SimJob("train", "pretraining", 4, work_s=400.0, max_chips=8),
        SimJob("next", "experiment", 4, work_s=1000.0, submit_s=1.0),
    ]
    sim = simulate(jobs)

    assert jct(sim, "train") == pytest.approx(400.0)
    assert resized(sim, "train") == []
    assert sim.runs["next"].first_start_s == pytest.approx(100.0)


def test_growth_is_in_whole_hosts_where_the_pool_allocates_whole_hosts() -> None:
    """Hosts of 4: 4..16 on 16 chips beside a 12-chip run; that run's end frees three hosts and the job takes
    them all (16 chips), its remaining work going 4x as fast."""
    jobs = [SimJob("batch", "experiment", 12, work_s=100.0), SimJob("train", "pretraining", 4, work_s=400.0,
                                                                       max_chips=16)]  # fmt: skip
    sim = simulate(jobs, one_pool(16, per_host=4))

    [grown] = resized(sim, "train")
    assert (grown["degree_before"], grown["chips"]) == (4, 16)
    assert jct(sim, "train") == pytest.approx(100.0 + 300.0 / 4)


def test_a_grown_elastic_job_still_shrinks_through_failures_and_keeps_its_work() -> None:
    """Elastic both ways (min 8, chips 16, max 32) on 32 chips beside a run that ends: it grows to 32, then
    shrinks through failures rather than restarting."""
    fleet = one_pool(32, per_host=8)
    failures = FailureSpec(host_mtbf_s=20 * HOUR, repair_s=2 * HOUR)
    ckpt = CheckpointModel(cost_s=30.0, restore_s=300.0, shrink_s=60.0)
    jobs = [SimJob("short", "experiment", 16, work_s=HOUR),
            SimJob("train", "pretraining", 16, work_s=48 * HOUR, elastic=True, min_chips=8, max_chips=32)]  # fmt: skip
    sim = simulate(jobs, fleet, failures=failures, checkpoint=ckpt, seed=3)

    rec = sim.runs["train"]
    grown = resized(sim, "train")
    assert [g["chips"] for g in grown][:1] == [32]
    assert rec.interruptions > 0
    assert rec.attempts == 1  # every failure shrank it
    assert rec.lost_s == 0.0
    assert rec.paused_s == pytest.approx(rec.interruptions * 60.0)
    assert rec.outcome == "succeeded"


def test_an_experiment_with_max_chips_above_chips_is_simulated_and_grows() -> None:
    def experiment(name: str, resources: dict[str, Any], stage: str = "pretraining") -> dict[str, Any]:
        return {"apiVersion": "crossrail/v1", "kind": "Experiment", "metadata": {"name": name, "team": "research"},
                "spec": {"stage": stage, "image": "trainer@sha256:" + "a" * 64, "command": ["python", "train.py"],
                         "dataset": {"uri": "gs://data/v1/"}, "checkpoint": {"dir": f"gs://ckpt/{name}"},
                         "resources": resources}}  # fmt: skip

    rows = [
        {"experiment": experiment("short", {"chips": 4, "duration": "100s"}, "experiment")},
        {"experiment": experiment("train", {"chips": 4, "max_chips": 8, "duration": "400s"})},
    ]
    jobs = jobs_from_rows(rows, "w.yaml")
    assert [j.max_chips for j in jobs] == [None, 8]
    sim = simulate(jobs)

    assert jct(sim, "train") == pytest.approx(250.0)
    assert [g["chips"] for g in resized(sim, "train")] == [8]


def test_a_job_row_with_max_chips_below_chips_is_refused() -> None:
    from crossrail.errors import SpecError

    with pytest.raises(SpecError, match="max_chips must be at least chips"):
        jobs_from_rows([{"name": "a", "chips": 8, "work_s": 10, "max_chips": 4}], "w.yaml")
