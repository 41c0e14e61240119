"""Would Kueue admit it, and onto which flavor? crossrail.executors.render.admission encodes the rules of
Kueue's flavor assignment (kubernetes-sigs/kueue at ff69552); each rule is fed here the upstream test case
it encodes, written as the objects crossrail renders, and must give Kueue's answer. Then every render of a
fleet that mixes TPU, GPU, CPU and non-GKE pools in its queues is checked: admitted, onto its own pool's
flavor."""

from __future__ import annotations

from typing import Any

import pytest

from crossrail.executors.render.admission import Kueue, pod_sets
from crossrail.executors.render.kubernetes import render_kubernetes
from crossrail.executors.render.kueue import flavor_name, render_kueue
from crossrail.executors.render.workload import from_experiment
from crossrail.spec import Fleet, parse_document, parse_fleet

from .builders import experiment
from .conftest import assert_valid

HOSTNAME = "kubernetes.io/hostname"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"


# --- the upstream cases, as objects ---------------------------------------------------------------------------


def _flavor(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"kind": "ResourceFlavor", "metadata": {"name": name}, "spec": {"nodeLabels": labels or {}, **spec}}


def _queue(flavors: list[tuple[str, dict[str, str]]], resource: str = "cpu", **spec: Any) -> list[dict[str, Any]]:
    """A ClusterQueue `main` of one resource group (flavor, quota per resource) and its LocalQueue."""
    group = {
        "coveredResources": sorted({r for _, quota in flavors for r in quota}) or [resource],
        "flavors": [{"name": f, "resources": [{"name": r, **q} for r, q in [*quota.items()]]} for f, quota in flavors],
    }
    cq = {"kind": "ClusterQueue", "metadata": {"name": "main"}, "spec": {"resourceGroups": [group], **spec}}
    lq = {"kind": "LocalQueue", "metadata": {"name": "main", "namespace": "default"}, "spec": {"clusterQueue": "main"}}
    return [cq, lq]


def _quota(nominal: str, **limits: str) -> dict[str, Any]:
    return {"nominalQuota": nominal, **limits}


def _job(requests: dict[str, str], annotations: dict[str, str] | None = None, **pod: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "i", "resources": {"requests": requests}}
    template = {"metadata": {"annotations": annotations or {}}, "spec": {"containers": [container], **pod}}
    meta = {"name": "foo", "namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": "main"}}
    return {"kind": "Job", "metadata": meta, "spec": {"parallelism": 1, "template": template}}


ONE_LEVEL = {
    "kind": "Topology",
    "metadata": {"name": "tas-single-level"},
    "spec": {"levels": [{"nodeLabel": HOSTNAME}]},
}
TAS_DEFAULT = _flavor("tas-default", {"tas-node": "true"}, topologyName="tas-single-level")
DEFAULT = _flavor("default")
CPU50 = {"cpu": _quota("50")}


def _admit(objects: list[dict[str, Any]], job: dict[str, Any]) -> str | None:
    answer = Kueue(objects).admit(job)
    (flavor,) = answer.flavor_set()
    return flavor


def test_a_pod_set_asking_for_no_topology_skips_the_tas_flavor() -> None:
    # pkg/scheduler/scheduler_tas_test.go:1919 "workload which does not need TAS skips the TAS flavor"
    objects = [ONE_LEVEL, TAS_DEFAULT, DEFAULT, *_queue([("tas-default", CPU50), ("default", CPU50)])]
    answer = Kueue(objects).admit(_job({"cpu": "1"}))
    assert answer.flavors == {"main": {"cpu": "default"}}
    assert 'main: Flavor "tas-default" supports only TopologyAwareScheduling' in answer.reasons


def test_a_pod_set_requiring_a_topology_skips_the_plain_flavor() -> None:
    # scheduler_tas_test.go:1879 "workload requiring TAS skips the non-TAS flavor"
    objects = [ONE_LEVEL, TAS_DEFAULT, DEFAULT, *_queue([("default", CPU50), ("tas-default", CPU50)])]
    answer = Kueue(objects).admit(_job({"cpu": "1"}, {REQUIRED: HOSTNAME}))
    assert answer.flavors == {"main": {"cpu": "tas-default"}}
    assert 'main: Flavor "default" does not support TopologyAwareScheduling' in answer.reasons


