"""Verdicts and policy hypotheses on real training runs of the bigram workload, driven by the agent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.client import Client
from crossrail.control.reports.facts import workspace_runs
from crossrail.metrics import table
from crossrail.metrics.hypotheses import CANNOT_TELL, CONTRADICTED, SUPPORTED, check_stage

from .test_agent import SHORT, drive

# Post-training runs pinned to each accelerator, aiming at a training loss every run reaches on the way.
RUNS = 3
TARGET = ["spec.target.metric=loss", "spec.target.op=<=", "spec.target.value=5.4"]


@pytest.fixture
def client(checkout: Path) -> Iterator[Client]:
    with Client(cwd=checkout) as c:
        yield c


@pytest.mark.slow
def test_policy_check_and_compare_judge_real_runs_on_both_accelerators(
    client: Client, experiments: Path, checkout: Path
) -> None:
    ids = []
    for kind in ("tpu", "gpu"):
        sets = [
            *SHORT,
            *TARGET,
            "spec.stage=post_training",
            "spec.resources.chips=4",
            f"spec.accelerators.allow=[{kind}]",
        ]
        ids += [client.submit(experiments / "pretrain-small.yaml", sets=sets)["run"]["id"] for _ in range(RUNS)]
    store = client.service.store
    drive(client, lambda: all(store.get_run(r).state == "succeeded" for r in ids), timeout_s=240)

    runs = workspace_runs(store, client.clock.now())
    by_accelerator = table(runs, by=("accelerator", "framework", "precision"), metrics=["target_met_rate"])
    assert [(r.key["accelerator"], r.key["framework"], r.key["precision"], r.runs) for r in by_accelerator.rows] == [
        ("gpu", "numpy", "fp32", RUNS),
        ("tpu", "numpy", "fp32", RUNS),
    ]
    assert all(r.values["target_met_rate"] == 1.0 for r in by_accelerator.rows)
    wanted = client.policy.for_stage("post_training")
    finding = check_stage("post_training", wanted.preferred_accelerator, wanted.metrics, runs)
    assert (finding.preferred, finding.other, finding.n_preferred, finding.n_other) == ("gpu", "tpu", RUNS, RUNS)
    assert finding.status in (SUPPORTED, CONTRADICTED, CANNOT_TELL)
    measured = {c.metric for c in finding.changes}
    assert {"research_cycle_seconds", "cost_to_target", "steps_per_hour"} <= measured

    out = CliRunner().invoke(
        app,
        [
            "compare",
            "--before",
            "accelerator=tpu",
            "--after",
            "accelerator=gpu",
            "--json",
            "--home",
            str(checkout / ".crossrail"),
        ],
    )
    assert out.exit_code == 0, out.output
    verdict = json.loads(out.stdout)
    assert (verdict["research_cycle"]["n_before"], verdict["research_cycle"]["n_after"]) == (RUNS, RUNS)
    assert verdict["verdict"].startswith(("research cycle", "no significant change"))
    # one experiment on both pools: nothing confounds it, and local pools time only crossrail's software path
    assert (verdict["refused"], verdict["confounds"], verdict["software_path_only"]) == (False, [], True)
    assert verdict["verdict"].endswith(
        "software path only: virtual local pools time crossrail's path, not the accelerators"
    )
    checked = CliRunner().invoke(app, ["policy", "check", "--json", "--home", str(checkout / ".crossrail")])
    assert checked.exit_code == 0, checked.output
    post = next(f for f in json.loads(checked.stdout)["findings"] if f["stage"] == "post_training")
    assert (post["status"], post["sentence"]) == (finding.status, finding.sentence)
    to_target = CliRunner().invoke(app, ["metrics", "--to-target", "--json", "--home", str(checkout / ".crossrail")])
    assert to_target.exit_code == 0, to_target.output
    rows = json.loads(to_target.stdout)["rows"]
    assert {(r["pool"], r["framework"], r["precision"], r["runs"]) for r in rows} == {
        ("tpu-v5p", "numpy", "fp32", RUNS),
        ("h100", "numpy", "fp32", RUNS),
    }
    assert all(r["cost_to_target"] > 0 and r["chip_hours_to_target"] > 0 for r in rows)
    assert all(r["time_to_target_seconds"] > 0 for r in rows)
