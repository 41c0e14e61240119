"""Verdicts and policy hypotheses judged on simulated fleets whose difference is known by construction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.metrics import RunFacts, Selection, compare
from crossrail.metrics.hypotheses import CANNOT_TELL, CONTRADICTED, SUPPORTED, check
from crossrail.sim import FailureSpec, Simulation, SyntheticSpec, synthetic
from crossrail.sim.facts import run_facts
from crossrail.sim.fleets import pools_fleet
from crossrail.spec import Fleet, default_policy, parse_document, parse_fleet

# 110 post-training runs of about an hour on 4 chips over a day: 80% busy on 20 chips, 62% on 26 (30% more).
BUSY = SyntheticSpec(jobs=110, span_s=86_400, mix={"post_training": 1}, sizes=(4,), median_s=3600, sigma=0.2, seed=1)
FAULTS = FailureSpec(chip_mtbf_s=300 * 3600)  # a few interruptions, so the seed matters
runner = CliRunner()


def simulate(fleet: Fleet, spec: SyntheticSpec = BUSY, seed: int = 1) -> list[RunFacts]:
    sim = Simulation(fleet, synthetic(spec), failures=FAULTS, seed=seed, record_events=True)
    result = sim.run()
    assert sim.events is not None
    return run_facts(sim.events, fleet, result.end_s)


def gpus(chips: int) -> Fleet:
    return pools_fleet(f"gpu:{chips}:2:2.0")


def test_thirty_percent_more_gpu_chips_shortens_the_research_cycle_with_an_interval_excluding_zero() -> None:
    verdict = compare(simulate(gpus(20)), simulate(gpus(26)))

    cycle = verdict.cycle
    assert cycle.ci is not None
    assert cycle.ci[1] < 0  # shorter, and the whole interval says so
    assert verdict.sentence.startswith("research cycle shorter by ")
    assert "(95% CI " in verdict.sentence
    queue = next(c for c in verdict.explain if c.metric == "experiment_queue_seconds")
    assert queue.better is True  # the explanation: queue time fell
    assert "2,000 resamples, seed 0" in verdict.method


def test_the_same_fleet_under_another_seed_is_no_significant_change() -> None:
    verdict = compare(simulate(gpus(20), seed=1), simulate(gpus(20), seed=2))

    assert verdict.sentence.startswith("no significant change in research cycle")
    assert not verdict.cycle.significant


def test_too_few_runs_say_how_many_would_be_needed() -> None:
    first_hours = Selection(until=3 * 3600)  # runs submitted in the first three hours: about a dozen a side
    before, after = first_hours.pick(simulate(gpus(20))), first_hours.pick(simulate(gpus(26)))

    verdict = compare(before, after)

    n, needed = verdict.cycle.n, verdict.cycle.needed
    assert needed is not None
    assert needed > n
    assert f"(n too small: {n} runs; need about {needed})" in verdict.sentence


def mixed_fleet(gpu_speed: float) -> Fleet:
    text = f"""
apiVersion: crossrail/v1
kind: Fleet
metadata: {{name: mixed}}
spec:
  pools:
    - {{name: tpu-a, accelerator: tpu, chip_type: tpu-v5p, chips: 16, chips_per_host: 4, cost_per_chip_hour: 2.0,
        relative_speed: 1.0, backend: local}}
    - {{name: gpu-a, accelerator: gpu, chip_type: h100, chips: 16, chips_per_host: 4, cost_per_chip_hour: 2.0,
        relative_speed: {gpu_speed}, backend: local}}
  queues:
    - {{name: post-training, stage: post_training, quota: {{tpu-a: 16, gpu-a: 16}}}}
