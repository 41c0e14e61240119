"""The fleet as Kueue objects: a Namespace per team, a Topology for topology-aware scheduling, a
ResourceFlavor per pool, a ClusterQueue per stage queue, Cohorts, LocalQueues in each team namespace and a
WorkloadPriorityClass per crossrail priority.

Kueue then admits exactly as crossrail's own scheduler would: nominal quota per pool, borrowing and
lending limits inside a cohort, lower-priority preemption inside a queue and reclaim of lent quota; and a
TPU slice only when a whole node pool of its shape is free.

The objects target Kueue v0.19 and JobSet v0.12, the newest releases at the commits the CRDs in
schemas/crds/ were copied from (main just after v0.19.2 and v0.12.0; schemas/crds/SOURCES.md). Kueue serves both
`v1beta1` and `v1beta2` (the storage version); they differ, for what crossrail renders, only in the
ClusterQueue's cohort field (`cohort` in v1beta1, `cohortName` in v1beta2) and the MultiKueueCluster's kubeconfig
(`spec.kubeConfig` in v1beta1, `spec.clusterSource.kubeConfig` in v1beta2).

Capacity that arrives (pools with `provisioning`): Kueue's topology-aware scheduling counts only Ready nodes,
so a flex-start or autoscaled pool's flavor gets a ProvisioningRequestConfig and an AdmissionCheck of the
`kueue.x-k8s.io/provisioning-request` controller, which the ClusterQueues run on that flavor only
(`admissionChecksStrategy.onFlavors`): Kueue reserves quota, asks for the nodes, and admits once they exist.

Several clusters (`spec.clusters`): the manager cluster gets every queue with the `kueue.x-k8s.io/multikueue`
AdmissionCheck, a MultiKueueConfig naming every worker and a MultiKueueCluster per worker; each worker
(`render_kueue(..., cluster=name)`) gets the same queues over its own pools' flavors, with their provisioning
checks (MultiKueue dispatches a workload to a worker, whose Kueue admits it).
"""

from __future__ import annotations

import re
from typing import Any

from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.executors.render.hardware import accelerator_resource, gke_selectors
from crossrail.executors.render.workload import PRIORITIES
from crossrail.spec import Fleet, Pool, Queue

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_APIS = ("v1beta1", "v1beta2")
KUEUE_API_DEFAULT = "v1beta2"
KUEUE_API = f"{KUEUE_GROUP}/{KUEUE_API_DEFAULT}"
KUEUE_RELEASE = "v0.19"
JOBSET_RELEASE = "v0.12"
VERSION_ANNOTATIONS = {"crossrail.dev/kueue-version": KUEUE_RELEASE, "crossrail.dev/jobset-version": JOBSET_RELEASE}
"""On every rendered workload: the releases whose CRDs (schemas/crds/) it was checked against."""
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
SLICE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
TOPOLOGY_NAME = "crossrail-gke"
TOPOLOGY_LEVELS = ("cloud.google.com/gke-nodepool", "kubernetes.io/hostname")
"""A GKE node pool is one TPU slice; below it, the node."""
_COHORT_FIELD = {"v1beta1": "cohort", "v1beta2": "cohortName"}
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
MULTIKUEUE_CHECK = "crossrail-multikueue"
MULTIKUEUE_CONFIG = "crossrail"
KUEUE_NAMESPACE = "kueue-system"
"""Kueue's own namespace, where a MultiKueueCluster's kubeconfig Secret is (Kueue's configNamespace default)."""
KUBECONFIG_KEY = "kubeconfig"
"""The key of that Secret holding the worker's kubeconfig (Kueue's MultiKueueConfigSecretKey)."""
PROVISIONING_CLASSES = {
    # GKE's Dynamic Workload Scheduler: nodes of a queued-provisioning node pool, all at once, for a bounded time
    "flex-start": "queued-provisioning.gke.io",
    # The cluster autoscaler scales the node pool up for the whole workload at once, or not at all
    "autoscaled": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
}
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_QUEUEING = {"strict_fifo": "StrictFIFO", "best_effort_fifo": "BestEffortFIFO"}


