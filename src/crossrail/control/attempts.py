"""What an attempt is launched with, and what its end means: the exit-code contract (docs/runtime.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossrail.control.executor import AttemptStatus, LaunchRequest
from crossrail.spec import Pool
from crossrail.store import AttemptRecord, RunRecord

EX_TEMPFAIL = 75


@dataclass(frozen=True)
class Outcome:
    """How an ended attempt is recorded: its state, whether the run may retry, and why."""

    attempt_state: str  # succeeded | failed | preempted | lost | cancelled | suspended | unplaced
    retryable: bool
    succeeded: bool
    reason: str
    by_user: bool = False  # cancelled or suspended: the run's state was already set by the command


def classify(status: AttemptStatus, run: RunRecord, retry_codes: list[int]) -> Outcome:  # noqa: PLR0911 (one return per rule)
    """The exit-code contract: 0 succeeded; 75 retryable; stopped by crossrail -> preempted or as asked;
    never placed by the engine -> unplaced (requeued, no retry spent); another signal or lost -> retryable;
    any other code fails, retried only if listed in spec.retries.exit_codes."""
    stopped = status.stopped_by
    if stopped in ("cancelled", "suspended") or run.state in ("cancelled", "suspended"):
        why = stopped or run.state
        return Outcome(why, retryable=False, succeeded=False, reason=f"stopped by crossrail ({why})", by_user=True)
    if stopped == "preempted":
        return Outcome("preempted", retryable=True, succeeded=False, reason="preempted by crossrail")
    if status.phase == "unplaced":  # nothing ran: requeued without spending a retry, like a preemption
        return Outcome("unplaced", retryable=True, succeeded=False, reason=f"not placed: {status.detail or 'no room'}")
    if status.phase == "lost":
        return Outcome("lost", retryable=True, succeeded=False, reason=f"lost: {status.detail or 'no exit status'}")
    if status.signal is not None:
        return Outcome("failed", retryable=True, succeeded=False, reason=f"killed by signal {status.signal}")
    code = status.exit_code
    if code == 0:
        return Outcome("succeeded", retryable=False, succeeded=True, reason="exit 0")
    if code == EX_TEMPFAIL:
        return Outcome("failed", retryable=True, succeeded=False, reason="exit 75 (EX_TEMPFAIL): retryable")
    if code in retry_codes:
        return Outcome(
            "failed", retryable=True, succeeded=False, reason=f"exit {code}, listed in spec.retries.exit_codes"
        )
    return Outcome(
        "failed",
        retryable=False,
        succeeded=False,
        reason=f"exit {code}: a failure of the training code, not retried unless listed in spec.retries.exit_codes",
    )


def launch_request(
    run: RunRecord,
    att: AttemptRecord,
    *,
    parent_checkpoint: str | None,
    heartbeat_s: float,
    parent_uid: str | None = None,
) -> LaunchRequest:
    """What attempt `att` of `run` is launched with; `parent_uid` is the uid of the run's declared parent.

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
    command = [str(c) for c in spec.get("command", [])] + [str(a) for a in spec.get("args", [])]
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


REMOTE_BACKENDS = frozenset({"kubernetes"})
"""Backends whose attempts run on other machines and cannot write the agent's local report files."""


def report_uri(run: RunRecord, number: int, backend: str, reports_dir: Path) -> str:
    """Where attempt `number` of `run` writes its report channel, and the agent reads it.

    Local and Ray attempts share the agent's file system: a JSON-lines file under `reports_dir`. Attempts on
    remote backends write numbered chunks in the run's checkpoint directory on object storage, which both sides
    reach (keyed by the run's uid, like its checkpoints); a run whose checkpoint dir is on local disk falls back
    to the local file (such a run's pods cannot report, which the portability lint already flags).
    """
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
