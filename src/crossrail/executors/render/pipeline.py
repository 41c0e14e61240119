"""A run with parts (`spec.parts`) on Kubernetes: one JobSet with a replicated job per part.

Each part's replicated job has `replicas` Jobs (one per replica) of as many pods as one replica's chips
take hosts on the part's pool; its pods select that pool's nodes, so the parts run on different pools.
Kueue admits a JobSet as one Workload with a pod set per replicated job: all parts or none, each pod set
on its own flavor. Every pod knows its part (`CROSSRAIL_PART`, `--part NAME` after the run's arguments,
the `crossrail.dev/part` label) and its replica (`CROSSRAIL_PART_REPLICA`, the JobSet's job index), as
`python -m crossrail.workloads.rl --part NAME` expects. Each replica of each part reports under its own
prefix, `<report>/parts/<part>/<replica>`, so no two pods write the same report objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from crossrail.errors import Problem, SpecError
from crossrail.executors.render.hardware import layout
from crossrail.executors.render.kubernetes import JOB_INDEX_LABEL, JOBSET_API, MAX_NAME, _pod, render_kubernetes
from crossrail.executors.render.kueue import VERSION_ANNOTATIONS
from crossrail.executors.render.workload import LABEL_PREFIX, Workload
from crossrail.spec import Fleet, Part, Pool

PART_ENV = "CROSSRAIL_PART"
REPLICA_ENV = "CROSSRAIL_PART_REPLICA"
RL_MODULE = "crossrail.workloads.rl"
PART_LABEL = f"{LABEL_PREFIX}part"


def render_pipeline(
    work: Workload, fleet: Fleet, parts: Mapping[str, Part], pools: Mapping[str, Pool]
) -> dict[str, Any]:
    """The JobSet that runs every part of `work` on its pool (`pools`: part -> pool), suspended for Kueue.

    SpecError, every problem at once, for a part without a pool, a pool that is not `backend: kubernetes`,
    a replica its pool cannot lay out, or a pod name too long for Kubernetes.
    """
    problems = [
        Problem(f"run {work.run}", f"spec.parts.{name}", "no pool was chosen for this part", None, "place every part")
        for name in parts
        if name not in pools
    ]
    if problems:
        raise SpecError(problems)
    work = _with_rendezvous(work, fleet, parts, pools)
    first = next(iter(parts))
    whole = render_kubernetes(_part_work(work, first, parts[first]), fleet, pools[first])  # metadata, checks
    labels = {k: v for k, v in whole["metadata"]["labels"].items() if k != f"{LABEL_PREFIX}pool"}
    meta = {**whole["metadata"], "labels": labels, "annotations": dict(VERSION_ANNOTATIONS)}
    jobs = [_replicated_job(work, fleet, name, part, pools[name]) for name, part in parts.items()]
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": meta,
        "spec": {"suspend": True, "failurePolicy": {"maxRestarts": 0}, "replicatedJobs": jobs},
    }


def _with_rendezvous(work: Workload, fleet: Fleet, parts: Mapping[str, Part], pools: Mapping[str, Pool]) -> Workload:
    """The reference RL pipeline's stages meet in a shared directory (`--rendezvous`, by default
    `<checkpoint dir>/rl`, which must be a file system): on Kubernetes, a writable volume every part's pool
    declares alike (a ReadWriteMany claim). SpecError with the fix when there is none."""
    if RL_MODULE not in work.command or "--rendezvous" in work.args:
        return work
    used = list(dict.fromkeys(pools[name].name for name in parts if pools[name].backend == "kubernetes"))
    mounts = [
        {(v.name, v.mount_path) for v in (p.kubernetes.volumes if p.kubernetes else []) if not v.read_only}
        for p in (fleet.pool(name) for name in used)
    ]
    shared = sorted(set.intersection(*mounts)) if mounts else []
    if not shared:
        indices = ", ".join(f"spec.pools[{fleet.pool_names.index(name)}]" for name in used)
        message = (
            f"the RL parts meet in a shared directory, and pools {', '.join(used)} declare no writable volume "
            "alike (same name and mount_path)"
        )
        fix = (
            f"declare a ReadWriteMany volume (claim: <pvc>) with the same name and mount_path in "
            f"{indices} .kubernetes.volumes, or name a shared directory with --rendezvous in spec.args"
        )
        raise SpecError([Problem(f"run {work.run}", "spec.parts", message, None, fix)])
    mount = shared[0][1].rstrip("/")
    return replace(work, args=[*work.args, "--rendezvous", f"{mount}/crossrail-rl/{work.object_name}"])


def _part_work(work: Workload, name: str, part: Part) -> Workload:
    env = {**work.env, PART_ENV: name, "CROSSRAIL_PART_REPLICAS": str(part.replicas)}
    if "CROSSRAIL_REPORT" in env:  # each replica of each part its own report prefix: no two write one object
        env["CROSSRAIL_REPORT"] = f"{env['CROSSRAIL_REPORT']}/parts/{name}/$({REPLICA_ENV})"
    return replace(work, chips=part.chips, env=env, args=[*work.args, "--part", name], workers=part.parallelism.data)


def _replicated_job(work: Workload, fleet: Fleet, name: str, part: Part, pool: Pool) -> dict[str, Any]:
    if pool.backend != "kubernetes":
        message = f"part {name} is placed on pool {pool.name}, which has backend: {pool.backend}"
        raise SpecError([Problem(f"run {work.run}", f"spec.parts.{name}", message, None, "place it on a GKE pool")])
    lay = layout(fleet, pool, part.chips)
    longest = f"{work.object_name}-{name}-{part.replicas - 1}-{lay.pods - 1}"  # JobSet pod hostname
    if len(longest) > MAX_NAME:
        message = f"{longest!r} ({len(longest)} characters) is longer than a Kubernetes name may be ({MAX_NAME})"
        fix = f"shorten the experiment or part name by {len(longest) - MAX_NAME} characters"
        raise SpecError([Problem(f"run {work.run}", f"spec.parts.{name}", message, None, fix)])
    labels = {**work.labels, **work.crossrail_labels(), f"{LABEL_PREFIX}pool": pool.name, PART_LABEL: name}
    pod = _pod(_part_work(work, name, part), fleet, pool, lay, labels, job=name)
    index = {"fieldRef": {"fieldPath": f"metadata.labels['{JOB_INDEX_LABEL}']"}}  # which replica of the part
    # first, so the kubelet expands $(CROSSRAIL_PART_REPLICA) in the report prefix after it
    pod["spec"]["containers"][0]["env"].insert(0, {"name": REPLICA_ENV, "valueFrom": index})
    job = {
        "parallelism": lay.pods,
        "completions": lay.pods,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": pod,
    }
    return {
        "name": name,
        "replicas": part.replicas,
        "template": {"metadata": {"labels": {PART_LABEL: name}}, "spec": job},
    }
