"""Simulated jobs with a quality curve report eval loss as they train, so targets are met in simulation and
time, chip-hours and cost to target come out per pool from the same metrics code as for live runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.errors import SpecError
from crossrail.sim import Simulation
from crossrail.sim.checkpointing import CheckpointModel
from crossrail.sim.facts import run_facts
from crossrail.sim.quality import QualityCurve
from crossrail.sim.workload import SimJob, jobs_from_rows
from crossrail.spec import Fleet, parse_document, parse_fleet

FLEET = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: quality}
spec:
  pools:
    - {name: tpu-a, accelerator: tpu, chip_type: tpu-v5p, chips: 16, chips_per_host: 4, cost_per_chip_hour: 4.0}
    - {name: h100, accelerator: gpu, chip_type: h100, chips: 16, chips_per_host: 8, cost_per_chip_hour: 3.0}
  queues:
    - {name: post-training, stage: post_training, quota: {tpu-a: 16, h100: 16}}
"""
CURVE = {"l_inf": 2.0, "a": 20.0, "alpha": 0.3, "samples_per_s": 100.0, "eval_every": 10_000.0}
TARGET = {"metric": "eval_loss", "op": "<=", "value": 2.5}
SPEED = {"tpu-v5p": 2.0, "h100": 1.0}
PRICE = {"tpu-a": 4.0, "h100": 3.0}
runner = CliRunner()


def job(name: str, accelerator: str, **extra: object) -> dict[str, object]:
    return {"name": name, "stage": "post_training", "chips": 4, "work_s": 3600.0, "accelerators": [accelerator],
            "throughput": SPEED, "quality": CURVE, "target": TARGET, **extra}  # fmt: skip


def fleet_of(text: str) -> Fleet:
    return parse_fleet(parse_document(text, "fleet.yaml"))


def work_to_target() -> float:
    """Work-seconds to the first evaluation at or below the target, from the curve alone."""
    curve = QualityCurve(**CURVE)  # type: ignore[arg-type]
    evals = math.ceil(curve.samples_to(TARGET["value"]) / curve.eval_every)  # type: ignore[arg-type]
    return evals * curve.eval_every / curve.samples_per_s


