"""`crossrail export mlflow` read back by a real MLflow client (sqlite tracking store); a second export adds
nothing twice."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from crossrail.client import Client

from .conftest import CROSSRAIL, PENDING

pytestmark = [
    pytest.mark.slow,
    # MLflow 3.17's tracking store asks SQLAlchemy 2.1 for `noload`, which warns; that is MLflow's to change.
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated:DeprecationWarning"),
]
pytest.importorskip("mlflow", reason="the mlflow extra is not installed: pip install -e '.[mlflow]'")


def export(root: Path, uri: str, *args: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_STORE_URL")}
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    proc = subprocess.run(
        [CROSSRAIL, "export", "mlflow", "--tracking-uri", uri, *args, "--json"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def test_export_reads_back_with_params_metrics_tags_and_dataset_digests_and_a_second_export_adds_nothing(
    demo_workspace: Path, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = export(demo_workspace, uri)
    assert first["kind"] == "MlflowExport"
    assert all(r["created"] for r in first["runs"])
    ml = MlflowClient(tracking_uri=uri)
    exp = ml.get_experiment_by_name("crossrail")
    runs = ml.search_runs([exp.experiment_id], max_results=100)
    demo = ["pretrain-small-1", "posttrain-042-1", "eval-smoke-1", "sweep-lr-1-1", "sweep-lr-2-1", f"{PENDING}-1"]
    cycle = [f"cycle-ab-{i}" for i in range(1, 7)]  # the demo's live verdict: one experiment 3 times on each pool
    assert sorted(r.info.run_name for r in runs) == sorted(demo + cycle)

    with Client(demo_workspace / ".crossrail") as c:
        shown = c.show("pretrain-small-1")
        losses = c.service.store.metric_samples("pretrain-small-1", "loss")
    lineage = shown["lineage"]
    (pre,) = [r for r in runs if r.info.run_name == "pretrain-small-1"]
    assert pre.info.status == "FINISHED"
    assert pre.data.params["stage"] == "pretraining"
    assert pre.data.params["chips"] == "4"
    assert pre.data.params["dataset_version"] == lineage["dataset_version"]
    assert pre.data.tags["crossrail.uid"] == shown["run"]["uid"]
    assert pre.data.tags["mlflow.source.git.commit"] == lineage["code_commit"]
    assert pre.data.tags["crossrail.attempt.1.hardware"] == "tpu-v5p: 4 x tpu-v5p (tpu)"
    assert pre.data.tags["crossrail.attempt.1.state"] == "failed: killed by signal 9"
    assert pre.data.tags["crossrail.attempt.2.hardware"] == "h100: 4 x h100 (gpu)"
    for k in shown["checkpoints"]:
        assert pre.data.tags[f"crossrail.checkpoint.{k['step']}"].startswith(k["uri"])
    history = ml.get_metric_history(pre.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(s["step"], s["value"]) for s in losses]
    (dataset,) = pre.inputs.dataset_inputs
    assert dataset.dataset.name == lineage["dataset_uri"]
    assert dataset.dataset.digest == lineage["dataset_version"].removeprefix("sha256:")[:36]
    assert json.loads(dataset.dataset.profile)["version"] == lineage["dataset_version"]
    (post,) = [r for r in runs if r.info.run_name == "posttrain-042-1"]
    assert post.data.params["parent_run"] == "pretrain-small-1"
    (queued,) = [r for r in runs if r.info.run_name == f"{PENDING}-1"]
    assert queued.info.status == "RUNNING"  # not ended: MLflow's status for a run still going

    again = export(demo_workspace, uri, "--run", "pretrain-small-1", "--run", "posttrain-042-1")
    assert [(r["run"], r["created"], r["metrics_logged"]) for r in again["runs"]] == [
        ("pretrain-small-1", False, 0),
        ("posttrain-042-1", False, 0),
    ]
    assert len(ml.search_runs([exp.experiment_id], max_results=100)) == len(runs)
    assert len(ml.get_metric_history(pre.info.run_id, "loss")) == len(losses)
    assert len(ml.get_run(pre.info.run_id).inputs.dataset_inputs) == 1


def test_export_of_an_unknown_run_names_it_and_creates_nothing(demo_workspace: Path, tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    proc = subprocess.run(
        [CROSSRAIL, "export", "mlflow", "--tracking-uri", f"sqlite:///{db}", "--run", "no-such-run"],
        cwd=demo_workspace,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert "no-such-run" in proc.stderr
    assert not db.exists()
