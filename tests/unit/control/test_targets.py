"""A run's `spec.target` travels in its `submitted` event, and the workspace's samples tell when it was met."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.client import Client
from crossrail.control.reports.facts import workspace_runs
from crossrail.errors import SpecError
from crossrail.metrics import QualityTarget, table


def test_a_target_met_by_a_reported_eval_loss_is_found_in_the_workspace(client: Client, experiments: Path) -> None:
    sets = ["spec.target.metric=eval_loss", "spec.target.op=<=", "spec.target.value=2.1"]
    run = client.submit(experiments / "eval-smoke.yaml", sets=sets)["run"]["id"]
    store, t0 = client.service.store, client.clock.now()
    submitted = store.events(run=run)[0]
    assert submitted.data["target"] == {"metric": "eval_loss", "op": "<=", "value": 2.1, "via": "self"}
    store.add_metric_samples(
        [
            {"run_id": run, "attempt": 1, "ts": t0 + 60, "step": 10, "name": "eval_loss", "value": 2.5},
            {"run_id": run, "attempt": 1, "ts": t0 + 120, "step": 20, "name": "eval_loss", "value": 2.05},
            {"run_id": run, "attempt": 1, "ts": t0 + 180, "step": 30, "name": "eval_loss", "value": 1.9},
        ]
    )

    (facts,) = workspace_runs(store, now=t0 + 600)

    assert facts.target == QualityTarget("eval_loss", "<=", 2.1)
    assert facts.target_met_ts == t0 + 120
    assert table([facts], by=("stage",)).rows[0].values["time_to_target_seconds"] == 120


def test_a_target_with_an_unknown_comparison_is_refused(client: Client, experiments: Path) -> None:
    sets = ["spec.target.metric=eval_loss", "spec.target.op=~", "spec.target.value=2.1"]
    with pytest.raises(SpecError, match=r"spec\.target\.op"):
        client.submit(experiments / "eval-smoke.yaml", sets=sets)
    assert client.service.store.list_runs() == []


def test_the_framework_and_precision_the_runtime_reports_reach_the_attempts_facts(tmp_path: Path) -> None:
    from crossrail.control.agent.channel import translate
    from crossrail.core import Event, EventType
    from crossrail.metrics import fold_runs
    from crossrail.runtime import Reporter
    from crossrail.runtime.report import read_new
    from crossrail.store import AttemptRecord

    channel = str(tmp_path / "report.jsonl")
    with Reporter(channel, run="gpt-1", attempt=1, clock=lambda: 1000.0) as reporter:
        reporter.runtime("torch", "bf16")
    att = AttemptRecord(
        run_id="gpt-1", number=1, state="running", pool="h100", accelerator="gpu", chip_type="h100", chips=8,
        cost_per_chip_hour=3.0, dataset_uri="gs://d", dataset_version="v1", code_commit=None, config_digest=None,
        image_digest=None, started_at=990.0, ended_at=None, exit_code=None, reason=None,
    )  # fmt: skip
    records, _ = read_new(channel, None)
    reported, _, _, _ = translate(att, records, now=1001.0, checkpoint_dir=str(tmp_path / "ckpt"))
    started = Event(EventType.STARTED, 990.0, "gpt-1", 1, {"pool": "h100", "accelerator": "gpu", "chips": 8})

    (run,) = fold_runs([started, *reported], now=1002.0)

    assert (run.dimension("framework"), run.dimension("precision")) == ("torch", "bf16")
