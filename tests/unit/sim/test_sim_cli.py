"""`crossrail simulate` and `crossrail plan` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crossrail.cli import app

DATA = Path(__file__).resolve().parents[3] / "data"
GAVEL = ["--workload", f"gavel:{DATA / 'gavel' / 'artifact_evaluation.trace'}",
         "--throughputs", str(DATA / "gavel" / "simulation_throughputs.json")]  # fmt: skip
runner = CliRunner()


def test_simulate_compares_policies_on_the_gavel_trace_in_json() -> None:
    pools = ["--pools", "v100:2:2,k80:4:4", "--time-sliced"]
    args = ["simulate", *pools, *GAVEL, "--policy", "fifo", "--compare", "min_jct_hetero"]
    out = runner.invoke(app, [*args, "--json"])

    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    for key in ("jobs", "avg_jct_s", "p95_jct_s", "makespan_s", "avg_queue_s", "goodput", "utilization", "wall_s"):
        assert key in data
    assert data["jobs"] == 15
    assert data["per_stage"]["experiment"]["queue_p95_s"] is not None
    assert data["compare"][0]["policy"] == "min_jct_hetero"
    assert data["compare"][0]["avg_jct_s"] < data["avg_jct_s"]
    assert data["comparison"][0].startswith("min_jct_hetero lowers average JCT by")


@pytest.mark.slow
def test_simulate_prints_tables_and_writes_a_png(tmp_path: Path) -> None:
    png = tmp_path / "sim.png"
    args = ["simulate", "--pools", "tpu-a:64:8:2.0,h100:32:8:3.0", "--workload", "synthetic:jobs=40,span=6h,seed=2"]
    out = runner.invoke(
        app, [*args, "--chip-mtbf", "5000h", "--ckpt-cost", "30s", "--restore", "2m", "--plot", str(png)]
    )

    assert out.exit_code == 0, out.output
    assert "average JCT" in out.stdout
    assert "per stage (fifo)" in out.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_refuses_bad_input_with_one_message_and_exit_1() -> None:
    bad_pools = runner.invoke(app, ["simulate", "--pools", "v100:7:2", "--workload", "synthetic:jobs=3"])
    assert bad_pools.exit_code == 1
    assert "multiple of chips_per_host" in bad_pools.output
    assert "Traceback" not in bad_pools.output
    both = runner.invoke(app, ["simulate", "--workload", "synthetic:jobs=3"])
    assert both.exit_code == 2
    assert "exactly one of --fleet" in both.output
    policy = runner.invoke(
        app, ["simulate", "--pools", "v100:8", "--workload", "synthetic:jobs=3", "--policy", "fifoo"]
    )
    assert policy.exit_code == 2
    assert "unknown scheduling policy 'fifoo'" in policy.output


@pytest.mark.slow
def test_plan_picks_the_cheapest_mix_that_meets_the_queue_targets() -> None:
    args = [
        "plan", "--workload", "synthetic:jobs=40,span=2d,mix=experiment:1,sizes=8/16,median=1h,seed=1",
        "--pools", "h100:8:8:3.0,tpu-a:8:8:1.5", "--grid", "h100:0/16/32;tpu-a:0/16/32",
        "--target", "experiment=1h", "--json",
    ]  # fmt: skip
    out = runner.invoke(app, args)

    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    rows = data["candidates"]
    assert len(rows) == 8  # 3 x 3 mixes less the empty one
    meeting = [r for r in rows if r["meets"]]
    assert meeting
    assert data["best"] == meeting[0]["fleet"]
    assert all(meeting[0]["cost_per_hour"] <= r["cost_per_hour"] for r in meeting)
    assert any(not r["meets"] and r["cost_per_hour"] < meeting[0]["cost_per_hour"] for r in rows)


def test_plan_what_if_moving_a_stage_to_tpu() -> None:
    args = [
        "plan", "--workload", "synthetic:jobs=30,span=12h,mix=post_training:1/eval:1,sizes=8,median=1h,seed=3",
        "--pools", "h100:8:8:3.0,tpu-a:8:8:1.5", "--grid", "h100:32;tpu-a:32", "--move", "post_training=tpu",
        "--target", "eval=1h", "--json",
    ]  # fmt: skip
    out = runner.invoke(app, args)

    assert out.exit_code == 0, out.output
    labels = [r["fleet"] for r in json.loads(out.stdout)["candidates"]]
    assert sorted(labels) == ["h100:32+tpu-a:32", "h100:32+tpu-a:32 (post_training->tpu)"]


def test_plan_rejects_a_malformed_grid_and_unknown_pools_before_simulating() -> None:
    base = ["plan", "--workload", "synthetic:jobs=3", "--pools", "h100:8:8:3.0", "--target", "eval=1h"]
    malformed = runner.invoke(app, [*base, "--grid", "h100:lots"])
    assert malformed.exit_code == 1
    assert "write name:chips/chips/..." in malformed.output
    unknown = runner.invoke(app, [*base, "--grid", "a100:8"])
    assert unknown.exit_code == 1
    assert "pools a100 are not in --pools" in unknown.output
    stage = runner.invoke(app, [*base[:-2], "--target", "training=1h", "--grid", "h100:8"])
    assert stage.exit_code == 1
    assert "unknown stage 'training'" in stage.output


@pytest.mark.slow
def test_simulate_runs_gavel_gen_on_time_sliced_pools_and_measures_the_window() -> None:
    matrix = str(DATA / "gavel" / "simulation_throughputs.json")
    args = ["simulate", "--pools", "v100:2:1,p100:2:1,k80:2:1", "--time-sliced", "--round", "600",
            "--workload", "gavel-gen:rate=0.3/h,window=5-15,seed=1",
            "--throughputs", matrix, "--policy", "las", "--json"]  # fmt: skip
    out = runner.invoke(app, args)

    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["measured_jobs"] == 10
    assert data["jobs"] >= 15
    assert data["avg_jct_s"] > 0


def test_time_sliced_marks_the_pools_of_pools_only() -> None:
    from crossrail.sim.fleets import pools_fleet

    fleet = pools_fleet("v100:2:1,k80:4:4", time_sliced=True, round_s=600.0)
    assert all(p.time_sliced for p in fleet.pools)
    assert fleet.spec.scheduling.round_s == 600.0
    assert not any(p.time_sliced for p in pools_fleet("v100:2:1").pools)
    out = runner.invoke(app, ["simulate", "--fleet", "fleet.yaml", "--time-sliced", *GAVEL])
    assert out.exit_code == 2
    assert "--time-sliced marks the pools of --pools" in out.output