"""
    return parse_fleet(parse_document(text, "fleet.yaml"))


SPREAD = SyntheticSpec(jobs=60, span_s=86_400, mix={"post_training": 1}, sizes=(4,), median_s=7200, sigma=0.2, seed=1)


@pytest.mark.parametrize(
    ("gpu_speed", "status", "says"),
    [
        pytest.param(0.6, CONTRADICTED, "consider preferring tpu", id="gpus-slower-than-the-policy-assumes"),
        pytest.param(1.6, SUPPORTED, "the runs agree", id="gpus-faster-as-the-policy-assumes"),
    ],
)
def test_policy_check_judges_the_article_policy_on_a_mixed_fleet(gpu_speed: float, status: str, says: str) -> None:
    runs = simulate(mixed_fleet(gpu_speed), SPREAD)

    findings = {f.stage: f for f in check(default_policy(), runs)}

    post = findings["post_training"]  # the article's policy prefers gpu for post-training
    assert post.status == status
    assert says in post.sentence
    assert post.n_preferred > 2
    assert post.n_other > 2
    assert findings["pretraining"].status == CANNOT_TELL  # no pretraining ran at all


def test_policy_check_cannot_tell_on_a_handful_of_runs_and_says_how_many_would() -> None:
    # Eight whole-pool runs submitted together: they take turns on both pools, four or so on each.
    few = SyntheticSpec(jobs=8, span_s=60, mix={"post_training": 1}, sizes=(16,), median_s=7200, sigma=0.4, seed=3)
    findings = {f.stage: f for f in check(default_policy(), simulate(mixed_fleet(0.95), few))}

    post = findings["post_training"]
    assert post.status == CANNOT_TELL
    assert post.runs_needed is not None
    assert f"about {post.runs_needed} runs on each would tell" in post.sentence


def write_sim(tmp_path: Path, name: str, pools: str, workload: str, *extra: str) -> Path:
    out = runner.invoke(app, ["simulate", "--pools", pools, "--workload", workload, "--json", "--records", *extra])
    assert out.exit_code == 0, out.output
    path = tmp_path / name
    path.write_text(out.stdout)
    return path


@pytest.mark.slow
def test_compare_reads_simulation_results_from_the_command_line(tmp_path: Path) -> None:
    workload = "synthetic:jobs=110,span=1d,mix=post_training:1,sizes=4,median=1h,sigma=0.2,seed=1"
    before = write_sim(tmp_path, "before.json", "gpu:20:2:2.0", workload, "--chip-mtbf", "300h")
    after = write_sim(tmp_path, "after.json", "gpu:26:2:2.0", workload, "--chip-mtbf", "300h")

    out = runner.invoke(app, ["compare", "--before", f"sim:{before}", "--after", f"sim:{after}", "--json"])

    assert out.exit_code == 0, out.output
    data: dict[str, Any] = json.loads(out.stdout)
    assert (data["apiVersion"], data["kind"]) == ("crossrail/v1", "Verdict")
    assert data["verdict"].startswith("research cycle shorter by")
    assert data["research_cycle"]["n_before"] == 110
    assert data["research_cycle"]["ci95"][1] < 0
    text = runner.invoke(app, ["compare", "--before", f"sim:{before},until=10800", "--after", f"sim:{after}"])
    assert text.exit_code == 0, text.output
    assert "method: bootstrap over runs, 2,000 resamples, seed 0" in " ".join(text.output.split())


def test_compare_refuses_a_result_without_records_and_a_bad_filter(tmp_path: Path) -> None:
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"avg_jct_s": 1.0}))

    out = runner.invoke(app, ["compare", "--before", f"sim:{bare}", "--after", f"sim:{bare}"])
    assert out.exit_code != 0
    assert "write it with `simulate --json --records`" in out.output
    bad = runner.invoke(app, ["compare", "--before", f"sim:{bare},pol=x", "--after", f"sim:{bare}"])
    assert "unknown key 'pol'" in bad.output
    records = runner.invoke(app, ["simulate", "--pools", "gpu:8", "--workload", "synthetic:jobs=2", "--records"])
    assert records.exit_code != 0
    assert "give --json too" in records.output


def test_metrics_groups_simulated_runs_by_chip_type_and_window_from_the_command_line(tmp_path: Path) -> None:
    workload = "synthetic:jobs=30,span=1d,mix=post_training:1,sizes=4,median=1h,sigma=0.2,seed=1"
    result = write_sim(tmp_path, "r.json", "tpu-a:8:4:1.0,h100:8:4:2.0", workload)

    by_chip = runner.invoke(app, ["metrics", "--select", f"sim:{result}", "--by", "chip_type", "--json"])
    assert by_chip.exit_code == 0, by_chip.output
    rows = json.loads(by_chip.stdout)["rows"]
    assert {r["chip_type"] for r in rows} == {"tpu-a", "h100"}
    assert sum(r["runs"] for r in rows) == 30
    assert all(r["success_rate"] == 1.0 for r in rows)
    halves = runner.invoke(app, ["metrics", "--select", f"sim:{result}", "--by", "window", "--window", "12h", "--json"])
    assert [r["window"] for r in json.loads(halves.stdout)["rows"]][:2] == [
        "1970-01-01T00:00:00Z",
        "1970-01-01T12:00:00Z",
    ]
    bad = runner.invoke(app, ["metrics", "--select", f"sim:{result}", "--metric", "tokens"])
    assert bad.exit_code == 2  # a usage error
    assert "unknown metric 'tokens'" in bad.output


def test_workspace_selections_over_a_server_are_refused_with_what_to_do_instead() -> None:
    out = runner.invoke(
        app, ["compare", "--before", "stage=eval", "--after", "stage=eval", "--server", "http://127.0.0.1:9"]
    )

    assert out.exit_code == 2
    said = " ".join(out.output.split())
    assert "(or run them on sim:FILE results) works on a workspace of this machine, not through a server" in said
    assert "run it beside the workspace, without --server" in said


def test_policy_check_prints_each_stage_and_its_evidence_from_a_simulation_result(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "apiVersion: crossrail/v1\nkind: Fleet\nmetadata: {name: mixed}\nspec:\n  pools:\n"
        "    - {name: tpu-a, accelerator: tpu, chip_type: tpu-v5p, chips: 16, chips_per_host: 4,"
        " cost_per_chip_hour: 2.0, relative_speed: 1.0, backend: local}\n"
        "    - {name: gpu-a, accelerator: gpu, chip_type: h100, chips: 16, chips_per_host: 4,"
        " cost_per_chip_hour: 2.0, relative_speed: 0.6, backend: local}\n"
        "  queues:\n    - {name: post-training, stage: post_training, quota: {tpu-a: 16, gpu-a: 16}}\n"
    )
    workload = "synthetic:jobs=60,span=1d,mix=post_training:1,sizes=4,median=2h,sigma=0.2,seed=1"
    out = runner.invoke(app, ["simulate", "--fleet", str(fleet), "--workload", workload, "--json", "--records"])
    assert out.exit_code == 0, out.output
    result = tmp_path / "result.json"
    result.write_text(out.stdout)

    checked = runner.invoke(app, ["policy", "check", "--runs", f"sim:{result}"])

    assert checked.exit_code == 0, checked.output
    text = " ".join(checked.output.split())
    assert "post_training prefers gpu: contradicted" in text
    assert "consider preferring tpu" in text
    assert "reinforcement_learning prefers mixed: no hypothesis" in text
    assert "research_cycle_seconds" in text  # the evidence table
