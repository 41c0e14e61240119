"""Would Kueue admit this workload, and onto which flavor? The rules of Kueue's flavor assignment that
decide it for what crossrail renders, in Python, each citing the upstream source it encodes.

Upstream: kubernetes-sigs/kueue at commit ff69552e79ad21652c36caa97038382e55625cf7 (main just after the
v0.19.2 release, the commit schemas/crds/ was copied from; schemas/crds/SOURCES.md). Each rule names its
file and lines there, and tests/unit/render/test_kueue_admission.py feeds it the upstream test case it
encodes, written as the objects crossrail renders.

The check answers for an empty cluster: quota is what the ClusterQueues declare, nothing is in use, so
"admitted" means the workload's pod sets find a flavor whose labels, taints, topology and quota fit, and
"onto which flavor" is the one Kueue's search stops at. Preemption, fair sharing, admission checks and
node capacity (which TAS checks against real nodes) are outside it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

KUEUE_COMMIT = "ff69552e79ad21652c36caa97038382e55625cf7"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TAS_ANNOTATIONS = (
    "kueue.x-k8s.io/podset-required-topology",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kueue.x-k8s.io/podset-unconstrained-topology",
    "kueue.x-k8s.io/podset-slice-required-topology",
    "kueue.x-k8s.io/podset-slice-size",
)
"""The pod-template annotations that make a pod set request TAS explicitly: jobframework/tas.go lines 62-68
read them into the PodSetTopologyRequest, and pkg/workload/workload.go lines 535-541
(IsExplicitlyRequestingTAS) counts a request with any of them set."""
_LEVEL_ANNOTATIONS = TAS_ANNOTATIONS[:2] + TAS_ANNOTATIONS[3:4]
_QUANTITY = re.compile(r"^([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_SCALE = {None: 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


@dataclass(frozen=True)
class PodSet:
    """One pod set of a Kueue Workload: `count` pods of `template` (a PodTemplateSpec)."""

    name: str
    count: int
    template: dict[str, Any]

    @property
    def annotations(self) -> dict[str, str]:
        return dict((self.template.get("metadata") or {}).get("annotations") or {})

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.template.get("spec") or {})

    def requests(self) -> dict[str, float]:
        """The pod's requests, summed over its containers (a limit alone counts as its request, as
        Kubernetes defaults it): resources.NewRequestsFromPodSpec."""
        total: dict[str, float] = {}
        for container in self.spec.get("containers") or []:
            res = container.get("resources") or {}
            asked = {**(res.get("limits") or {}), **(res.get("requests") or {})}
            for name, amount in asked.items():
                total[name] = total.get(name, 0.0) + quantity(amount)
        return total


@dataclass
class KueueAdmission:
    """Kueue's answer: the ClusterQueue, the flavor each pod set's each resource got (None: it found none),
    and why each flavor considered was passed over."""

    cluster_queue: str | None
    flavors: dict[str, dict[str, str | None]] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    @property
    def admitted(self) -> bool:
        return self.cluster_queue is not None and all(
            f is not None for resources in self.flavors.values() for f in resources.values()
        )

    def flavor_set(self) -> set[str | None]:
        return {f for resources in self.flavors.values() for f in resources.values()}


def quantity(value: Any) -> float:
    """A Kubernetes quantity ("8", "500m", "16Gi") as a number."""
    if isinstance(value, int | float):
        return float(value)
    found = _QUANTITY.match(str(value).strip())
    if found is None:
        raise ValueError(f"{value!r} is not a quantity crossrail reads")
    return float(found.group(1)) * _SCALE[found.group(2)]


def pod_sets(workload: dict[str, Any]) -> list[PodSet]:
    """The pod sets Kueue's integration makes of a Job, JobSet or TrainJob.

    Job: one pod set of `parallelism` pods (pkg/controller/jobs/job/job_controller.go lines 355-372).
    JobSet: one per ReplicatedJob, replicas x parallelism pods (jobs/jobset/jobset_controller.go lines
    114-135, podsCount). TrainJob: the runtime's `node` job with the TrainJob's runtime patch and
    `trainer.resourcesPerNode` applied, numNodes pods (jobs/trainjob, through Trainer's JobSet).
    """
    kind = workload.get("kind")
    spec = workload.get("spec") or {}
    if kind == "Job":
        return [PodSet("main", int(spec.get("parallelism", 1)), spec["template"])]
    if kind == "JobSet":
        out = []
        for job in spec.get("replicatedJobs") or []:
            inner = job["template"]["spec"]
            count = int(job.get("replicas", 1)) * int(inner.get("parallelism", 1))
            out.append(PodSet(job["name"], count, inner["template"]))
        return out
    if kind == "TrainJob":
        trainer = spec.get("trainer") or {}
        out = []
        for patch in spec.get("runtimePatches") or []:
            jobs = patch.get("trainingRuntimeSpec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", [])
            for job in jobs:
                template = job["template"]["spec"]["template"]
                pod = dict(template.get("spec") or {})
                container = {"name": job["name"], "resources": trainer.get("resourcesPerNode") or {}}
                pod["containers"] = [container]
                out.append(PodSet(job["name"], int(trainer.get("numNodes", 1)), {**template, "spec": pod}))
        return out
    raise ValueError(f"{kind!r} is not a workload kind Kueue admits here")


class Kueue:
    """The Kueue objects of a fleet (crossrail.executors.render.kueue.render_kueue), indexed."""

    def __init__(self, objects: Iterable[dict[str, Any]]) -> None:
        self.flavors: dict[str, dict[str, Any]] = {}
        self.cluster_queues: dict[str, dict[str, Any]] = {}
        self.local_queues: dict[tuple[str, str], str] = {}
        self.topologies: dict[str, list[str]] = {}
        for obj in objects:
            kind, meta, spec = obj.get("kind"), obj.get("metadata") or {}, obj.get("spec") or {}
            if kind == "ResourceFlavor":
                self.flavors[meta["name"]] = spec
            elif kind == "ClusterQueue":
                self.cluster_queues[meta["name"]] = spec
            elif kind == "LocalQueue":
                self.local_queues[(meta.get("namespace", "default"), meta["name"])] = spec["clusterQueue"]
            elif kind == "Topology":
                self.topologies[meta["name"]] = [level["nodeLabel"] for level in spec.get("levels") or []]

    def tas_flavor(self, name: str) -> bool:
        return bool(self.flavors.get(name, {}).get("topologyName"))

    def tas_only(self, cq: dict[str, Any]) -> bool:
        """Every flavor of every resource group is a TAS flavor.

        pkg/cache/scheduler/clusterqueue.go lines 746-755 (isTASOnly); the snapshot keeps it as tasOnly
        (pkg/cache/scheduler/snapshot.go line 327).
        """
        return all(self.tas_flavor(f["name"]) for group in cq.get("resourceGroups") or [] for f in group["flavors"])

    def admit(self, workload: dict[str, Any]) -> KueueAdmission:
        """Where Kueue would put `workload` (a suspended Job, JobSet or TrainJob) in an empty cluster."""
        meta = workload.get("metadata") or {}
        local = (meta.get("labels") or {}).get(QUEUE_LABEL)
        cq_name = self.local_queues.get((meta.get("namespace", "default"), str(local)))
        if cq_name is None or cq_name not in self.cluster_queues:
            where = f"{meta.get('namespace', 'default')}/{local}"
            return KueueAdmission(None, reasons=[f"LocalQueue {where} does not exist"])
        cq = self.cluster_queues[cq_name]
        answer = KueueAdmission(cq_name)
        for podset in pod_sets(workload):
            answer.flavors[podset.name] = self._assign(cq_name, cq, podset, answer.reasons)
        return answer

    def _assign(self, cq_name: str, cq: dict[str, Any], podset: PodSet, reasons: list[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        requests = {r: v for r, v in podset.requests().items() if v > 0}
        for resource, amount in requests.items():
            # flavorassigner.go lines 1073-1076: a resource no resource group covers is not admitted.
            group = next((g for g in cq.get("resourceGroups") or [] if resource in g["coveredResources"]), None)
            if group is None:
                reasons.append(f"{podset.name}: resource {resource} unavailable in ClusterQueue")
                out[resource] = None
                continue
            out[resource] = self._search(cq_name, cq, group, podset, (resource, amount * podset.count), reasons)
        return out

    def _search(  # noqa: PLR0917 -- the scheduler's state for one pod set's one resource
        self,
        cq_name: str,
        cq: dict[str, Any],
        group: dict[str, Any],
        podset: PodSet,
        asked: tuple[str, float],
        reasons: list[str],
    ) -> str | None:
        """Flavors in the order the ClusterQueue lists them; the first that matches and fits stops the
        search, borrowing included (flavorassigner.go lines 1091-1093 and shouldTryNextFlavor, lines
        1263-1280, with the defaults whenCanBorrow: MayStopSearch, whenCanPreempt: TryNextFlavor,
        apis/kueue/v1beta2/clusterqueue_types.go lines 456-478)."""
        resource, total = asked
        for entry in group["flavors"]:
            name = str(entry["name"])
            problem = self.flavor_problem(cq, group, podset, name)
            if problem is None:
                problem = self._quota_problem(cq_name, cq, name, resource, total)
            if problem is None:
                return name
            reasons.append(f"{podset.name}: {problem}")
        return None

    def flavor_problem(self, cq: dict[str, Any], group: dict[str, Any], podset: PodSet, name: str) -> str | None:
        """Why flavor `name` does not match the pod set, or None (flavorassigner.go checkFlavorForPodSets,
        lines 1212-1261: TAS first, then taints, then node labels)."""
        flavor = self.flavors.get(name)
        if flavor is None:
            return f"flavor {name} not found"
        tas = self.tas_problem(cq, group, podset, name)
        if tas is not None:
            return tas
        spec = podset.spec
        tolerations = list(spec.get("tolerations") or []) + list(flavor.get("tolerations") or [])
        for taint in flavor.get("nodeTaints") or []:
            # lines 1243-1249: a NoSchedule or NoExecute taint the pod does not tolerate.
            blocks = taint.get("effect") in ("NoSchedule", "NoExecute")
            if blocks and not any(_tolerates(t, taint) for t in tolerations):
                return f"untolerated taint {taint.get('key')} in flavor {name}"
        if not _selector_matches(spec, dict(flavor.get("nodeLabels") or {})):
            return f"flavor {name} doesn't match node affinity"
        return None

    def tas_problem(  # noqa: PLR0911 -- one return per upstream outcome
        self, cq: dict[str, Any], group: dict[str, Any], podset: PodSet, name: str
    ) -> str | None:
        """pkg/scheduler/flavorassigner/tas_flavorassigner.go lines 168-211 (checkPodSetAndFlavorMatchForTAS),
        with isTASImplied and isTASRequested (lines 219-228)."""
        explicit = any(key in podset.annotations for key in TAS_ANNOTATIONS)
        implied = not explicit and self.tas_only(cq)
        flavor = self.flavors[name]
        if explicit or implied:
            if implied:
                return None  # a TAS-only ClusterQueue: every flavor is a TAS one
            if not flavor.get("topologyName"):
                if not set(podset.requests()) & set(group["coveredResources"]):
                    return None  # a quota-only flavor for resources the TAS flavor does not provide
                return f'Flavor "{name}" does not support TopologyAwareScheduling'
            levels = self.topologies.get(flavor["topologyName"])
            if levels is None:
                return f'Flavor "{name}" information missing in TAS cache'
            asked = [podset.annotations[k] for k in _LEVEL_ANNOTATIONS if k in podset.annotations]
            if any(level not in levels for level in asked):
                return f'Flavor "{name}" does not contain the requested level'
            return None
        if flavor.get("topologyName"):
            return f'Flavor "{name}" supports only TopologyAwareScheduling'
        return None

    def _quota_problem(self, cq_name: str, cq: dict[str, Any], flavor: str, resource: str, total: float) -> str | None:
        """Nominal quota, else what the cohort lends within the borrowing limit (fitsResourceQuota,
        flavorassigner.go lines 1334-1385), with nothing in use."""
        own = _quota(cq, flavor, resource)
        nominal = quantity(own.get("nominalQuota", 0)) if own else 0.0
        if total <= nominal:
            return None
        cohort = cq.get("cohortName") or cq.get("cohort")
        if cohort and own:
            lent = 0.0
            for other_name, other in self.cluster_queues.items():
                if other_name == cq_name or (other.get("cohortName") or other.get("cohort")) != cohort:
                    continue
                theirs = _quota(other, flavor, resource)
                if theirs:
                    limit = theirs.get("lendingLimit", theirs.get("nominalQuota", 0))
                    lent += min(quantity(limit), quantity(theirs.get("nominalQuota", 0)))
            borrowable = lent if "borrowingLimit" not in own else min(lent, quantity(own["borrowingLimit"]))
            if total <= nominal + borrowable:
                return None
        return f"insufficient quota for {resource} in flavor {flavor}: {total:g} asked, {nominal:g} nominal"


def _quota(cq: dict[str, Any], flavor: str, resource: str) -> dict[str, Any] | None:
    for group in cq.get("resourceGroups") or []:
        for entry in group["flavors"]:
            if entry["name"] == flavor:
                return next((r for r in entry["resources"] if r["name"] == resource), None)
    return None


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """k8s.io/api core/v1 Toleration.ToleratesTaint."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return bool(toleration.get("key")) and toleration.get("value", "") == taint.get("value", "")


def _selector_matches(spec: dict[str, Any], labels: dict[str, str]) -> bool:
    """The pod's node selector and required node affinity, cut to the flavor's own label keys, against the
    flavor's labels (flavorSelector, flavorassigner.go lines 1282-1332; the keys, lines 1228-1231)."""
    keys = set(labels)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if key in keys and labels[key] != value:
            return False
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not affinity:
        return True
    terms = []
    for term in affinity.get("nodeSelectorTerms") or []:
        kept = [e for e in term.get("matchExpressions") or [] if e["key"] in keys]
        if not kept:  # a term left empty matches any flavor (the terms are ORed)
            return True
        terms.append(kept)
    return any(all(_expression(e, labels) for e in term) for term in terms)


def _expression(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    op, key, values = expr["operator"], expr["key"], expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError(f"node selector operator {op!r} is not one crossrail renders")