def namespace(fleet: Fleet, team: str | None) -> str:
    """Where a team's work goes: its mapped namespace, its own name when it has a queue, else the default."""
    k8s = fleet.spec.kubernetes
    if team is None:
        return k8s.namespace
    if team in k8s.team_namespaces:
        return k8s.team_namespaces[team]
    if not any(team in q.teams for q in fleet.queues):
        return k8s.namespace
    if not _DNS_LABEL.fullmatch(team):
        fix = f"map it in spec.kubernetes.team_namespaces, e.g. {{{team!r}: {_dns(team)}}}"
        message = f"team {team!r} has a queue but is not a namespace name"
        raise SpecError(
            [
                Problem(
                    f"fleet {fleet.name}",
                    "spec.kubernetes.team_namespaces",
                    message,
                    None,
                    fix,
                    code=ProblemCode.UNSUPPORTED,
                )
            ]
        )
    return team


def _dns(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63] or "team"


def local_queue(fleet: Fleet, stage: str, team: str | None) -> str:
    """The LocalQueue (in the team's namespace) that feeds the ClusterQueue of the stage's queue."""
    queue = fleet.queue_for(stage, team)
    if queue is None:
        fix = f"add a queue with stage: {stage} to the fleet (spec.queues)"
        raise SpecError(
            [
                Problem(
                    f"fleet {fleet.name}",
                    "spec.queues",
                    f"no queue for stage {stage}",
                    None,
                    fix,
                    code=ProblemCode.INFEASIBLE,
                )
            ]
        )
    return fleet.spec.kubernetes.local_queue_prefix + queue.name


def flavor_name(pool: Pool) -> str:
    return pool.kubernetes.flavor if pool.kubernetes and pool.kubernetes.flavor else pool.name


def _resource(pool: Pool) -> str:
    # CPU pools are counted in CPUs: crossrail's chips on a CPU pool are cores.
    return accelerator_resource(pool) or "cpu"


def kubernetes_pools(fleet: Fleet) -> list[Pool]:
    """The pools Kueue admits to (`backend: kubernetes`); SpecError when none is, or two share a flavor."""
    pools = [p for p in fleet.pools if p.backend == "kubernetes"]
    source = f"fleet {fleet.name}"
    if not pools:
        fix = "set backend: kubernetes on the pools that are GKE node pools"
        raise SpecError(
            [Problem(source, "spec.pools", "no pool has backend: kubernetes", None, fix, code=ProblemCode.INFEASIBLE)]
        )
    seen: dict[str, str] = {}
    for pool in pools:
        other = seen.setdefault(flavor_name(pool), pool.name)
        if other != pool.name:
            path = f"spec.pools[{fleet.pool_names.index(pool.name)}].kubernetes.flavor"
            message = f"flavor {flavor_name(pool)!r} is pool {other}'s too"
            raise SpecError(
                [Problem(source, path, message, None, "give each pool its own flavor", code=ProblemCode.UNSUPPORTED)]
            )
    return pools


