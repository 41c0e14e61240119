"""A run's `spec.target` travels in its `submitted` event, and the workspace's samples tell when it was met."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.client import Client
from crossrail.control.facts import workspace_runs
from crossrail.errors import SpecError
from crossrail.metrics import Target, table


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

    assert facts.target == Target("eval_loss", "<=", 2.1)
    assert facts.target_met_ts == t0 + 120
    assert table([facts], by=("stage",)).rows[0].values["time_to_target_seconds"] == 120


def test_a_target_with_an_unknown_comparison_is_refused(client: Client, experiments: Path) -> None:
    sets = ["spec.target.metric=eval_loss", "spec.target.op=~", "spec.target.value=2.1"]
    with pytest.raises(SpecError, match=r"spec\.target\.op"):
        client.submit(experiments / "eval-smoke.yaml", sets=sets)
    assert client.service.store.list_runs() == []
