"""How a Job, JobSet or TrainJob and its Kueue Workload read as an attempt: phase, exit, and admission transitions.

Pure: it takes the objects as the API server returns them (dicts) and the attempt's pods, so it is tested
against status objects written from the Kubernetes, JobSet and Kueue documentation (tests/fixtures).

  Kueue Workload  QuotaReserved -> quota held on a flavor    Admitted -> pods may start
                  Evicted       -> pods stopped (preempted, pods-ready timeout, deactivated ...)
                  Finished      -> the job ended
  Job             Complete / Failed (batch/v1)               JobSet  Completed / Failed
  TrainJob        Complete / Failed (trainer.kubeflow.org)

A pipeline's JobSet (render/pipeline.py) holds several attempts, one per part: each replicated job's pods are
labelled with their part and its attempt, and each part reads as its own attempt (`observe_part`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from crossrail.core.attempts import AttemptPhase, AttemptStatus, StopReason
from crossrail.core.events import Event, EventType

LABEL_RUN = "crossrail.dev/run"
LABEL_ATTEMPT = "crossrail.dev/attempt"
LABEL_RUN_UID = "crossrail.dev/run-uid"
LABEL_PART = "crossrail.dev/part"
STOPPED_BY = "crossrail.dev/stopped-by"
CONTAINER = "trainer"
CONTAINERS = (CONTAINER, "node")
"""The training container: `trainer` in crossrail's Jobs and JobSets, `node` in a TrainJob's pods."""
SIGTERM = 15

Admission = str
"""`submitted` (no Workload yet), `pending`, `quota_reserved`, `admitted`, `evicted` or `finished`."""


@dataclass(frozen=True)
class Observed:
    """An attempt as the cluster shows it: the status the agent reads, Kueue's view, and its transitions.

    `status.phase` is `pending` until the trainer container runs (waiting in Kueue, or admitted and starting),
    then `running`, then `exited` or `lost`.
    """

    status: AttemptStatus
    admission: Admission
    events: list[Event] = field(default_factory=list)

    @property
    def pending(self) -> bool:
        """Not yet holding quota: it can be withdrawn and placed elsewhere without losing work."""
        return self.status.phase in ("pending", "running") and self.admission in ("submitted", "pending")


def timestamp(text: Any) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (`2026-11-30T07:00:00Z`); None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The object's status conditions by type."""
    if not obj:
        return {}
    return {str(c.get("type")): c for c in (obj.get("status") or {}).get("conditions") or []}


def _true(conds: dict[str, dict[str, Any]], kind: str) -> dict[str, Any] | None:
    c = conds.get(kind)
    return c if c is not None and c.get("status") == "True" else None


def identity(obj: dict[str, Any]) -> tuple[str, int] | None:
    """(run, attempt) from crossrail's labels; None for objects crossrail did not render."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    run, attempt = labels.get(LABEL_RUN), str(labels.get(LABEL_ATTEMPT))
    if not run or not attempt.isdigit():
        return None
    return str(run), int(attempt)


def part_attempts(obj: dict[str, Any]) -> dict[str, int]:
    """A pipeline JobSet's parts, each with its attempt (its pods' crossrail.dev/part and crossrail.dev/attempt
    labels), in the JobSet's order; {} for any other object (a Job, a TPU slice's JobSet, a part of a pipeline
    submitted as its own object before pipelines were one JobSet)."""
    if obj.get("kind") != "JobSet":
        return {}
    out = {}
    for job in (obj.get("spec") or {}).get("replicatedJobs") or []:
        pod = ((job.get("template") or {}).get("spec") or {}).get("template") or {}
        labels = (pod.get("metadata") or {}).get("labels") or {}
        part, attempt = labels.get(LABEL_PART), str(labels.get(LABEL_ATTEMPT))
        if part and attempt.isdigit():
            out[str(part)] = int(attempt)
    return out


def run_uid(obj: dict[str, Any]) -> str | None:
    """The uid of the run an object belongs to (its crossrail.dev/run-uid label); None for a run without one."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    uid = labels.get(LABEL_RUN_UID)
    return str(uid) if uid else None


