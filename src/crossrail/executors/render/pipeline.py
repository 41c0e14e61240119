"""A run with parts (`spec.parts`) on Kubernetes: one JobSet with a replicated job per part.

Each part's replicated job has `replicas` Jobs (one per replica) of as many pods as one replica's chips
take hosts on the part's pool; its pods select that pool's nodes, so the parts run on different pools.
Kueue admits a JobSet as one Workload with a pod set per replicated job: all parts or none, each pod set
on its own flavor. Every pod knows its part (`CROSSRAIL_PART`, `--part NAME` after the run's arguments,
the `crossrail.dev/part` label) and its replica (`CROSSRAIL_PART_REPLICA`, the JobSet's job index), as
`python -m crossrail.workloads.rl --part NAME` expects. Each replica of each part reports under its own
prefix, `<report>/parts/<part>/<replica>` (an HTTP ingest endpoint excepted, which keeps each writer's records),
so no two pods write the same report objects.

The agent launches a pipeline the same way (`render_part_attempts`), with each part its own attempt: the
JobSet is named after the first part's attempt, each part's pods carry their attempt's number
(`crossrail.dev/attempt`) beside their part, and each replica reports under its own prefix of its attempt's,
`<attempt's report>/parts/<part>/<replica>` (runtime.report.replica_report, which both paths use, and whose
reader merges an attempt's replicas). A part retried alone gets a JobSet of its own, with one replicated job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.executors.render.hardware import layout
from crossrail.executors.render.kubernetes import JOB_INDEX_LABEL, JOBSET_API, MAX_NAME, _pod, render_kubernetes
from crossrail.executors.render.kueue import VERSION_ANNOTATIONS
from crossrail.executors.render.workload import LABEL_PREFIX, Workload
from crossrail.runtime.report import replica_report
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
        Problem(
            f"run {work.run}",
            f"spec.parts.{name}",
            "no pool was chosen for this part",
            None,
            "place every part",
            code=ProblemCode.INFEASIBLE,
        )
        for name in parts
        if name not in pools
    ]
    if problems:
        raise SpecError(problems)
    work = _with_rendezvous(work, fleet, list(pools.values()), work.object_name)
    works = [PartAttempt(name, part, pools[name], _part_work(work, name, part)) for name, part in parts.items()]
    return _jobset(works, fleet, work.object_name)


@dataclass(frozen=True)
class PartAttempt:
    """One part of a pipeline as the agent launches it: its own attempt's workload (env, report prefix, command
    with `--part NAME`), the part at the size it runs (`replicas`), and its pool."""

    name: str
    part: Part
    pool: Pool
    work: Workload


def render_part_attempts(parts: Sequence[PartAttempt], fleet: Fleet) -> dict[str, Any]:
    """The JobSet that runs the parts of one pipeline admitted together, each part its own attempt, suspended for
    Kueue: named after the lowest attempt, each replicated job's pods labelled with their part's attempt.

    The RL stages meet in `<shared volume>/crossrail-rl/<run>`, one directory per run, so a part retried alone
    (in a JobSet of its own) meets the parts still running. SpecError as for `render_pipeline`.
    """
    if not parts or len({p.work.run for p in parts}) != 1:
        raise ValueError("render_part_attempts needs the parts of one run")
    first = min(parts, key=lambda p: p.work.attempt).work
    used = [p.pool for p in parts]
    works = [
        replace(p, work=_replica_reports(_with_rendezvous(p.work, fleet, used, p.work.run), p.name)) for p in parts
    ]
    return _jobset(works, fleet, first.object_name)


def _replica_reports(work: Workload, part: str) -> Workload:
    """Each replica of `part` its own report prefix under the workload's (the kubelet expands the replica index):
    no two pods write one report object."""
    if "CROSSRAIL_REPORT" not in work.env:
        return work
    report = replica_report(work.env["CROSSRAIL_REPORT"], part, f"$({REPLICA_ENV})")
    return replace(work, env={**work.env, "CROSSRAIL_REPORT": report})


def _jobset(parts: Sequence[PartAttempt], fleet: Fleet, name: str) -> dict[str, Any]:
    """One JobSet named `name` with a replicated job per part; its metadata is the first part's, without a pool."""
    first = min(parts, key=lambda p: p.work.attempt)
    whole = render_kubernetes(replace(first.work, chips=first.part.chips), fleet, first.pool)  # metadata, checks
    labels = {k: v for k, v in whole["metadata"]["labels"].items() if k != f"{LABEL_PREFIX}pool"}
    meta = {**whole["metadata"], "name": name, "labels": labels, "annotations": dict(VERSION_ANNOTATIONS)}
    jobs = [_replicated_job(p.work, fleet, p.name, p.part, p.pool, jobset=name) for p in parts]
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": meta,
        "spec": {"suspend": True, "failurePolicy": {"maxRestarts": 0}, "replicatedJobs": jobs},
    }


def _with_rendezvous(work: Workload, fleet: Fleet, pools: Sequence[Pool], directory: str) -> Workload:
    """The reference RL pipeline's stages meet in a shared directory (`--rendezvous`, by default
    `<checkpoint dir>/rl`, which must be a file system): on Kubernetes, `<mount>/crossrail-rl/<directory>` on a
    writable volume every part's pool declares alike (a ReadWriteMany claim). SpecError with the fix when there
    is none."""
    if RL_MODULE not in work.command or "--rendezvous" in work.args or "--rendezvous" in work.command:
        return work
    used = list(dict.fromkeys(p.name for p in pools if p.backend == "kubernetes"))
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
        raise SpecError([Problem(f"run {work.run}", "spec.parts", message, None, fix, code=ProblemCode.UNSUPPORTED)])
    mount = shared[0][1].rstrip("/")
    return replace(work, args=[*work.args, "--rendezvous", f"{mount}/crossrail-rl/{directory}"])


def _part_work(work: Workload, name: str, part: Part) -> Workload:
    env = {**work.env, PART_ENV: name, "CROSSRAIL_PART_REPLICAS": str(part.replicas)}
    work = _replica_reports(replace(work, env=env), name)
    return replace(work, chips=part.chips, args=[*work.args, "--part", name], workers=part.parallelism.data)


def _replicated_job(work: Workload, fleet: Fleet, name: str, part: Part, pool: Pool, *, jobset: str) -> dict[str, Any]:
    """Part `name`'s replicated job: `work` is the part's own (a replica's chips, its env and arguments)."""
    if pool.backend != "kubernetes":
        message = f"part {name} is placed on pool {pool.name}, which has backend: {pool.backend}"
        raise SpecError(
            [
                Problem(
                    f"run {work.run}",
                    f"spec.parts.{name}",
                    message,
                    None,
                    "place it on a GKE pool",
                    code=ProblemCode.UNSUPPORTED,
                )
            ]
        )
    lay = layout(fleet, pool, part.chips)
    longest = f"{jobset}-{name}-{part.replicas - 1}-{lay.pods - 1}"  # JobSet pod hostname
    if len(longest) > MAX_NAME:
        message = f"{longest!r} ({len(longest)} characters) is longer than a Kubernetes name may be ({MAX_NAME})"
        fix = f"shorten the experiment or part name by {len(longest) - MAX_NAME} characters"
        raise SpecError(
            [Problem(f"run {work.run}", f"spec.parts.{name}", message, None, fix, code=ProblemCode.UNSUPPORTED)]
        )
    labels = {**work.labels, **work.crossrail_labels(), f"{LABEL_PREFIX}pool": pool.name, PART_LABEL: name}
    pod = _pod(replace(work, chips=part.chips), fleet, pool, lay, labels, job=name, jobset=jobset)
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
