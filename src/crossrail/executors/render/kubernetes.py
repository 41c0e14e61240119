"""Kubernetes manifests for one attempt: a batch/v1 Job for single-host work, a JobSet for TPU slices, a
Kubeflow TrainJob for multi-worker GPU work (trainjob.py).

Submitted suspended to the stage's Kueue LocalQueue: Kueue admits (quota, cohorts, preemption) and
unsuspends; crossrail owns retries, so a Job never restarts itself (`backoffLimit: 0`, JobSet
`failurePolicy.maxRestarts: 0`) and a retry may land on other hardware. Pods select GKE's own node labels
plus the pool's `kubernetes.node_selector`; TPU slices ask Kueue's topology-aware scheduling for one node
pool per slice; checkpoints and reports go to object storage or to a volume the pool declares.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from crossrail.control.uris import pod_reach
from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.executors.render.hardware import Layout, accelerator_resource, gke_selectors, layout, pool_problem
from crossrail.executors.render.kueue import (
    JOBSET_RELEASE,
    KUEUE_RELEASE,
    PREFERRED_TOPOLOGY,
    REQUIRED_TOPOLOGY,
    SLICE_REQUIRED_TOPOLOGY,
    SLICE_SIZE,
    VERSION_ANNOTATIONS,
    exclusions,
    local_queue,
    namespace,
)
from crossrail.executors.render.trainjob import NODE, gang, needs_trainjob, render_trainjob
from crossrail.executors.render.workload import LABEL_PREFIX, PRIORITY_LABEL, QUEUE_LABEL, Workload
from crossrail.spec import Fleet, Pool
from crossrail.spec.targets import GKE_NODE_POOL, GKE_QUEUED, GKE_SPOT, GKE_TPU_TOPOLOGY, KubernetesVolume

STOP_BUDGET_ENV = "CROSSRAIL_STOP_BUDGET_S"
"""Seconds from SIGTERM to the kill, for the runtime to checkpoint within (crossrail.runtime.context)."""

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_POOL_LABEL = GKE_NODE_POOL
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
GCSFUSE_ANNOTATION = "gke-gcsfuse/volumes"
CONTAINER = "trainer"
REPLICATED_JOB = "slice"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
HOSTNAME_LABEL = "kubernetes.io/hostname"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JAX_COORDINATOR_PORT = 8476
"""The port JAX's own TPU cluster detection uses for its coordinator."""
MAX_NAME = 63
REPORT_SECRET_ENV = "CROSSRAIL_REPORT_SECRET"
REPORT_SECRET_KEY = "secret"
CONFIG_ENV = "CROSSRAIL_CONFIG"
CONFIG_VOLUME = "crossrail-config"
CONFIG_MOUNT = "/etc/crossrail/config"
"""Where a config file of this machine, shipped as the attempt's ConfigMap (config_map_name), is in the pod."""
CONFIG_MAP_MAX_BYTES = 900 * 1024
"""The largest config shipped as a ConfigMap: Kubernetes keeps an object to 1 MiB, its metadata included."""


def priority_class(priority: str) -> str:
    return f"crossrail-{priority}"


def render_kubernetes(work: Workload, fleet: Fleet, pool: Pool, *, force_backend: bool = False) -> dict[str, Any]:
    """The Job or JobSet that runs `work` on `pool`, suspended, labelled for its LocalQueue.

    SpecError when the pool is not `backend: kubernetes` (unless `force_backend`), or when the checkpoint
    directory or report location is neither object storage nor on a volume the pool mounts.
    """
    if pool.backend != "kubernetes" and not force_backend:
        message = f"pool {pool.name} has backend: {pool.backend}; its chips are not GKE nodes Kueue admits to"
        fix = (
            "render for a pool with backend: kubernetes, set backend: kubernetes on this pool, or pass --force-backend"
        )
        raise pool_problem(fleet, pool, ("backend",), message, fix)
    labels = {**work.labels, **work.crossrail_labels(), f"{LABEL_PREFIX}pool": pool.name}
    meta = {
        "name": work.object_name,
        "namespace": namespace(fleet, work.team),
        "labels": {
            **labels,
            QUEUE_LABEL: local_queue(fleet, work.stage, work.team),
            PRIORITY_LABEL: priority_class(work.priority),
        },
        "annotations": dict(VERSION_ANNOTATIONS),
    }
    if needs_trainjob(pool, work):
        return _trainjob(work, fleet, pool, meta, labels)
    lay = layout(fleet, pool, work.chips)
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


