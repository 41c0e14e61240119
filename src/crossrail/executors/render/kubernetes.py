"""Kubernetes manifests for one attempt: a batch/v1 Job for single-host work, a JobSet for TPU slices.

Submitted suspended to the stage's Kueue LocalQueue: Kueue admits (quota, cohorts, preemption) and
unsuspends; crossrail owns retries, so a Job never restarts itself (`backoffLimit: 0`, JobSet
`failurePolicy.maxRestarts: 0`) and a retry may land on other hardware.
"""

from __future__ import annotations

from typing import Any

from crossrail.errors import Problem, SpecError
from crossrail.executors.render.hardware import (
    GKE_SPOT,
    GKE_TPU_TOPOLOGY,
    Layout,
    accelerator_resource,
    gke_selectors,
    layout,
)
from crossrail.executors.render.kueue import local_queue, namespace
from crossrail.executors.render.workload import LABEL_PREFIX, PRIORITY_LABEL, QUEUE_LABEL, Workload
from crossrail.spec import Fleet, Pool

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
CONTAINER = "trainer"
REPLICATED_JOB = "slice"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
MAX_NAME = 63


def priority_class(priority: str) -> str:
    return f"crossrail-{priority}"


def render_kubernetes(work: Workload, fleet: Fleet, pool: Pool) -> dict[str, Any]:
    """The Job or JobSet that runs `work` on `pool`, suspended, labelled for its LocalQueue."""
    lay = layout(fleet, pool, work.chips)
    labels = {**work.labels, **work.crossrail_labels(), f"{LABEL_PREFIX}pool": pool.name}
    meta = {
        "name": work.object_name,
        "namespace": namespace(fleet, work.team),
        "labels": {
            **labels,
            QUEUE_LABEL: local_queue(fleet, work.stage, work.team),
            PRIORITY_LABEL: priority_class(work.priority),
        },
    }
    _check_name(work, lay)
    pod = _pod(work, fleet, pool, lay, labels)
    if not lay.multi_host:
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta,
            "spec": {"suspend": True, "backoffLimit": 0, "parallelism": 1, "completions": 1, "template": pod},
        }
    return _jobset(meta, pod, lay)


def _check_name(work: Workload, lay: Layout) -> None:
    """Names Kubernetes derives from ours must stay DNS labels: a Job's `job-name` label, a JobSet pod's
    hostname `<jobset>-slice-<slice>-<host>`."""
    longest = work.object_name
    if lay.multi_host:
        longest += f"-{REPLICATED_JOB}-{lay.slices - 1}-{lay.hosts_per_slice - 1}"
    if len(longest) > MAX_NAME:
        message = f"{longest!r} ({len(longest)} characters) is longer than a Kubernetes name may be ({MAX_NAME})"
        fix = f"shorten the experiment name by {len(longest) - MAX_NAME} characters"
        raise SpecError([Problem(f"run {work.run}", "metadata.name", message, None, fix)])


def _jobset(meta: dict[str, Any], pod: dict[str, Any], lay: Layout) -> dict[str, Any]:
    # One ReplicatedJob: a Job per slice, a pod per host; the annotation gives each slice its own node pool.
    meta = {**meta, "annotations": {EXCLUSIVE_TOPOLOGY: NODE_POOL_LABEL}}
    job = {
        "parallelism": lay.hosts_per_slice,
        "completions": lay.hosts_per_slice,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": pod,
    }
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": meta,
        "spec": {
            "suspend": True,
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": lay.slices, "template": {"spec": job}}],
        },
    }


def _pod(work: Workload, fleet: Fleet, pool: Pool, lay: Layout, labels: dict[str, str]) -> dict[str, Any]:
    selectors = gke_selectors(fleet, pool)
    if lay.topology is not None:
        selectors[GKE_TPU_TOPOLOGY] = lay.topology
    resource = accelerator_resource(pool)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": work.image,
        "command": list(work.command),
        "env": [{"name": k, "value": v} for k, v in sorted(_env(work, pool, lay).items())] + _slice_id(lay),
    }
    if work.args:
        container["args"] = list(work.args)
    amount = str(lay.chips_per_pod)
    if resource is not None:
        container["resources"] = {"limits": {resource: amount}, "requests": {resource: amount}}
    else:  # a CPU pool's chips are cores, which Kueue counts as `cpu`
        container["resources"] = {"requests": {"cpu": amount}}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": _service_account(fleet, pool),
        "terminationGracePeriodSeconds": int(fleet.spec.preemption.grace_s),
        "nodeSelector": selectors,
        "containers": [container],
    }
    tolerations = _tolerations(resource, GKE_SPOT in selectors)
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": {"labels": labels}, "spec": spec}


def _env(work: Workload, pool: Pool, lay: Layout) -> dict[str, str]:
    env = {**work.env, "TRAINING_BACKEND": str(pool.accelerator)}
    if lay.multi_host:
        env |= {"CROSSRAIL_SLICES": str(lay.slices), "CROSSRAIL_HOSTS_PER_SLICE": str(lay.hosts_per_slice)}
    if lay.slices > 1:  # JAX multi-slice: slice 0's first host coordinates, by its JobSet DNS name
        first = f"{work.object_name}-{REPLICATED_JOB}-0-0.{work.object_name}"
        env |= {"MEGASCALE_NUM_SLICES": str(lay.slices), "MEGASCALE_COORDINATOR_ADDRESS": first}
    return env


def _slice_id(lay: Layout) -> list[dict[str, Any]]:
    """MEGASCALE_SLICE_ID from the job index JobSet labels each pod with (multi-slice only)."""
    if lay.slices == 1:
        return []
    ref = {"fieldRef": {"fieldPath": f"metadata.labels['{JOB_INDEX_LABEL}']"}}
    return [{"name": "MEGASCALE_SLICE_ID", "valueFrom": ref}]


def _service_account(fleet: Fleet, pool: Pool) -> str:
    if pool.kubernetes is not None and pool.kubernetes.service_account is not None:
        return pool.kubernetes.service_account
    return fleet.spec.kubernetes.service_account


def _tolerations(resource: str | None, spot: bool) -> list[dict[str, str]]:
    tolerations = []
    if resource is not None:
        tolerations.append({"key": resource, "operator": "Exists", "effect": "NoSchedule"})
    if spot:
        tolerations.append({"key": GKE_SPOT, "operator": "Equal", "value": "true", "effect": "NoSchedule"})
    return tolerations
