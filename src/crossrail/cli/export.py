"""`crossrail export mlflow`: the workspace's runs into an MLflow tracking server (docs/dashboard.md#mlflow).

Each crossrail run becomes one MLflow run, found again by its uid (tag `crossrail.uid`), so exporting again
updates it: new metric samples are added, tags and the status are set to what they are now, and nothing is
logged twice. MLflow is the extra `mlflow`, imported only here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from crossrail.cli.common import Home, Json, guard
from crossrail.cli.output import emit
from crossrail.core.api import api_object
from crossrail.errors import UsageError

if TYPE_CHECKING:
    from crossrail.client import Client

DEFAULT_EXPERIMENT = "crossrail"
UID_TAG = "crossrail.uid"
STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "cancelled": "KILLED"}
DIGEST_CHARS = 36  # MLflow's dataset digest column holds 36 characters; the full version is in the profile

export_app = typer.Typer(help="Export runs to other tools.", no_args_is_help=True)


@export_app.command("mlflow")
def mlflow_command(
    tracking_uri: Annotated[
        str, typer.Option("--tracking-uri", help="MLflow tracking URI: http://host:5000, sqlite:///mlflow.db, ...")
    ],
    run: Annotated[
        list[str] | None, typer.Option("--run", help="Export this run (repeatable; default: every run).")
    ] = None,
    experiment: Annotated[str, typer.Option("--experiment", help="MLflow experiment name.")] = DEFAULT_EXPERIMENT,
    home: Home = None,
    as_json: Json = False,
) -> None:
    """Runs with params, per-step metrics, dataset inputs, git commit, each attempt's hardware and checkpoints."""

    def go() -> None:
        from crossrail.cli.common import local_client

        with local_client(home) as c:
            emit(export_mlflow(c, tracking_uri, run or [], experiment=experiment), as_json, _render)

    guard(go)


def _render(out: dict[str, Any]) -> None:
    from crossrail.cli.output import console

    for r in out["runs"]:
        verb = "created" if r["created"] else "updated"
        console.print(f"{r['run']}: {verb} MLflow run {r['mlflow_run_id']} (+{r['metrics_logged']} metric samples)")
    console.print(f"{len(out['runs'])} runs exported to {out['tracking_uri']} (experiment {out['experiment']})")


def _mlflow() -> Any:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise UsageError(
            f"crossrail export mlflow needs MLflow ({exc}); install the extra: pip install 'crossrail[mlflow]'"
        ) from None
    return MlflowClient


def export_mlflow(
    c: Client, tracking_uri: str, runs: Sequence[str] = (), *, experiment: str = DEFAULT_EXPERIMENT
) -> dict[str, Any]:
    """Export `runs` (default: every run of the workspace) to MLflow; returns what was created or updated."""
    ids = [c.service.get(ref).id for ref in runs] or [r.id for r in c.service.store.list_runs(newest_first=False)]
    client = _mlflow()
    from mlflow.exceptions import MlflowException

    try:
        ml = client(tracking_uri=tracking_uri)
        found = ml.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found is not None else ml.create_experiment(experiment)
        exported = [_export_run(c, ml, experiment_id, rid) for rid in ids]
    except (MlflowException, OSError) as exc:
        raise UsageError(_refused(tracking_uri, exc)) from None
    return api_object(
        "MlflowExport", tracking_uri=tracking_uri, experiment=experiment, experiment_id=experiment_id, runs=exported
    )


def _refused(tracking_uri: str, exc: Exception) -> str:
    """MLflow's refusal in a line, with the way out for the file store MLflow no longer takes by default."""
    text = getattr(exc, "message", None) or str(exc)
    first = text.strip().split("\n")[0].split(". ")[0][:300]
    fix = "check the URI and that the server answers"
    if tracking_uri.startswith("file:") or "://" not in tracking_uri:
        fix = "MLflow's file store is retired: pass --tracking-uri sqlite:///mlflow.db or an http:// server"
    return f"MLflow refused --tracking-uri {tracking_uri}: {first}; {fix}"


def _export_run(c: Client, ml: Any, experiment_id: str, run_id: str) -> dict[str, Any]:
    from mlflow.entities import Metric, Param, RunTag

    shown = c.show(run_id)
    run, lineage = shown["run"], shown["lineage"]
    existing = ml.search_runs([experiment_id], filter_string=f"tags.`{UID_TAG}` = '{run['uid']}'", max_results=1)
    created = not existing
    if created:
        start_ms = int(run["created_at"] * 1000)
        mlrun = ml.create_run(experiment_id, start_time=start_ms, tags={UID_TAG: run["uid"]}, run_name=run["id"])
    else:
        mlrun = existing[0]
    mlflow_id = mlrun.info.run_id
    params = [Param(k, str(v)) for k, v in _params(shown).items()]
    if created:
        ml.log_batch(mlflow_id, params=params)
    tags = [RunTag(k, str(v)) for k, v in _tags(shown).items()]
    metrics = _new_metrics(ml, mlflow_id, c.service.store.metric_samples(run["id"]), Metric)
    for start in range(0, max(len(metrics), 1), 1000):  # MLflow takes at most 1000 metrics per batch
        ml.log_batch(mlflow_id, metrics=metrics[start : start + 1000], tags=tags if start == 0 else [])
    _log_dataset(ml, mlflow_id, lineage)
    if run["state"] in STATUS:
        end = max((a.get("ended_at") or 0 for a in shown["attempts"]), default=0) or run["updated_at"]
        ml.set_terminated(mlflow_id, status=STATUS[run["state"]], end_time=int(end * 1000))
    return {"run": run["id"], "uid": run["uid"], "mlflow_run_id": mlflow_id, "created": created,
            "metrics_logged": len(metrics)}  # fmt: skip