def test_a_tas_only_queue_implies_a_topology() -> None:
    # scheduler_tas_test.go:1844 "workload which does not specify TAS annotation uses the only TAS flavor"
    objects = [ONE_LEVEL, TAS_DEFAULT, *_queue([("tas-default", CPU50)])]
    assert _admit(objects, _job({"cpu": "1"})) == "tas-default"


def test_a_level_the_topology_lacks_is_not_admitted() -> None:
    # scheduler_tas_test.go:2034 "workload requests topology level which is not present in topology"
    objects = [ONE_LEVEL, TAS_DEFAULT, *_queue([("tas-default", CPU50)])]
    answer = Kueue(objects).admit(_job({"cpu": "1"}, {REQUIRED: "cloud.com/non-existing"}))
    assert not answer.admitted
    assert answer.reasons == ['main: Flavor "tas-default" does not contain the requested level']


def test_an_untolerated_taint_skips_the_flavor() -> None:
    # pkg/scheduler/flavorassigner/flavorassigner_test.go:914 "multiple flavors, fits while skipping tainted flavor"
    taint = {"key": "instance", "value": "spot", "effect": "NoSchedule"}
    objects = [_flavor("tainted", nodeTaints=[taint]), _flavor("two", {"type": "two"})]
    objects += _queue([("tainted", {"cpu": _quota("4")}), ("two", {"cpu": _quota("4")})])
    assert _admit(objects, _job({"cpu": "3"})) == "two"
    tolerated = [{"key": "instance", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}]
    assert _admit(objects, _job({"cpu": "3"}, tolerations=tolerated)) == "tainted"