def _trainjob(work: Workload, fleet: Fleet, pool: Pool, meta: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """A multi-worker GPU run: one pod per host (numNodes), its workers in each (trainjob.py)."""
    lay = gang(fleet, pool, work)
    longest = f"{work.object_name}-{NODE}-0-{lay.nodes - 1}"  # Trainer's JobSet pod hostname
    if len(longest) > MAX_NAME:
        message = f"{longest!r} ({len(longest)} characters) is longer than a Kubernetes name may be ({MAX_NAME})"
        fix = f"shorten the experiment name by {len(longest) - MAX_NAME} characters"
        raise SpecError([Problem(f"run {work.run}", "metadata.name", message, None, fix, code=ProblemCode.BAD_VALUE)])
    pod = _pod(work, fleet, pool, Layout("gpu", work.chips, lay.chips_per_node, 1, 1), labels)
    asked = gpu_topology(pool, lay.nodes)
    if asked:  # the gang's request, in place of a single pod's
        kept = {k: v for k, v in pod["metadata"].get("annotations", {}).items() if k not in _GPU_TOPOLOGY}
        pod["metadata"]["annotations"] = kept | asked
    return render_trainjob(meta, pod, lay)


def header() -> str:
    """The comment a rendered manifest file starts with: which Kueue and JobSet releases it targets."""
    return (
        f"# Rendered by crossrail for Kueue {KUEUE_RELEASE} (kueue.x-k8s.io) and JobSet {JOBSET_RELEASE} "
        f"({JOBSET_API}).\n"
    )


def _check_name(work: Workload, lay: Layout) -> None:
    """Names Kubernetes derives from ours must stay DNS labels: a Job's `job-name` label, a JobSet pod's
    hostname `<jobset>-slice-<slice>-<host>`."""
    longest = work.object_name
    if lay.multi_host:
        longest += f"-{REPLICATED_JOB}-{lay.slices - 1}-{lay.hosts_per_slice - 1}"
    if len(longest) > MAX_NAME:
        message = f"{longest!r} ({len(longest)} characters) is longer than a Kubernetes name may be ({MAX_NAME})"
        fix = f"shorten the experiment name by {len(longest) - MAX_NAME} characters"
        raise SpecError([Problem(f"run {work.run}", "metadata.name", message, None, fix, code=ProblemCode.BAD_VALUE)])


def _jobset(meta: dict[str, Any], pod: dict[str, Any], lay: Layout) -> dict[str, Any]:
    # One ReplicatedJob: a Job per slice, a pod per host; the annotation gives each slice its own node pool.
    meta = {**meta, "annotations": {**meta["annotations"], EXCLUSIVE_TOPOLOGY: NODE_POOL_LABEL}}
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


def _pod(
    work: Workload,
    fleet: Fleet,
    pool: Pool,
    lay: Layout,
    labels: dict[str, str],
    *,
    job: str = REPLICATED_JOB,
    jobset: str | None = None,
) -> dict[str, Any]:
    """The pod template; `jobset` names the JobSet it runs in when that is not the workload's own object (a
    pipeline's parts, each its own attempt, in the JobSet named after the first: render/pipeline.py)."""
    selectors = gke_selectors(fleet, pool)
    if lay.topology is not None:
        selectors[GKE_TPU_TOPOLOGY] = lay.topology
    resource = accelerator_resource(pool)
    volumes = _volumes(work, fleet, pool)
    config, mounts, pod_volumes = _attached(work, volumes)
    env = _env(work, fleet, pool, lay, job, jobset=jobset) | ({CONFIG_ENV: config} if config else {})
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": work.image,
        "command": list(work.command),
        "env": [_env_var(work, k, v) for k, v in sorted(env.items())] + _slice_id(lay),
    }
    if work.args:
        container["args"] = list(work.args)
    if mounts:
        container["volumeMounts"] = mounts
    amount = str(lay.chips_per_pod)
    if resource is not None:
        container["resources"] = {"limits": {resource: amount}, "requests": {resource: amount}}
    else:  # a CPU pool's chips are cores, which Kueue counts as `cpu`
        container["resources"] = {"requests": {"cpu": amount}}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": _service_account(fleet, pool),
        "terminationGracePeriodSeconds": int(stop_budget_s(fleet, pool)),
        "nodeSelector": selectors,
        "containers": [container],
    }
    tolerations = _tolerations(resource, GKE_SPOT in selectors, queued=pool.provisioning == "flex-start")
    if tolerations:
        spec["tolerations"] = tolerations
    apart = exclusions(fleet, pool)
    if apart:  # off every other flavor Kueue could match (kueue.exclusions)
        required = {"nodeSelectorTerms": [{"matchExpressions": apart}]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    if pod_volumes:
        spec["volumes"] = pod_volumes
    metadata: dict[str, Any] = {"labels": labels}
    annotations = _topology_request(lay) or gpu_topology(pool, lay.pods)
    if any(v.gcsfuse is not None for v in volumes):
        annotations[GCSFUSE_ANNOTATION] = "true"  # GKE injects the GCS FUSE sidecar only with it
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


def _topology_request(lay: Layout) -> dict[str, str]:
    """Kueue TAS: every host of a TPU slice in one GKE node pool (the slice), each slice of a multi-slice
    JobSet in its own; so Kueue admits only when a whole slice of the shape is free."""
    if lay.topology is None:
        return {}
    if lay.slices == 1:
        return {REQUIRED_TOPOLOGY: GKE_NODE_POOL}
    return {SLICE_REQUIRED_TOPOLOGY: GKE_NODE_POOL, SLICE_SIZE: str(lay.hosts_per_slice)}


_GPU_TOPOLOGY = (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY)


def gpu_topology(pool: Pool, hosts: int) -> dict[str, str]:
    """Kueue TAS for a GPU pool that opts in (`kubernetes.topology`), whose flavor is then topology-aware: a gang
    of several hosts in one GKE node pool (`required`) or packed there when it can be (`preferred`); a pod set of
    one host asks for its node, which it always gets, so Kueue does not pass the flavor over in a mixed queue.
    Nothing for every other pool."""
    mode = pool.kubernetes.topology if pool.kubernetes is not None and pool.accelerator == "gpu" else None
    if mode is None:
        return {}
    if hosts <= 1:
        return {REQUIRED_TOPOLOGY: HOSTNAME_LABEL}
    return {REQUIRED_TOPOLOGY if mode == "required" else PREFERRED_TOPOLOGY: GKE_NODE_POOL}


def object_storage(uri: str) -> bool:
    """A URI a pod reaches without a volume (gs://, s3://, any fsspec scheme but file://), where the runtime
    writes checkpoints with a commit marker and reports as numbered chunks (docs/runtime.md)."""
    return "://" in uri and not uri.startswith("file://")


def _local(uri: str) -> str:
    path = uri.removeprefix("file://").removeprefix("localhost") if uri.startswith("file://") else uri
    return posixpath.normpath(path) if path else path  # /checkpoints/../etc is not on /checkpoints


def _volumes(work: Workload, fleet: Fleet, pool: Pool) -> list[KubernetesVolume]:
    """The pool's volumes; SpecError when the checkpoint dir or report location would die with the pod."""
    volumes = pool.kubernetes.volumes if pool.kubernetes is not None else []
    index = fleet.pool_names.index(pool.name)
    problems = []
    for var, path, what in (
        ("CROSSRAIL_CHECKPOINT_DIR", "spec.checkpoint.dir", "checkpoint directory"),
        ("CROSSRAIL_REPORT", "env.CROSSRAIL_REPORT", "report location"),
    ):
        uri = work.env.get(var, "")
        if object_storage(uri):
            continue
        local = _local(uri)
        on = [v for v in volumes if local == v.mount_path or local.startswith(v.mount_path + "/")]
        if on and not on[0].read_only:
            continue
        if not uri:
            message = f"the workload has no {what} ({var} is not set)"
            fix = "give the experiment a spec.checkpoint.dir on object storage (gs://<bucket>/<path>)"
        elif on:
            message = f"the {what} {uri!r} is on volume {on[0].name!r}, which the pool mounts read-only"
            fix = f"set read_only: false on spec.pools[{index}].kubernetes.volumes ({on[0].name})"
        else:
            mounted = ", ".join(v.mount_path for v in volumes) or "none"
            message = (
                f"the {what} {uri!r} is neither object storage nor on a volume of pool {pool.name} (mounted: {mounted})"
            )
            fix = (
                "put spec.checkpoint.dir on object storage (gs://<bucket>/<path>), or declare a volume mounted over "
                f"it in spec.pools[{index}].kubernetes.volumes (gcsfuse: {{bucket: <bucket>}} or claim: <pvc>)"
            )
        problems.append(Problem(f"run {work.run}", path, message, None, fix, code=ProblemCode.UNSUPPORTED))
    reach = pod_reach([v.mount_path for v in volumes])  # the one path rule (control/uris.py), for a pod
    for var, path, what in (
        (CONFIG_ENV, "spec.config", "config"),
        ("CROSSRAIL_DATASET", "spec.dataset.uri", "dataset"),
    ):
        uri = work.env.get(var, "")
        why = reach.refusal(uri) if uri else None
        if why is not None and var == CONFIG_ENV and shipped_config(work, volumes) is not None:
            continue  # a file of this machine: shipped to the pod as a ConfigMap
        if why is not None:
            fix = (
                f"put the {what} on object storage (gs://<bucket>/<path>), or under a volume declared in "
                f"spec.pools[{index}].kubernetes.volumes (gcsfuse: {{bucket: <bucket>}} or claim: <pvc>)"
            )
            problems.append(
                Problem(f"run {work.run}", path, f"the {what} {uri!r} {why}", None, fix, code=ProblemCode.UNSUPPORTED)
            )
    if problems:
        raise SpecError(problems)
    return list(volumes)


def _attached(work: Workload, volumes: list[KubernetesVolume]) -> tuple[str | None, list[Any], list[Any]]:
    """(the config's URI in the pod when it is shipped as the attempt's ConfigMap, else None; the container's
    volume mounts; the pod's volumes): the pool's volumes, and the ConfigMap mounted read-only at CONFIG_MOUNT."""
    mounts, pod_volumes = [_mount(v) for v in volumes], [_volume(v) for v in volumes]
    shipped = shipped_config(work, volumes)
    if shipped is None:
        return None, mounts, pod_volumes
    mounts.append({"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT, "readOnly": True})
    pod_volumes.append({"name": CONFIG_VOLUME, "configMap": {"name": config_map_name(work)}})
    return f"file://{CONFIG_MOUNT}/{config_key(shipped)}", mounts, pod_volumes


def _volume(volume: KubernetesVolume) -> dict[str, Any]:
    if volume.gcsfuse is not None:
        attributes = {"bucketName": volume.gcsfuse.bucket}
        if volume.gcsfuse.mount_options:
            attributes["mountOptions"] = ",".join(volume.gcsfuse.mount_options)
        csi = {"driver": GCSFUSE_DRIVER, "readOnly": volume.read_only, "volumeAttributes": attributes}
        return {"name": volume.name, "csi": csi}
    claim = {"claimName": volume.claim, "readOnly": volume.read_only}
    return {"name": volume.name, "persistentVolumeClaim": claim}


def _mount(volume: KubernetesVolume) -> dict[str, Any]:
    return {"name": volume.name, "mountPath": volume.mount_path, "readOnly": volume.read_only}


def stop_budget_s(fleet: Fleet, pool: Pool) -> float:
    """The seconds a pod has from SIGTERM to its kill: a spot pool's preemption notice (a reclaim gives no more,
    whatever the pod asks), else the fleet's preemption grace."""
    notice = pool.notice_s
    return fleet.spec.preemption.grace_s if notice is None else notice


def _env(
    work: Workload, fleet: Fleet, pool: Pool, lay: Layout, job: str = REPLICATED_JOB, *, jobset: str | None = None
) -> dict[str, str]:
    env = {**work.env, "TRAINING_BACKEND": str(pool.accelerator), STOP_BUDGET_ENV: f"{stop_budget_s(fleet, pool):g}"}
    if not lay.multi_host:
        return env
    # Slice 0's first host coordinates, by its name under the JobSet's headless service (named after it).
    owner = jobset or work.object_name
    first = f"{owner}-{job}-0-0.{owner}"
    env |= {
        "CROSSRAIL_SLICES": str(lay.slices),
        "CROSSRAIL_HOSTS_PER_SLICE": str(lay.hosts_per_slice),
        "JAX_COORDINATOR_ADDRESS": f"{first}:{JAX_COORDINATOR_PORT}",
        "JAX_NUM_PROCESSES": str(lay.pods),
    }
    # crossrail.runtime's coordinator, on every host of every slice (workloads/parallel.join reads it)
    env["CROSSRAIL_COORDINATOR"] = f"{first}:{JAX_COORDINATOR_PORT}"
    if lay.slices == 1:  # the world too (RANK comes with JAX_PROCESS_ID, _slice_id); several: the runtime's sum
        env["WORLD_SIZE"] = str(lay.pods)
    if lay.slices > 1:  # JAX multi-slice over DCN
        env |= {"MEGASCALE_NUM_SLICES": str(lay.slices), "MEGASCALE_COORDINATOR_ADDRESS": first}
    return env


def shipped_config(work: Workload, volumes: list[KubernetesVolume]) -> str | None:
    """The path on this machine of the config file the attempt's ConfigMap ships to its pods: a config named as a
    file here (file:// or an absolute path) that is under none of the pool's volumes; None for a config on object
    storage or a volume (the pod reads it there), or no config."""
    uri = work.env.get(CONFIG_ENV, "")
    if not uri or object_storage(uri) or not uri.startswith(("file://", "/")):
        return None
    local = _local(uri)
    if pod_reach([v.mount_path for v in volumes]).refusal(local) is None:
        return None
    return local


def config_key(path: str) -> str:
    """The ConfigMap key (and file name in the pod) of a shipped config: its file name, in the characters a key
    may hold (`[-._a-zA-Z0-9]`), so the runtime still tells YAML from JSON by its suffix."""
    return re.sub(r"[^-._a-zA-Z0-9]", "_", posixpath.basename(path)) or "config"


def config_map_name(work: Workload | str) -> str:
    """The ConfigMap holding a shipped config file: `<run>-a<attempt>-config`, made by the executor. `work`: the
    workload, or its object name."""
    return f"{work if isinstance(work, str) else work.object_name}-config"


def report_secret_name(work: Workload | str) -> str:
    """The Secret holding the attempt's report secret: `<run>-a<attempt>-report`, made by the executor. `work`: the
    workload, or its object name."""
    return f"{work if isinstance(work, str) else work.object_name}-report"


def _env_var(work: Workload, name: str, value: str) -> dict[str, Any]:
    """One container env entry; the report secret only as a reference to its Secret, never its value."""
    if name == REPORT_SECRET_ENV:
        ref = {"name": report_secret_name(work), "key": REPORT_SECRET_KEY}
        return {"name": name, "valueFrom": {"secretKeyRef": ref}}
    return {"name": name, "value": value}


def _slice_id(lay: Layout) -> list[dict[str, Any]]:
    """Which host of which slice a pod is, from the downward API.

    CROSSRAIL_HOST_INDEX is the pod's job-completion index (its host within its slice); with one slice
    that is JAX_PROCESS_ID too. With several, MEGASCALE_SLICE_ID is the job index JobSet labels each pod
    with, and the JAX process id is MEGASCALE_SLICE_ID x CROSSRAIL_HOSTS_PER_SLICE + CROSSRAIL_HOST_INDEX,
    which the downward API cannot compute: the runtime does.
    """
    if not lay.multi_host:
        return []
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}
    out = [{"name": "CROSSRAIL_HOST_INDEX", "valueFrom": index}]
    if lay.slices == 1:
        return [*out, {"name": "JAX_PROCESS_ID", "valueFrom": index}, {"name": "RANK", "valueFrom": index}]
    ref = {"fieldRef": {"fieldPath": f"metadata.labels['{JOB_INDEX_LABEL}']"}}
    return [*out, {"name": "MEGASCALE_SLICE_ID", "valueFrom": ref}]


def _service_account(fleet: Fleet, pool: Pool) -> str:
    if pool.kubernetes is not None and pool.kubernetes.service_account is not None:
        return pool.kubernetes.service_account
    return fleet.spec.kubernetes.service_account


def _tolerations(resource: str | None, spot: bool, *, queued: bool = False) -> list[dict[str, str]]:
    tolerations = []
    if queued:  # GKE taints the nodes of queued provisioning (flex-start) node pools
        tolerations.append({"key": GKE_QUEUED, "operator": "Equal", "value": "true", "effect": "NoSchedule"})
    if resource is not None:
        tolerations.append({"key": resource, "operator": "Exists", "effect": "NoSchedule"})
    if spot:
        tolerations.append({"key": GKE_SPOT, "operator": "Equal", "value": "true", "effect": "NoSchedule"})
    return tolerations
