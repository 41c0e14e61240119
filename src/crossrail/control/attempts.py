"""What an attempt is launched with, and where it reports (its end is decided in crossrail.scheduling.decisions)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from crossrail.control.executor import LaunchRequest
from crossrail.core import EndReason
from crossrail.core.attempts import ACTIVE_ATTEMPT_STATES
from crossrail.executors.render.pipeline import PART_ENV
from crossrail.scheduling.decisions import Ended
from crossrail.spec import Pool
from crossrail.store import AttemptRecord, RunRecord


def launch_request(
    run: RunRecord,
    att: AttemptRecord,
    *,
    parent_checkpoint: str | None,
    heartbeat_s: float,
    parent_uid: str | None = None,
    report_secret: str | None = None,
) -> LaunchRequest:
    """What attempt `att` of `run` is launched with; `parent_uid` is the uid of the run's declared parent;
    `report_secret` is the attempt's ingest secret when it reports to an API server (CROSSRAIL_REPORT_SECRET).

    The runtime checks every checkpoint it restores against the run's uid, or the declared parent's
    (docs/runtime.md, "Whose checkpoint").
    """
    spec: dict[str, Any] = run.spec.get("spec", {})
    resolved = {
        **run.spec,
        "run": run.id,
        "attempt": att.number,
        "lineage": {
            "run_uid": run.uid,
            "spec_digest": run.spec_digest,
            "parent_run_uid": parent_uid,
            "dataset_uri": run.dataset_uri,
            "dataset_version": run.dataset_version,
            "code_repo": run.code_repo,
            "code_commit": run.code_commit,
            "config_digest": run.config_digest,
            "image_digest": run.image_digest,
            "parent_run": run.parent_run,
            "resumed_from": run.resumed_from,
        },
        "placement": {"pool": att.pool, "accelerator": att.accelerator, "chip_type": att.chip_type, "chips": att.chips},
        "parent_checkpoint": parent_checkpoint,
    }
    env = {
        **{str(k): str(v) for k, v in (spec.get("env") or {}).items()},
        "TRAINING_BACKEND": att.accelerator,
        "EXPERIMENT_ID": run.experiment,
        "CROSSRAIL_RUN_ID": run.id,
        "CROSSRAIL_ATTEMPT": str(att.number),
        "CROSSRAIL_RUN_UID": run.uid or "",
        "CROSSRAIL_CHECKPOINT_DIR": run.run_checkpoint_dir,
        "CROSSRAIL_CONFIG": run.config_uri or "",
        "CROSSRAIL_DATASET": run.dataset_uri,
        "CROSSRAIL_REPORT": att.report_uri or "",
        "CROSSRAIL_SPEC": json.dumps(resolved, sort_keys=True),
        "CROSSRAIL_HEARTBEAT_S": f"{heartbeat_s:g}",
    }
    if report_secret:
        env["CROSSRAIL_REPORT_SECRET"] = report_secret
    command = [str(c) for c in spec.get("command", [])] + [str(a) for a in spec.get("args", [])]
    if att.part is not None:  # one part of a pipeline: its stage, as the JobSet's pods run it (render/pipeline.py)
        part = (spec.get("parts") or {}).get(att.part) or {}
        resolved["part"] = att.part
        resolved["spec"] = {**spec, "parallelism": part.get("parallelism") or {}}  # the part's workers, not the run's
        env["CROSSRAIL_SPEC"] = json.dumps(resolved, sort_keys=True)
        # The attempt's chips say how many replicas it runs: the spec's, or what the backlog controller resized to.
        replicas = att.chips // int(part["chips"]) if part.get("chips") else int(part.get("replicas") or 1)
        env |= {PART_ENV: att.part, "CROSSRAIL_PART_REPLICAS": str(max(replicas, 1))}
        command += ["--part", att.part]
    # $(CROSSRAIL_*) in the command is the attempt's own value, as Kubernetes expands $(VAR) from the pod's env
    # (an imported Job's checkpoint argument: `crossrail import`).
    command = [_EXPANDED.sub(lambda m: env.get(m.group(1), m.group(0)), part) for part in command]
    return LaunchRequest(
        run=run.id,
        attempt=att.number,
        pool=att.pool,
        accelerator=att.accelerator,
        chip_type=att.chip_type,
        chips=att.chips,
        command=command,
        env=env,
    )


_EXPANDED = re.compile(r"\$\((CROSSRAIL_[A-Z_]+)\)")

REMOTE_BACKENDS = frozenset({"kubernetes"})
"""Backends whose attempts run on other machines and cannot write the agent's local report files."""