def render_kueue(fleet: Fleet, api: str = KUEUE_API_DEFAULT, cluster: str | None = None) -> list[dict[str, Any]]:
    """Every object for the fleet's Kubernetes pools in Kueue API `api` (v1beta1 or v1beta2): namespaces,
    then cluster-scoped Kueue objects, then LocalQueues (apply in this order).

    In a fleet of several clusters, the manager's objects; `cluster` names a worker to render its own."""
    if api not in KUEUE_APIS:
        message = f"{api!r} is not a Kueue API version crossrail renders"
        raise SpecError(
            [
                Problem(
                    f"fleet {fleet.name}",
                    "--kueue-api",
                    message,
                    None,
                    "use v1beta1 or v1beta2",
                    code=ProblemCode.BAD_VALUE,
                )
            ]
        )
    pools = _cluster_pools(fleet, cluster)
    manager = bool(fleet.spec.clusters) and cluster is None
    cohorts = sorted({q.cohort for q in fleet.queues if q.cohort})
    objects = [_namespace(fleet, ns) for ns in namespaces(fleet) if ns != "default"]
    objects.append(
        _obj(api, "Topology", {"name": TOPOLOGY_NAME}, {"levels": [{"nodeLabel": n} for n in TOPOLOGY_LEVELS]})
    )
    objects += [_flavor(fleet, pool, api) for pool in pools]
    objects += [_obj(api, "Cohort", {"name": c}, {}) for c in cohorts]
    objects += [_priority(name, value, api) for name, value in PRIORITIES.items()]
    if manager:
        objects += multikueue(fleet, api)
    else:
        objects += provisioning(pools, api)
    objects += [_cluster_queue(fleet, q, api, pools, manager=manager) for q in fleet.queues]
    objects += _local_queues(fleet, api)
    return objects


def _cluster_pools(fleet: Fleet, cluster: str | None) -> list[Pool]:
    """The Kubernetes pools of `cluster` (every one when None); SpecError naming the clusters for an unknown one."""
    pools = kubernetes_pools(fleet)
    if cluster is None:
        return pools
    names = [c.name for c in fleet.spec.clusters]
    if cluster not in names:
        fix = f"clusters are {', '.join(names)}" if names else "the fleet declares no spec.clusters"
        raise SpecError(
            [
                Problem(
                    f"fleet {fleet.name}",
                    "--cluster",
                    f"unknown cluster {cluster!r}",
                    None,
                    fix,
                    code=ProblemCode.BAD_VALUE,
                )
            ]
        )
    return [p for p in pools if p.cluster == cluster]


def provisioning_check(pool: Pool) -> str:
    """The AdmissionCheck (and ProvisioningRequestConfig) of a pool whose nodes are provisioned on demand."""
    return f"crossrail-provision-{flavor_name(pool)}"


def provisioning(pools: list[Pool], api: str) -> list[dict[str, Any]]:
    """A ProvisioningRequestConfig and its AdmissionCheck for each pool with `provisioning`.

    flex-start nodes live at most `max_run_duration` (default GKE's 7 days), passed to the ProvisioningRequest
    as `maxRunDurationSeconds`; Kueue asks for the flavor's accelerator only (`managedResources`)."""
    out = []
    for pool in pools:
        if pool.provisioning is None:
            continue
        name = provisioning_check(pool)
        spec: dict[str, Any] = {
            "provisioningClassName": PROVISIONING_CLASSES[pool.provisioning],
            "managedResources": [_resource(pool)],
        }
        if pool.run_limit_s is not None:
            spec["parameters"] = {"maxRunDurationSeconds": str(int(pool.run_limit_s))}
        labels = {"crossrail.dev/pool": pool.name}
        out.append(_obj(api, "ProvisioningRequestConfig", {"name": name, "labels": labels}, spec))
        params = {"apiGroup": KUEUE_GROUP, "kind": "ProvisioningRequestConfig", "name": name}
        check = {"controllerName": PROVISIONING_CONTROLLER, "parameters": params}
        out.append(_obj(api, "AdmissionCheck", {"name": name, "labels": labels}, check))
    return out


def multikueue(fleet: Fleet, api: str) -> list[dict[str, Any]]:
    """The manager's MultiKueue objects: a MultiKueueCluster per worker (its kubeconfig Secret, in Kueue's
    namespace), one MultiKueueConfig naming them all and the AdmissionCheck every ClusterQueue runs."""
    out = []
    for cluster in fleet.spec.clusters:
        kubeconfig = {"locationType": "Secret", "location": cluster.secret}
        spec = {"kubeConfig": kubeconfig} if api == "v1beta1" else {"clusterSource": {"kubeConfig": kubeconfig}}
        out.append(_obj(api, "MultiKueueCluster", {"name": cluster.name}, spec))
    clusters = [c.name for c in fleet.spec.clusters]
    out.append(_obj(api, "MultiKueueConfig", {"name": MULTIKUEUE_CONFIG}, {"clusters": clusters}))
    params = {"apiGroup": KUEUE_GROUP, "kind": "MultiKueueConfig", "name": MULTIKUEUE_CONFIG}
    check = {"controllerName": MULTIKUEUE_CONTROLLER, "parameters": params}
    out.append(_obj(api, "AdmissionCheck", {"name": MULTIKUEUE_CHECK}, check))
    return out


