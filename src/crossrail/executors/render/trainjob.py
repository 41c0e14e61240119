"""Kubeflow Trainer objects for multi-worker GPU work: a TrainJob per attempt, and the ClusterTrainingRuntime
every TrainJob refers to (`crossrail fleet render --target trainer`).

A GPU run with more than one data-parallel worker, or more chips than one host has, is one gang of
`numNodes` pods (one per host) with `numProcPerNode` worker processes each, every worker holding chips/N
GPUs. The runtime is plain: a JobSet of one `node` ReplicatedJob under Trainer's torch policy (which gives
each pod torchrun's `PET_*` rendezvous variables), no restarts (crossrail owns retries). Everything
pool-specific (node selectors, tolerations, service account, volumes) rides in the TrainJob's
`runtimePatches`, so one runtime serves every pool. Submitted suspended, labelled for the stage's Kueue
LocalQueue, as Jobs and JobSets are (docs/kubernetes.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.executors.render.hardware import pool_problem
from crossrail.executors.render.kueue import VERSION_ANNOTATIONS
from crossrail.executors.render.workload import Workload
from crossrail.spec import Fleet, Pool

TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_API = f"{TRAINER_GROUP}/v1alpha1"
TRAINER_SNAPSHOT = "v1alpha1 (main 8c0f505)"
"""The Trainer CRDs (schemas/crds/) rendered objects are checked against: a main-branch snapshot."""
RUNTIME_NAME = "crossrail-torch-distributed"
RUNTIME_KIND = "ClusterTrainingRuntime"
NODE = "node"
"""Trainer's name for the trainer ReplicatedJob and its container: torch's PET_* variables go to it."""
ANCESTOR_LABEL = f"{TRAINER_GROUP}/trainjob-ancestor-step"
FRAMEWORK_LABEL = f"{TRAINER_GROUP}/framework"
PATCH_MANAGER = "crossrail.dev/render"
ANNOTATIONS = {**VERSION_ANNOTATIONS, "crossrail.dev/trainer-version": TRAINER_SNAPSHOT}


@dataclass(frozen=True)
class GangLayout:
    """How a multi-worker GPU run lays out: `nodes` pods of `chips_per_node` GPUs, `procs_per_node` workers each."""

    nodes: int
    chips_per_node: int
    procs_per_node: int

    @property
    def workers(self) -> int:
        return self.nodes * self.procs_per_node


def needs_trainjob(pool: Pool, work: Workload) -> bool:
    """A GPU run of several workers, or of more chips than one host has, renders as a TrainJob."""
    return pool.accelerator == "gpu" and (work.workers > 1 or work.chips > pool.chips_per_host)


def gang(fleet: Fleet, pool: Pool, work: Workload) -> GangLayout:
    """The run's pods and workers on `pool`; SpecError with the field and a fix when they do not divide.

    One process per GPU (`numProcPerNode` = GPUs per node); `spec.parallelism.data` must split the chips
    into whole GPUs per data-parallel worker.
    """
    per_host = pool.chips_per_host
    if work.chips > pool.chips:
        message = f"the pool has {pool.chips} chips; the work asks for {work.chips}"
        raise pool_problem(fleet, pool, ("chips",), message, "pick a larger pool")
    if work.chips > per_host and work.chips % per_host:
        message = f"{work.chips} chips are not whole {per_host}-chip hosts"
        fix = f"ask for at most {per_host} chips or a multiple of {per_host}"
        raise pool_problem(fleet, pool, ("chips_per_host",), message, fix)
    nodes = max(1, work.chips // per_host)
    chips_per_node = work.chips // nodes
    workers = work.workers if work.workers > 1 else work.chips
    if workers % nodes or chips_per_node % (workers // nodes or 1) or workers > work.chips:
        message = (
            f"{workers} workers do not split evenly over {nodes} host(s) of {chips_per_node} GPUs "
            f"({work.chips} chips): every worker holds chips/workers whole GPUs"
        )
        choices = sorted({nodes * d for d in range(1, chips_per_node + 1) if chips_per_node % d == 0})
        fix = f"set spec.parallelism.data to one of {', '.join(map(str, choices))}"
        raise SpecError(
            [Problem(f"run {work.run}", "spec.parallelism.data", message, None, fix, code=ProblemCode.UNSUPPORTED)]
        )
    # One process per GPU, whatever the data-parallel degree: the reference trainer binds its local rank's
    # device, so a node of 8 GPUs with fewer processes would leave GPUs idle.
    return GangLayout(nodes, chips_per_node, chips_per_node)


def torchrun_command(command: list[str]) -> list[str]:
    """The run's command under torchrun, which reads its rendezvous from Trainer's PET_* variables.

    `python -m mod ...` -> `torchrun -m mod ...`, `python script.py ...` -> `torchrun script.py ...`;
    a command that already is torchrun, or is no Python at all, is left as it is.
    """
    if command and command[0].rsplit("/", 1)[-1].startswith("python") and len(command) > 1:
        return ["torchrun", *command[1:]]
    return list(command)


def render_trainjob(meta: dict[str, Any], pod: dict[str, Any], lay: GangLayout) -> dict[str, Any]:
    """The TrainJob for a run whose single-pod template is `pod` (kubernetes._pod), laid out as `lay`."""
    spec = pod["spec"]
    container = spec["containers"][0]
    trainer: dict[str, Any] = {
        "image": container["image"],
        "command": torchrun_command(container["command"]),
        "env": container["env"],
        "numNodes": lay.nodes,
        "numProcPerNode": lay.procs_per_node,
        "resourcesPerNode": container["resources"],
    }
    if container.get("args"):
        trainer["args"] = container["args"]
    patched: dict[str, Any] = {k: v for k, v in spec.items() if k not in ("containers", "restartPolicy")}
    if container.get("volumeMounts"):
        patched["containers"] = [{"name": NODE, "volumeMounts": container["volumeMounts"]}]
    node_job = {
        "name": NODE,
        "template": {"metadata": {"labels": pod["metadata"]["labels"]}, "spec": {"template": {**pod, "spec": patched}}},
    }
    patch = {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [node_job]}}}}
    meta = {**meta, "annotations": {**meta["annotations"], **ANNOTATIONS}}
    return {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": meta,
        "spec": {
            "runtimeRef": {"apiGroup": TRAINER_GROUP, "kind": RUNTIME_KIND, "name": RUNTIME_NAME},
            "suspend": True,
            "trainer": trainer,
            "runtimePatches": [patch],
        },
    }


def cluster_training_runtime() -> dict[str, Any]:
    """The one ClusterTrainingRuntime crossrail's TrainJobs use: torch, one `node` job, never restarted.

    It names no image: every TrainJob sets `trainer.image` to its run's image, pinned by digest.
    """
    job = {
        "name": NODE,
        "replicas": 1,
        "template": {
            "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
            "spec": {
                "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": NODE}]}},
            },
        },
    }
    return {
        "apiVersion": TRAINER_API,
        "kind": RUNTIME_KIND,
        "metadata": {
            "name": RUNTIME_NAME,
            "labels": {FRAMEWORK_LABEL: "torch", "crossrail.dev/managed": "true"},
            "annotations": {"crossrail.dev/trainer-version": TRAINER_SNAPSHOT},
        },
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"failurePolicy": {"maxRestarts": 0}, "replicatedJobs": [job]}},
        },
    }