def test_the_node_selector_picks_the_flavor_on_its_own_keys() -> None:
    # flavorassigner_test.go:955 "multiple flavors, fits a node selector" (ignored1 and ignored2 are no flavor's)
    objects = [_flavor("one", {"type": "one"}), _flavor("two", {"type": "two"})]
    objects += _queue([("one", {"cpu": _quota("4")}), ("two", {"cpu": _quota("4")})])
    ignored = {"matchExpressions": [{"key": "ignored2", "operator": "In", "values": ["bar"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [ignored]}}}
    job = _job({"cpu": "1"}, nodeSelector={"type": "two", "ignored1": "foo"}, affinity=affinity)
    answer = Kueue(objects).admit(job)
    assert answer.flavors == {"main": {"cpu": "two"}}
    assert answer.reasons == ["main: flavor one doesn't match node affinity"]


def test_a_flavor_is_matched_on_its_own_keys_only() -> None:
    # flavorassigner_test.go:1142 "... selector only uses flavor's own keys" and 1179 "labelless flavor in group
    # with labeled flavor": a flavor lacking a key the pod selects matches it, so the first in order wins.
    objects = [_flavor("label-x-a", {"x": "a"}), _flavor("label-xy-b", {"x": "b", "y": "g"})]
    objects += _queue([("label-x-a", {"cpu": _quota("4")}), ("label-xy-b", {"cpu": _quota("4")})])
    assert _admit(objects, _job({"cpu": "1"}, nodeSelector={"x": "a", "y": "g"})) == "label-x-a"
    objects = [DEFAULT, _flavor("two", {"type": "two"}), *_queue([("default", CPU50), ("two", CPU50)])]
    assert _admit(objects, _job({"cpu": "1"}, nodeSelector={"type": "two"})) == "default"


def test_borrowing_stops_the_search_and_a_missing_resource_is_not_admitted() -> None:
    # flavorassigner_test.go:2276 "borrow before try next flavor" (nothing in use here: 9 of 10 + 1 lent fit)
    objects = [_flavor("one", {"type": "one"}), _flavor("two", {"type": "two"})]
    objects += _queue(
        [("one", {"cpu": _quota("5", borrowingLimit="4")}), ("two", {"cpu": _quota("10")})], cohortName="test-cohort"
    )
    secondary = _queue([("one", {"cpu": _quota("4")})], cohortName="test-cohort")[0]
    objects.append({**secondary, "metadata": {"name": "secondary"}})
    assert _admit(objects, _job({"cpu": "9"})) == "one"
    assert _admit(objects, _job({"cpu": "10"})) == "two"  # over the borrowing limit: the next flavor
    # flavorassigner.go:1073-1076: a resource no resource group covers
    answer = Kueue(objects).admit(_job({"nvidia.com/gpu": "1"}))
    assert not answer.admitted
    assert answer.reasons == ["main: resource nvidia.com/gpu unavailable in ClusterQueue"]


# --- every render of a mixed fleet ------------------------------------------------------------------------------

MIXED_FLEET = """
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: mixed}
spec:
  kubernetes: {team_namespaces: {alignment: alignment}}
  pools:
    - {name: v4, accelerator: tpu, chip_type: tpu-v4, chips: 128, chips_per_host: 4, backend: kubernetes,
       topologies: [2x2x1, 2x2x2, 2x4x4, 4x4x8]}
    - {name: v5e, accelerator: tpu, chip_type: tpu-v5-lite-podslice, chips: 64, chips_per_host: 4,
       backend: kubernetes, topologies: [2x2, 4x4, 4x8]}
    - {name: v5e-8, accelerator: tpu, chip_type: v5e, chips: 16, chips_per_host: 8, backend: kubernetes,
       topologies: [2x4], kubernetes: {node_pool: v5e-8t}}
    - {name: v5p, accelerator: tpu, chip_type: tpu-v5p, chips: 256, chips_per_host: 4, backend: kubernetes,
       topologies: [2x2x1, 2x2x4, 4x4x4]}
    - {name: v6e, accelerator: tpu, chip_type: v6e, chips: 256, chips_per_host: 4, backend: kubernetes,
       topologies: [2x2, 4x4, 8x8, 16x16]}
    - {name: h100, accelerator: gpu, chip_type: h100, chips: 16, chips_per_host: 8, backend: kubernetes}
    - {name: h100-spot, accelerator: gpu, chip_type: h100, chips: 16, chips_per_host: 8, backend: kubernetes,
       kubernetes: {spot: true}}
    - {name: h200, accelerator: gpu, chip_type: nvidia-h200, chips: 16, chips_per_host: 8, backend: kubernetes}
    - {name: a100, accelerator: gpu, chip_type: a100-80gb, chips: 16, chips_per_host: 8, backend: kubernetes,
       kubernetes: {node_pool: a100-pool}}
    - {name: l4, accelerator: gpu, chip_type: l4, chips: 8, chips_per_host: 4, backend: kubernetes}
    - {name: onprem, accelerator: gpu, chip_type: h100, chips: 16, chips_per_host: 8, backend: kubernetes,
       kubernetes: {gke: false, node_selector: {acme.dev/site: onprem}}}
    - {name: cpu, accelerator: cpu, chip_type: n2-standard-32, chips: 64, chips_per_host: 32, backend: kubernetes}
    - {name: ray-h100, accelerator: gpu, chip_type: h100, chips: 16, chips_per_host: 8, backend: ray,
       ray: {address: "10.0.0.2:6379"}}
  queues:
    - {name: pretraining, stage: pretraining, cohort: all, quota: {v4: 128, v5p: 256, h100: 16, cpu: 32}}
    - {name: post-training, stage: post_training, cohort: all, quota: {h100-spot: 16, h200: 16, onprem: 16}}
    - {name: alignment-post, stage: post_training, team: alignment, cohort: all, quota: {a100: 16}}
    - {name: rl, stage: reinforcement_learning, cohort: all, quota: {v6e: 256, l4: 8, ray-h100: 16}}
    - {name: inference, stage: inference, cohort: all, quota: {v5e: 64, v5e-8: 16}}
    - {name: eval, stage: eval, cohort: all, quota: {cpu: 32}}
    - {name: experiment, stage: experiment, cohort: all, quota: {h100: 0}}
"""
STAGES = ["pretraining", "post_training", "inference", "reinforcement_learning", "eval", "experiment"]
CASES = [
    ("v4", [4, 8, 32, 128, 64]),  # 64: two 2x4x4 slices
    ("v5e", [4, 16, 32, 64]),  # 64: two 4x8 slices
    ("v5e-8", [8]),
    ("v5p", [4, 16, 64, 128, 256]),  # 128, 256: two and four 4x4x4 slices
    ("v6e", [4, 16, 64, 256]),
    *[(gpu, [1, 8, 16]) for gpu in ("h100", "h100-spot", "h200", "a100", "onprem")],  # 16: a TrainJob
    ("l4", [1, 4, 8]),
    ("cpu", [4, 32]),
]
RENDERS = sum(len(chips) for _, chips in CASES) * len(STAGES)


@pytest.fixture(scope="module")
def mixed() -> Fleet:
    return parse_fleet(parse_document(MIXED_FLEET, "mixed.yaml"))


def _renders(fleet: Fleet) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for pool_name, sizes in CASES:
        for chips in sizes:
            for i, stage in enumerate(STAGES):
                exp = experiment(stage, chips, team="alignment" if i % 2 else None)
                out.append(
                    (pool_name, render_kubernetes(from_experiment(exp, source="e.yaml"), fleet, fleet.pool(pool_name)))
                )
    return out


@pytest.mark.slow  # 234 renders, each schema-validated too
def test_every_render_of_a_mixed_fleet_is_admitted_onto_its_pools_flavor(mixed: Fleet) -> None:
    kueue_objects = render_kueue(mixed)
    kueue = Kueue(kueue_objects)
    queues = [o["spec"] for o in kueue_objects if o["kind"] == "ClusterQueue"]
    assert all(not kueue.tas_only(cq) for cq in queues)  # every queue mixes TAS and plain flavors
    renders = _renders(mixed)
    admitted = []
    kinds = set()
    for pool_name, obj in renders:
        assert_valid(obj)
        answer = kueue.admit(obj)
        intended = flavor_name(mixed.pool(pool_name))
        assert answer.admitted, (pool_name, obj["metadata"]["name"], answer.reasons)
        assert answer.flavor_set() == {intended}, (pool_name, answer.flavors, answer.reasons)
        admitted.append(obj)
        kinds.add(obj["kind"])
    assert len(admitted) == len(renders) == RENDERS == 234
    assert kinds == {"Job", "JobSet", "TrainJob"}


def test_the_check_fails_the_renders_kueue_would_strand(mixed: Fleet) -> None:
    """The flavors crossrail rendered before (every GKE flavor topology-aware): GPU work in a mixed queue
    waits forever, and without the node-affinity exclusions an on-demand H100 pod lands on the spot flavor."""
    objects = render_kueue(mixed)
    for obj in objects:
        if obj["kind"] == "ResourceFlavor" and obj["metadata"]["name"] in ("h100", "h100-spot"):
            obj["spec"]["topologyName"] = "crossrail-gke"
    exp = experiment("pretraining", 8)
    job = render_kubernetes(from_experiment(exp, source="e.yaml"), mixed, mixed.pool("h100"))
    answer = Kueue(objects).admit(job)
    assert not answer.admitted
    assert 'main: Flavor "h100" supports only TopologyAwareScheduling' in answer.reasons
    plain = render_kueue(mixed)
    del job["spec"]["template"]["spec"]["affinity"]
    assert Kueue(plain).admit(job).flavor_set() == {"h100-spot"}  # listed first: it is the more specific


def test_a_trainjob_is_one_pod_set_of_its_nodes(mixed: Fleet) -> None:
    exp = experiment("post_training", 16)
    obj = render_kubernetes(from_experiment(exp, source="e.yaml"), mixed, mixed.pool("h200"))
    (podset,) = pod_sets(obj)
    assert (podset.count, podset.requests()) == (2, {"nvidia.com/gpu": 8.0})