def report_uri(run: RunRecord, number: int, backend: str, reports_dir: Path, *, server: str | None = None) -> str:
    """Where attempt `number` of `run` writes its report channel, and the agent reads it.

    With `server` (an API server's base URL, `agent --report-url`), attempts on remote backends post their
    records to its ingest endpoint instead, with their secret (docs/api.md#ingest).

    Local and Ray attempts share the agent's file system: a JSON-lines file under `reports_dir`. Attempts on
    remote backends write numbered chunks in the run's checkpoint directory on object storage, which both sides
    reach (keyed by the run's uid, like its checkpoints); a run whose checkpoint dir is on local disk falls back
    to the local file (such a run's pods cannot report, which the portability lint already flags).
    """
    if server and backend in REMOTE_BACKENDS:
        return f"{server.rstrip('/')}/v1/ingest/{run.id}/{number}"
    base = run.checkpoint_dir.rstrip("/")
    if backend in REMOTE_BACKENDS and "://" in base and not base.startswith("file://"):
        return f"{run.run_checkpoint_dir}/reports/attempt-{number}"
    return str(reports_dir / run.id / f"{number}.jsonl")


def new_attempt(
    run: RunRecord,
    number: int,
    pool: Pool,
    chips: int,
    *,
    report: str | None,
    now: float,
    parent_checkpoint: str | None = None,
) -> AttemptRecord:
    """Attempt `number` of `run` on `chips` of `pool`, `starting`, with the run's lineage copied onto it.

    `parent_checkpoint` is the checkpoint URI it starts from, resolved now (a `latest` parent names a step here).
    """
    return AttemptRecord(
        run_id=run.id,
        number=number,
        state="starting",
        pool=pool.name,
        accelerator=str(pool.accelerator),
        chip_type=pool.chip_type,
        chips=chips,
        cost_per_chip_hour=pool.cost_per_chip_hour,
        dataset_uri=run.dataset_uri,
        dataset_version=run.dataset_version,
        code_commit=run.code_commit,
        config_digest=run.config_digest,
        image_digest=run.image_digest,
        started_at=None,
        ended_at=None,
        exit_code=None,
        reason=None,
        report_uri=report,
        created_at=now,
        parent_checkpoint=parent_checkpoint,
    )


_BEFORE_REASONS = {
    "succeeded": EndReason.SUCCEEDED,
    "failed": EndReason.SIGNAL,
    "lost": EndReason.LOST,
    "preempted": EndReason.PREEMPTED,
    "unplaced": EndReason.UNPLACED,
    "cancelled": EndReason.CANCELLED,
    "suspended": EndReason.SUSPENDED,
}
"""The reason of an attempt recorded before ends carried one: by its state (a failure counted as retryable)."""


def end_reason_of(att: AttemptRecord) -> EndReason:
    """The typed reason an ended attempt's record carries (`end_reason`; a record made without one: by state)."""
    if att.end_reason is not None:
        return att.end_reason
    return _BEFORE_REASONS.get(att.state, EndReason.LOST)


def ended_of(att: AttemptRecord | None) -> Ended | None:
    """An ended attempt as the decisions read it; None for an attempt that has not ended (or none)."""
    if att is None or att.state in ACTIVE_ATTEMPT_STATES:
        return None
    ended_at = att.ended_at if att.ended_at is not None else att.created_at or 0.0
    return Ended(att.number, att.pool, end_reason_of(att), ended_at)


def history(attempts: Iterable[AttemptRecord]) -> list[Ended]:
    """A run's ended attempts, in order, as the decisions read them."""
    return [e for a in attempts if (e := ended_of(a)) is not None]