def _namespace(fleet: Fleet, ns: str) -> dict[str, Any]:
    k8s = fleet.spec.kubernetes
    teams = sorted(
        {t for t in {t for q in fleet.queues for t in q.teams} | set(k8s.team_namespaces) if namespace(fleet, t) == ns}
    )
    meta: dict[str, Any] = {"name": ns, "labels": {"crossrail.dev/managed": "true"}}
    if teams:
        meta["annotations"] = {"crossrail.dev/teams": ",".join(teams)}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def _obj(api: str, kind: str, metadata: dict[str, Any], spec: dict[str, Any] | None) -> dict[str, Any]:
    metadata = {**metadata, "annotations": {"crossrail.dev/kueue-version": KUEUE_RELEASE}}
    obj: dict[str, Any] = {"apiVersion": f"{KUEUE_GROUP}/{api}", "kind": kind, "metadata": metadata}
    if spec is not None:
        obj["spec"] = spec
    return obj


def _flavor(fleet: Fleet, pool: Pool, api: str) -> dict[str, Any]:
    labels = {"crossrail.dev/pool": pool.name, "crossrail.dev/accelerator": str(pool.accelerator)}
    spec: dict[str, Any] = {"nodeLabels": gke_selectors(fleet, pool)}
    if topology_aware(pool):
        spec["topologyName"] = TOPOLOGY_NAME
    return _obj(api, "ResourceFlavor", {"name": flavor_name(pool), "labels": labels}, spec)


def topology_aware(pool: Pool) -> bool:
    """Whether the pool's flavor is a topology-aware one: TPU pools (always GKE's nodes, whose labels the
    Topology's levels are), so every pod set that lands on it asks for a topology (a slice's node pool); and
    GPU pools on GKE that opt in (`kubernetes.topology`), whose every pod set asks for one too (render/kubernetes.py
    gpu_topology).

    A ClusterQueue with a TAS flavor and a plain one is mixed, and Kueue then passes a TAS flavor over for
    a pod set that asks for no topology and a plain one for a pod set that does
    (crossrail.executors.render.admission.Kueue.tas_problem): other GPU and CPU flavors stay plain, so their
    Jobs and TrainJobs are admitted in any queue.
    """
    gke = pool.kubernetes is None or pool.kubernetes.gke
    opted = pool.accelerator == "gpu" and pool.kubernetes is not None and pool.kubernetes.topology is not None
    return gke and (pool.accelerator == "tpu" or opted)


def exclusions(fleet: Fleet, pool: Pool) -> list[dict[str, Any]]:
    """Node-affinity expressions that keep the pool's pods off every other flavor of the same resource.

    Kueue matches a pod set to a flavor on the flavor's own label keys only (admission._selector_matches):
    a pod selecting `gke-accelerator: nvidia-h100-80gb` matches a spot H100 flavor or a flavor whose only
    label is a team's own. For each such flavor one `NotIn` on a label the pool's nodes lack rules it out,
    for Kueue and kube-scheduler alike. A flavor whose labels are all the pool's own is listed after it
    (_cluster_queue orders the most specific first).
    """
    own = gke_selectors(fleet, pool)
    apart: dict[str, set[str]] = {}
    for other in (p for p in fleet.pools if p.backend == "kubernetes"):
        if other.name == pool.name or _resource(other) != _resource(pool):
            continue
        try:
            labels = gke_selectors(fleet, other)
        except SpecError:
            continue  # refused where that pool renders
        if any(key in own and own[key] != value for key, value in labels.items()):
            continue  # the node selector already tells them apart
        extra = sorted((key, value) for key, value in labels.items() if key not in own)
        if extra:
            apart.setdefault(extra[0][0], set()).add(extra[0][1])
    return [{"key": key, "operator": "NotIn", "values": sorted(values)} for key, values in sorted(apart.items())]