def test_pools_reach_the_target_at_the_time_chip_hours_and_cost_their_speed_and_price_give(tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text(FLEET)
    rows = [job(f"{acc}-{i}", acc, submit_s=600.0 * i) for acc in ("tpu", "gpu") for i in range(3)]
    (tmp_path / "jobs.json").write_text(json.dumps({"jobs": rows}))
    simulated = runner.invoke(app, ["simulate", "--fleet", str(tmp_path / "fleet.yaml"), "--workload",
                                    str(tmp_path / "jobs.json"), "--json", "--records"])  # fmt: skip
    assert simulated.exit_code == 0, simulated.output
    (tmp_path / "result.json").write_text(simulated.stdout)

    shown = runner.invoke(app, ["metrics", "--select", f"sim:{tmp_path / 'result.json'}", "--to-target", "--json"])

    assert shown.exit_code == 0, shown.output
    rows_by_pool = {row["pool"]: row for row in json.loads(shown.stdout)["rows"]}
    assert set(rows_by_pool) == {"tpu-a", "h100"}
    for pool, chip in (("tpu-a", "tpu-v5p"), ("h100", "h100")):
        seconds = work_to_target() / SPEED[chip]  # nothing queues: each pool has room for every job at once
        row = rows_by_pool[pool]
        assert (row["runs"], row["target_met_rate"]) == (3, 1.0)
        assert row["time_to_target_seconds"] == pytest.approx(seconds)
        assert row["chip_hours_to_target"] == pytest.approx(4 * seconds / 3600)
        assert row["cost_to_target"] == pytest.approx(4 * seconds / 3600 * PRICE[pool])
    assert rows_by_pool["tpu-a"]["cost_to_target"] < rows_by_pool["h100"]["cost_to_target"]  # 2x speed, 4/3 price


def test_evaluations_fall_when_the_work_reaches_them_checkpoint_pauses_included() -> None:
    fleet = fleet_of(FLEET.replace("16, chips_per_host: 8", "4, chips_per_host: 4"))
    jobs = jobs_from_rows([job("gpu-0", "gpu")], "jobs")
    checkpoint = CheckpointModel(cost_s=60.0, interval="fixed", interval_s=500.0)
    sim = Simulation(fleet, jobs, checkpoint=checkpoint, record_events=True)
    result = sim.run()
    assert sim.events is not None

    (run,) = run_facts(sim.events, fleet, result.end_s, sim.executor.samples)

    losses = run.values("eval_loss")
    assert len(losses) == 36  # 3600 work-seconds x 100 samples/s, one evaluation every 10,000 samples
    assert losses == sorted(losses, reverse=True)
    assert losses[-1] == pytest.approx(2.0 + 20.0 * 360_000**-0.3)
    work = work_to_target()
    assert run.target_met_ts == pytest.approx(work + 60.0 * math.floor(work / 500.0))  # one pause per 500 s run
    assert run.cost_to_target == pytest.approx(4 * run.target_met_ts / 3600 * 3.0)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param({"quality": {**CURVE, "alpha": 0}}, "alpha, samples_per_s and eval_every > 0", id="alpha"),
        pytest.param({"quality": {"l_inf": 2.0}}, "missing a, alpha, samples_per_s, eval_every", id="missing"),
        pytest.param({"quality": {**CURVE, "beta": 1}}, "unknown fields beta", id="unknown"),
        pytest.param({"target": {"metric": "eval_loss", "op": "~", "value": 2}}, "target must be", id="target"),
    ],
)
def test_a_bad_quality_curve_or_target_is_named_with_its_job(extra: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        jobs_from_rows([job("ok", "gpu"), job("bad", "gpu", **extra)], "jobs.yaml")

    assert "jobs[1]" in str(caught.value)
    assert message in str(caught.value)


def test_a_job_without_a_curve_reports_nothing() -> None:
    fleet = fleet_of(FLEET)
    sim = Simulation(fleet, [SimJob("plain", "post_training", 4, work_s=600.0)], record_events=True)
    sim.run()

    assert sim.executor.samples == []


def test_work_rolled_back_by_an_interruption_is_evaluated_again_and_the_target_met_on_the_retry() -> None:
    fleet = fleet_of(FLEET.replace("16, chips_per_host: 8", "4, chips_per_host: 4"))
    checkpoint = CheckpointModel(cost_s=60.0, interval="fixed", interval_s=500.0)
    sim = Simulation(fleet, jobs_from_rows([job("gpu-0", "gpu")], "jobs"), checkpoint=checkpoint, record_events=True)
    sim.engine.schedule(1000.0, lambda: sim.executor.interrupt("gpu-0"))  # 940 work-seconds done, 500 committed
    result = sim.run()
    assert sim.events is not None

    (run,) = run_facts(sim.events, fleet, result.end_s, sim.executor.samples)

    by_attempt: dict[int | None, list[int | None]] = {}
    for s in run.samples:
        by_attempt.setdefault(s.attempt, []).append(s.step)
    assert by_attempt[1] == [10_000 * k for k in range(1, 10)]  # up to 900 work-seconds
    assert by_attempt[2] == [10_000 * k for k in range(6, 37)]  # from the checkpoint at 500: 600 onwards again
    again = [s.value for s in run.samples if s.step == 60_000]
    assert len(again) == 2
    assert again[0] == again[1]
    assert run.target_met_ts is not None
    assert run.target_met_ts > run.attempts[1].started_ts  # met on the second attempt, its cost counts both
    assert run.cost_to_target == pytest.approx(
        4 * 3.0 * (run.attempts[0].seconds(run.target_met_ts) + run.target_met_ts - run.attempts[1].started_ts) / 3600
    )
