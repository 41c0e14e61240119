"""crossrail/v1 Experiment specs as simulated workload items: modelled field by field, or refused by path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from crossrail.core import EventType
from crossrail.errors import PlacementError, SpecError
from crossrail.sim import CheckpointModel, FailureSpec, SimResult, Simulation
from crossrail.sim.fleets import build_fleet
from crossrail.sim.workload import jobs_from_rows, parse_workload
from crossrail.spec import Fleet

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
HOUR = 3600.0


def experiment(name: str, chips: int = 256, **spec: Any) -> dict[str, Any]:
    """A valid Experiment document; `spec` entries replace or add top-level spec fields."""
    return {
        "apiVersion": "crossrail/v1",
        "kind": "Experiment",
        "metadata": {"name": name, "team": "research"},
        "spec": {
            "stage": "pretraining",
            "image": "trainer@sha256:" + "a" * 64,
            "command": ["python", "train.py"],
            "dataset": {"uri": "gs://data/v1/"},
            "checkpoint": {"dir": f"gs://ckpt/{name}"},
            "resources": {"chips": chips, "duration": "72h"},
            "retries": {"max": 1000, "backoff": {"initial": 0, "max": 0}},
            **spec,
        },
    }


def gpu_fleet(chips: int = 256) -> Fleet:
    return build_fleet([{"name": "h100", "accelerator": "gpu", "chip_type": "h100", "chips": chips,
                         "chips_per_host": 8}])  # fmt: skip


def run(rows: list[dict[str, Any]], *, seed: int = 2, record: bool = False) -> tuple[Simulation, SimResult]:
    failures = FailureSpec(host_mtbf_s=100 * HOUR, repair_s=4 * HOUR)
    ckpt = CheckpointModel(cost_s=30.0, restore_s=300.0, shrink_s=60.0)
    sim = Simulation(gpu_fleet(), jobs_from_rows(rows, "test"), failures=failures, checkpoint=ckpt, seed=seed,
                     record_events=record)  # fmt: skip
    return sim, sim.run()


def test_an_elastic_experiment_shrinks_through_failures_where_a_rigid_one_restarts() -> None:
    rigid, rigid_result = run([{"experiment": experiment("train")}])
    elastic_spec = experiment("train", resources={"chips": 256, "min_chips": 128, "duration": "72h"})
    elastic, elastic_result = run([{"experiment": elastic_spec}])

    r, e = rigid.runs["train"], elastic.runs["train"]
    assert r.interruptions > 5
    assert e.interruptions > 5
    assert r.attempts == r.interruptions + 1  # every failure restarts it from its last checkpoint
    assert r.lost_s > 0
    assert e.attempts == 1  # it kept running, shrunk, through every failure
    assert e.lost_s == 0.0
    assert e.paused_s == pytest.approx(e.interruptions * 60.0)
    assert (elastic_result.goodput or 0) > (rigid_result.goodput or 0) > 0


def test_fields_the_simulator_cannot_model_are_refused_by_path() -> None:
    endless = experiment("rl", 256, parts={"sampler": {"chips": 128}, "reward": {"chips": 128}})
    unknown = experiment("later")
    unknown["spec"]["resources"]["spot"] = True  # a field no schema of this version knows

    with pytest.raises(SpecError) as raised:
        jobs_from_rows([{"experiment": endless}, {"experiment": unknown}], "w.yaml")

    text = str(raised.value)
    assert "the pipeline rl has no part whose end ends it" in text  # no learner: it would never end
    assert "spot" in text


def pipeline(name: str = "rl", **parts: dict[str, Any]) -> dict[str, Any]:
    parts = parts or {"learner": {"chips": 4, "prefer": "gpu"}, "sampler": {"chips": 4, "prefer": "tpu"}}
    doc = experiment(name, sum(p["chips"] for p in parts.values()), parts=parts)
    doc["spec"]["stage"] = "reinforcement_learning"
    return doc


def two_pools() -> Fleet:
    return build_fleet([
        {"name": "tpu", "accelerator": "tpu", "chip_type": "tpu-v5p", "chips": 8, "chips_per_host": 4},
        {"name": "gpu", "accelerator": "gpu", "chip_type": "h100", "chips": 8, "chips_per_host": 8},
    ])  # fmt: skip


def test_a_pipelines_parts_start_together_and_the_others_are_cancelled_when_its_learner_ends() -> None:
    rows = [{"experiment": pipeline(), "work_s": {"learner": 600}}]
    sim = Simulation(two_pools(), jobs_from_rows(rows, "w.yaml"), record_events=True)
    result = sim.run()

    assert sim.events is not None
    started = {
        e.data["part"]: (e.ts, e.data["pool"], e.data["chips"]) for e in sim.events if e.type is EventType.STARTED
    }
    assert started == {"learner": (0.0, "gpu", 4), "sampler": (0.0, "tpu", 4)}  # together, each where it prefers
    ends = [(e.type, e.data["part"], e.ts) for e in sim.events if e.type in (EventType.SUCCEEDED, EventType.FAILED)]
    assert ends == [(EventType.SUCCEEDED, "learner", 600.0)]
    assert [(t, part, pool) for t, _, _, part, pool in sim.cancelled] == [(600.0, "sampler", "tpu")]
    rec = result.runs["rl"]
    assert (rec.outcome, rec.end_s, rec.first_start_s) == ("succeeded", 600.0, 0.0)
    assert not sim.executor.live  # nothing left holding chips
    learner = next(e for e in sim.events if e.type is EventType.SUCCEEDED)
    assert learner.data["useful_chip_s"] == 4 * 600.0  # its kept work on its chips, as a run's end carries


def test_a_lost_part_is_retried_alone_while_the_other_keeps_running() -> None:
    rows = [{"experiment": pipeline(), "work_s": {"learner": 600}}]
    sim = Simulation(two_pools(), jobs_from_rows(rows, "w.yaml"), record_events=True, checkpoint=CheckpointModel())
    sim.engine.schedule(100.0, lambda: sim.executor.interrupt("rl/sampler"))
    sim.run()

    assert sim.events is not None
    by_part = [(e.type, e.data.get("part"), e.attempt) for e in sim.events if e.run == "rl" and e.type in (
        EventType.STARTED, EventType.FAILED, EventType.RETRIED, EventType.SUCCEEDED)]  # fmt: skip
    assert by_part == [  # attempts numbered per run, as the agent numbers a pipeline's
        (EventType.STARTED, "learner", 1),
        (EventType.STARTED, "sampler", 2),
        (EventType.FAILED, "sampler", 2),
        (EventType.RETRIED, "sampler", None),
        (EventType.STARTED, "sampler", 3),
        (EventType.SUCCEEDED, "learner", 1),
    ]
    again = [e for e in sim.events if e.type is EventType.STARTED][-1]
    assert (again.ts, again.data["pool"]) == (100.0, "gpu")  # at once, away from the pool it was lost on
    failed = next(e for e in sim.events if e.type is EventType.FAILED)
    assert (failed.data["pool"], failed.ts) == ("tpu", 100.0)
    assert (sim.runs["rl"].outcome, sim.runs["rl"].end_s) == ("succeeded", 600.0)  # the learner never stopped


def test_a_pipeline_larger_than_any_pool_runs_when_its_parts_fit() -> None:
    parts = {"learner": {"chips": 4}, "reward": {"chips": 1}, "sampler": {"chips": 4}}
    rows = [{"experiment": pipeline(**parts), "work_s": 60}]  # 9 chips; pools of 8
    sim = Simulation(two_pools(), jobs_from_rows(rows, "w.yaml"))
    assert sim.run().runs["rl"].outcome == "succeeded"
    assert len(sim.cancelled) == 2  # the reward and the sampler, when the learner ended


def test_a_work_mapping_naming_an_unknown_part_is_one_problem() -> None:
    with pytest.raises(SpecError) as raised:
        jobs_from_rows([{"experiment": pipeline(), "work_s": {"learner": 60, "critic": 5}}], "w.yaml")
    assert [p.message for p in raised.value.problems] == ["work_s names parts it does not have: critic"]


def test_a_pipeline_part_no_pool_can_run_is_refused_before_the_start() -> None:
    rows = [{"experiment": pipeline(learner={"chips": 16}, sampler={"chips": 4})}]
    with pytest.raises(PlacementError, match="rl/learner"):
        Simulation(two_pools(), jobs_from_rows(rows, "w.yaml"))


def test_an_experiment_without_a_duration_or_work_is_refused_and_an_item_may_give_its_work() -> None:
    spec = experiment("e")
    del spec["spec"]["resources"]["duration"]
    with pytest.raises(SpecError, match="the experiment's work is unknown"):
        jobs_from_rows([spec], "w.yaml")
    (job,) = jobs_from_rows([{"experiment": spec, "work_s": 600, "submit_s": 30}], "w.yaml")
    assert (job.work_s, job.submit_s, job.estimate_s) == (600.0, 30.0, None)


def test_the_example_experiment_file_is_a_workload_of_one(tmp_path: Path) -> None:
    (job,) = parse_workload(str(EXAMPLES / "posttrain-042.yaml"))
    assert (job.name, job.stage, job.chips, job.team) == ("posttrain-042", "post_training", 8, "alignment")
    assert (job.elastic, job.min_chips, job.prefer, job.accelerators) == (True, 4, "gpu", ("gpu", "tpu"))
    assert job.work_s == 6 * HOUR
    assert job.checkpoint_every_s == 600.0
    assert job.retries is not None
    assert job.retries.max == 3
    listing = tmp_path / "jobs.yaml"
    listing.write_text(yaml.safe_dump({"jobs": [{"experiment": str(EXAMPLES / "posttrain-042.yaml"), "submit_s": 5}]}))
    (listed,) = parse_workload(str(listing))
    assert listed.submit_s == 5.0
    assert listed.name == "posttrain-042"


def test_back_off_delays_the_next_attempt_as_the_agent_would() -> None:
    eager, _ = run([{"experiment": experiment("train")}], record=True)
    patient = experiment("train", retries={"max": 1000, "backoff": {"initial": "30m", "factor": 1, "max": "30m"}})
    waits, _ = run([{"experiment": patient}], record=True)

    def gaps(sim: Simulation) -> list[float]:
        assert sim.events is not None
        ends = [e.ts for e in sim.events if e.type is EventType.FAILED]
        starts = [e.ts for e in sim.events if e.type is EventType.STARTED][1:]
        return [s - e for e, s in zip(ends, starts, strict=False)]

    assert gaps(eager)
    assert max(gaps(eager)) < 30 * 60
    assert gaps(waits)
    assert min(gaps(waits)) >= 30 * 60


def test_an_experiment_with_no_retries_fails_at_its_first_interruption() -> None:
    sim, _ = run([{"experiment": experiment("once", retries={"max": 0})}])
    rec = sim.runs["once"]
    assert (rec.outcome, rec.attempts, rec.interruptions) == ("failed", 1, 1)


def test_a_child_waits_for_its_parent_and_a_fixed_checkpoint_interval_bounds_lost_work() -> None:
    parent = experiment("pretrain", resources={"chips": 128, "duration": "10h"})
    child = experiment("posttrain", 128, stage="post_training", parent={"run": "pretrain"},
                       checkpoint={"dir": "gs://ckpt/c", "every": "20m"})  # fmt: skip
    sim, _ = run([{"experiment": child}, {"experiment": parent}])

    p, c = sim.runs["pretrain"], sim.runs["posttrain"]
    assert p.end_s is not None
    assert c.first_start_s is not None
    assert c.first_start_s >= p.end_s  # half the fleet was free, yet it waited for its parent
    assert c.interruptions > 0
    assert 0 < c.lost_s <= c.interruptions * 20 * 60  # never more than one interval lost per failure