def observe(obj: dict[str, Any], workload: dict[str, Any] | None, pods: list[dict[str, Any]]) -> Observed:
    """Read one Job or JobSet (with its Kueue Workload, if any, and its pods) as an attempt."""
    ident = identity(obj)
    if ident is None:
        raise ValueError("the object has no crossrail.dev/run and crossrail.dev/attempt labels")
    run, attempt = ident
    meta = obj.get("metadata") or {}
    stopped = (meta.get("annotations") or {}).get(STOPPED_BY)
    stopped_by: StopReason | None = stopped if stopped in ("preempted", "cancelled", "suspended") else None
    job, wl = conditions(obj), conditions(workload)
    started = timestamp((obj.get("status") or {}).get("startTime"))
    admission = _admission(workload, wl)
    events = _events(run, attempt, workload, wl)
    base = AttemptStatus(run, attempt, "running", stopped_by=stopped_by, started_at=started, image_digest=ran(pods))

    done = _true(job, "Complete") or _true(job, "Completed")
    if done is not None:
        ended = timestamp((obj.get("status") or {}).get("completionTime")) or timestamp(done.get("lastTransitionTime"))
        return Observed(
            replace(base, phase="exited", exit_code=0, ended_at=ended, detail="completed"), admission, events
        )
    failed = _true(job, "Failed")
    if failed is not None:
        return Observed(_failed(failed, pods, base), admission, events)
    evicted = _true(wl, "Evicted")
    if evicted is not None or (stopped_by is not None and meta.get("deletionTimestamp")):
        why = (
            f"evicted by Kueue ({evicted.get('reason')}): {evicted.get('message', '')}"
            if evicted
            else "deleted by crossrail"
        )
        ended = timestamp((evicted or {}).get("lastTransitionTime")) or timestamp(meta.get("deletionTimestamp"))
        status = replace(base, phase="exited", signal=SIGTERM, ended_at=ended, detail=why.strip())
        return Observed(status, "evicted" if evicted else admission, events)
    # Until the trainer's container runs (queued in Kueue, admitted but pulling, ...) nothing heartbeats yet.
    phase: AttemptPhase = "running" if any(_running(p) for p in pods) else "pending"
    return Observed(replace(base, phase=phase, detail=_waiting(obj, workload, wl)), admission, events)


def observe_part(
    obj: dict[str, Any], part: str, attempt: int, workload: dict[str, Any] | None, pods: list[dict[str, Any]]
) -> Observed:
    """Part `part` of a pipeline JobSet (with the JobSet's Workload, and the part's own pods) as attempt `attempt`.

    It ended when every Job of its replicated job succeeded (`replicatedJobsStatus`, or the JobSet completed), or
    one failed (its exit from its pods); it is `lost` when the JobSet failed without it (another part failed, and
    JobSet deleted the rest). Otherwise it reads as the JobSet does (waiting in Kueue, evicted, stopped), running
    once a pod of its own runs.
    """
    ident = identity(obj)
    if ident is None:
        raise ValueError("the JobSet has no crossrail.dev/run and crossrail.dev/attempt labels")
    status = obj.get("status") or {}
    jobs = (obj.get("spec") or {}).get("replicatedJobs") or []
    replicas = next((int(j.get("replicas") or 1) for j in jobs if j.get("name") == part), 1)
    mine: dict[str, Any] = next((r for r in status.get("replicatedJobsStatus") or [] if r.get("name") == part), {})
    whole = conditions(obj)
    kept = [c for c in status.get("conditions") or [] if c.get("type") not in ("Completed", "Complete", "Failed")]
    ended = _true(whole, "Failed")
    # A JobSet completes only when every Job of every part succeeded (its default successPolicy, operator All).
    if int(mine.get("succeeded") or 0) >= replicas or _true(whole, "Completed"):
        kept.append(_true(whole, "Completed") or {"type": "Completed", "status": "True"})
    elif int(mine.get("failed") or 0) > 0:
        failed = {"type": "Failed", "status": "True", "reason": "PartFailed", "message": f"part {part} failed"}
        kept.append(_true(whole, "Failed") or failed)
    elif ended is not None:
        meta = obj.get("metadata") or {}
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        why = f"{ended.get('reason') or ended.get('type')}: {ended.get('message') or ''}".strip().rstrip(":")
        detail = f"its pipeline's JobSet {name} ended before part {part} did ({why})"
        started, ended_at = timestamp(status.get("startTime")), timestamp(ended.get("lastTransitionTime"))
        lost = AttemptStatus(ident[0], attempt, "lost", started_at=started, ended_at=ended_at, detail=detail)
        wl = conditions(workload)
        return Observed(lost, _admission(workload, wl), _events(ident[0], attempt, workload, wl))
    labels = {**((obj.get("metadata") or {}).get("labels") or {}), LABEL_ATTEMPT: str(attempt)}
    as_part = {**obj, "metadata": {**(obj.get("metadata") or {}), "labels": labels}}
    as_part["status"] = {k: v for k, v in status.items() if k not in ("conditions", "completionTime")} | {
        "conditions": kept
    }
    return observe(as_part, workload, pods)


def _running(pod: dict[str, Any]) -> bool:
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        if c.get("name") in CONTAINERS and "running" in (c.get("state") or {}):
            return True
    return False


_IMAGE_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")