def _params(shown: dict[str, Any]) -> dict[str, Any]:
    """What the run was asked to be: MLflow params never change once logged, and neither does a run's spec."""
    run, lineage, spec = shown["run"], shown["lineage"], shown["spec"].get("spec", {})
    params = {
        "experiment": run["experiment"],
        "stage": run["stage"],
        "team": run["team"],
        "owner": run["owner"],
        "priority": run["priority"],
        "chips": run["chips"],
        "queue": run["queue"],
        "image": lineage.get("image"),
        "command": " ".join(str(a) for a in [*(spec.get("command") or []), *(spec.get("args") or [])]),
        "dataset_uri": lineage.get("dataset_uri"),
        "dataset_version": lineage.get("dataset_version"),
        "config_uri": lineage.get("config_uri"),
        "config_digest": lineage.get("config_digest"),
        "code_repo": lineage.get("code_repo"),
        "parent_run": lineage.get("parent_run"),
        "parent_checkpoint": lineage.get("parent_checkpoint_requested"),
        "spec_digest": lineage.get("spec_digest"),
    }
    return {k: v for k, v in params.items() if v not in (None, "")}


def _tags(shown: dict[str, Any]) -> dict[str, Any]:
    """What the run is now: its state, its commit, each attempt's hardware and outcome, its checkpoints."""
    run, lineage = shown["run"], shown["lineage"]
    tags: dict[str, Any] = {
        UID_TAG: run["uid"],
        "crossrail.run": run["id"],
        "crossrail.state": run["state"],
        "crossrail.attempts": len(shown["attempts"]),
        "mlflow.runName": run["id"],
    }
    if lineage.get("code_commit"):
        tags["mlflow.source.git.commit"] = lineage["code_commit"]
    if lineage.get("code_repo"):
        tags["mlflow.source.git.repoURL"] = lineage["code_repo"]
    if lineage.get("parent_checkpoint"):
        tags["crossrail.parent_checkpoint"] = lineage["parent_checkpoint"]
    for a in shown["attempts"]:
        hardware = f"{a['pool']}: {a['chips']} x {a['chip_type']} ({a['accelerator']})"
        tags[f"crossrail.attempt.{a['number']}.hardware"] = hardware
        tags[f"crossrail.attempt.{a['number']}.state"] = a["state"] + (f": {a['reason']}" if a.get("reason") else "")
    for k in shown["checkpoints"]:
        tags[f"crossrail.checkpoint.{k['step']}"] = f"{k['uri']} ({k['state']}, attempt {k['attempt']})"
    return tags


def _new_metrics(ml: Any, mlflow_id: str, samples: list[dict[str, Any]], metric: Any) -> list[Any]:
    """The samples MLflow does not have yet, as MLflow metrics (timestamp in ms, step)."""
    out, seen_by_key = [], dict[str, set[tuple[int, int, float]]]()
    for s in samples:
        key, step = s["name"], int(s["step"] or 0)
        seen = seen_by_key.get(key)
        if seen is None:
            history = ml.get_metric_history(mlflow_id, key)
            seen = seen_by_key[key] = {(m.step, m.timestamp, m.value) for m in history}
        item = (step, int(s["ts"] * 1000), float(s["value"]))
        if item not in seen:
            seen.add(item)
            out.append(metric(key, item[2], item[1], step))
    return out


def _log_dataset(ml: Any, mlflow_id: str, lineage: dict[str, Any]) -> None:
    """The run's dataset as an MLflow dataset input, digest from its version; logged once per run."""
    import json

    from mlflow.entities import Dataset, DatasetInput, InputTag

    uri, version = lineage.get("dataset_uri"), lineage.get("dataset_version")
    if not uri or not version:
        return
    have = ml.get_run(mlflow_id).inputs.dataset_inputs
    digest = version.removeprefix("sha256:")[:DIGEST_CHARS]
    if any(d.dataset.digest == digest and d.dataset.name == uri for d in have):
        return
    dataset = Dataset(
        name=uri,
        digest=digest,
        source_type=uri.split("://", 1)[0] if "://" in uri else "path",
        source=json.dumps({"uri": uri}),
        profile=json.dumps({"version": version}),
    )
    ml.log_inputs(mlflow_id, datasets=[DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "training")])])