def _priority(name: str, value: int, api: str) -> dict[str, Any]:
    obj = _obj(api, "WorkloadPriorityClass", {"name": f"crossrail-{name}"}, None)
    return {**obj, "value": value, "description": f"crossrail priority {name}"}


def _cluster_queue(
    fleet: Fleet, queue: Queue, api: str, pools: list[Pool] | None = None, *, manager: bool = False
) -> dict[str, Any]:
    # A pool outside the quota gets nominal quota 0 in a cohort (so the queue can borrow it) and is left
    # out otherwise. Flavors covering the same resource form one resource group, as Kueue requires; Kueue
    # tries a group's flavors in order, so spot ones come before on-demand ones of the same resource.
    groups: dict[str, list[dict[str, Any]]] = {}
    pools = sorted(
        kubernetes_pools(fleet) if pools is None else pools,
        key=lambda p: (not p.spot, -len(gke_selectors(fleet, p))),  # spot first, then the most specific
    )
    checks: list[dict[str, Any]] = []
    for pool in pools:
        if pool.name not in queue.quota and queue.cohort is None:
            continue
        amount: dict[str, Any] = {"name": _resource(pool), "nominalQuota": queue.quota.get(pool.name, 0)}
        if pool.name in queue.borrowing_limit:
            amount["borrowingLimit"] = queue.borrowing_limit[pool.name]
        if pool.name in queue.lending_limit:
            amount["lendingLimit"] = queue.lending_limit[pool.name]
        groups.setdefault(_resource(pool), []).append({"name": flavor_name(pool), "resources": [amount]})
        if pool.provisioning is not None and not manager:
            checks.append({"name": provisioning_check(pool), "onFlavors": [flavor_name(pool)]})
    if manager:  # MultiKueue dispatches every workload of the queue to a worker cluster
        checks = [{"name": MULTIKUEUE_CHECK}]
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "queueingStrategy": _QUEUEING[queue.queueing],
        "resourceGroups": [{"coveredResources": [r], "flavors": flavors} for r, flavors in groups.items()],
        "preemption": {
            "withinClusterQueue": "LowerPriority",
            "reclaimWithinCohort": "Any" if queue.cohort else "Never",
            "borrowWithinCohort": {"policy": "Never"},
        },
    }
    if queue.cohort:
        spec[_COHORT_FIELD[api]] = queue.cohort
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": checks}
    labels = {"crossrail.dev/stage": str(queue.stage)}
    if queue.teams:  # a label value holds no commas: the teams are joined with dots (team names have none)
        labels["crossrail.dev/team"] = ".".join(queue.teams)
    return _obj(api, "ClusterQueue", {"name": queue.name, "labels": labels}, spec)


def namespaces(fleet: Fleet) -> list[str]:
    """Every namespace crossrail submits to: the default one and each team's."""
    k8s = fleet.spec.kubernetes
    teams = {t for q in fleet.queues for t in q.teams} | set(k8s.team_namespaces)
    return sorted({k8s.namespace} | {namespace(fleet, t) for t in teams})


def _local_queues(fleet: Fleet, api: str) -> list[dict[str, Any]]:
    """A teams' queue in each of their namespaces; a team-less queue in every namespace."""
    k8s = fleet.spec.kubernetes
    out = []
    for queue in fleet.queues:
        where = sorted({namespace(fleet, t) for t in queue.teams}) if queue.teams else namespaces(fleet)
        for ns in where:
            meta = {"name": k8s.local_queue_prefix + queue.name, "namespace": ns}
            out.append(_obj(api, "LocalQueue", meta, {"clusterQueue": queue.name}))
    return out