def ran(pods: list[dict[str, Any]]) -> str | None:
    """The digest of the image the attempt's training containers ran: the kubelet's resolved `imageID`
    (`docker-pullable://registry/trainer@sha256:...`, or `registry/trainer@sha256:...`) of the first container
    status that has one; None before any pulled its image (an empty imageID) or when none is a digest."""
    for pod in pods:
        for c in (pod.get("status") or {}).get("containerStatuses") or []:
            found = _IMAGE_DIGEST.search(str(c.get("imageID") or "")) if c.get("name") in CONTAINERS else None
            if found:
                return found.group(1)
    return None


def trainer_container(pod: dict[str, Any]) -> str:
    """The name of the pod's training container (`trainer`, or `node` in a TrainJob's pods)."""
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    return next((str(n) for n in names if n in CONTAINERS), CONTAINER)


def _admission(workload: dict[str, Any] | None, wl: dict[str, dict[str, Any]]) -> Admission:
    if workload is None:
        return "submitted"
    for kind, name in (("Finished", "finished"), ("Evicted", "evicted"), ("Admitted", "admitted")):
        if _true(wl, kind):
            return name
    return "quota_reserved" if _true(wl, "QuotaReserved") else "pending"


def flavors(workload: dict[str, Any] | None) -> dict[str, str]:
    """Resource -> ResourceFlavor Kueue assigned, over every pod set."""
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    out: dict[str, str] = {}
    for pod_set in admission.get("podSetAssignments") or []:
        out.update({str(k): str(v) for k, v in (pod_set.get("flavors") or {}).items()})
    return out


def _waiting(obj: dict[str, Any], workload: dict[str, Any] | None, wl: dict[str, dict[str, Any]]) -> str:
    status = obj.get("status") or {}
    active = status.get("active")
    if active is None and "replicatedJobsStatus" in status:
        active = sum(int(r.get("active") or 0) for r in status["replicatedJobsStatus"])
    if workload is None:
        return "submitted; Kueue has not created its Workload yet"
    queue = ((workload.get("spec") or {}).get("queueName")) or "its queue"
    if _true(wl, "Admitted"):
        where = ", ".join(f"{r} on {f}" for r, f in sorted(flavors(workload).items())) or "its flavor"
        return f"admitted by Kueue ({where}); {int(active or 0)} pod(s) active"
    if _true(wl, "QuotaReserved"):
        return f"quota reserved in {queue}; waiting for admission checks"
    pending = wl.get("QuotaReserved") or {}
    return f"pending in {queue}: {pending.get('message') or 'waiting for quota'}"


def _failed(cond: dict[str, Any], pods: list[dict[str, Any]], base: AttemptStatus) -> AttemptStatus:
    """A failed Job: the first failed trainer container's exit code or signal (the exit-code contract)."""
    ended = timestamp(cond.get("lastTransitionTime"))
    why = f"{cond.get('reason') or 'Failed'}: {cond.get('message') or ''}".strip().rstrip(":")
    terminated = [t for t in map(_terminated, pods) if t is not None and (t.get("exitCode") or t.get("signal"))]
    if not terminated:
        return replace(base, phase="lost", ended_at=ended, detail=f"{why}; no pod recorded the trainer's exit")
    first = min(terminated, key=lambda t: timestamp(t.get("finishedAt")) or 0.0)
    code, signal = int(first.get("exitCode") or 0), int(first.get("signal") or 0)
    detail = f"{why} ({first.get('reason') or 'Error'})"
    if signal or code > 128:
        return replace(base, phase="exited", signal=signal or code - 128, ended_at=ended, detail=detail)
    return replace(base, phase="exited", exit_code=code, ended_at=ended, detail=detail)


def _terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        if c.get("name") in CONTAINERS:
            state = c.get("state") or {}
            return state.get("terminated") or (c.get("lastState") or {}).get("terminated")
    return None


_EVENT = {"Admitted": EventType.ADMITTED, "Evicted": EventType.PREEMPTED}


def _events(run: str, attempt: int, workload: dict[str, Any] | None, wl: dict[str, dict[str, Any]]) -> list[Event]:
    """One event per Kueue condition that holds: Admitted -> admitted, Evicted -> preempted, others reported."""
    out = []
    for kind in ("QuotaReserved", "Admitted", "Evicted", "Requeued", "Finished"):
        cond = _true(wl, kind)
        if cond is None:
            continue
        data: dict[str, Any] = {
            "source": "kueue",
            "condition": kind,
            "reason": cond.get("reason"),
            "message": cond.get("message"),
        }
        if kind in ("QuotaReserved", "Admitted"):
            data["flavors"] = flavors(workload)
        ts = timestamp(cond.get("lastTransitionTime")) or 0.0
        out.append(Event(_EVENT.get(kind, EventType.REPORTED), ts, run, attempt, data))
    return out
