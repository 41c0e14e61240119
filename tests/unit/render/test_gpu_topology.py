"""Topology-aware scheduling for gang GPU jobs, opted into per pool (`kubernetes.topology`): only those pools'
flavors are topology-aware, only their pod sets carry Kueue's topology annotation, and Kueue's rules
(crossrail.executors.render.admission) still admit every render onto its own pool's flavor in queues that
mix TPU, topology-aware GPU, plain GPU and CPU flavors."""

from __future__ import annotations

from typing import Any

import pytest

from crossrail.errors import SpecError
from crossrail.executors.render.admission import TAS_ANNOTATIONS, Kueue, pod_sets
from crossrail.executors.render.kubernetes import render_kubernetes
from crossrail.executors.render.kueue import flavor_name, render_kueue
from crossrail.executors.render.workload import from_experiment
from crossrail.spec import Fleet, parse_document, parse_fleet

from .builders import experiment

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
NODE_POOL = "cloud.google.com/gke-nodepool"
FLEET = """
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: tas}
spec:
  pools:
    - {name: v5p, accelerator: tpu, chip_type: tpu-v5p, chips: 64, chips_per_host: 4, backend: kubernetes,
       topologies: [2x2x1, 2x2x4]}
    - {name: h100, accelerator: gpu, chip_type: h100, chips: 16, chips_per_host: 8, backend: kubernetes}
    - {name: h200, accelerator: gpu, chip_type: nvidia-h200, chips: 32, chips_per_host: 8, backend: kubernetes,
       kubernetes: {topology: required}}
    - {name: a100, accelerator: gpu, chip_type: a100-80gb, chips: 32, chips_per_host: 8, backend: kubernetes,
       kubernetes: {topology: preferred, node_pool: a100-pool}}
    - {name: cpu, accelerator: cpu, chip_type: n2-standard-32, chips: 64, chips_per_host: 32, backend: kubernetes}
  queues:
    - {name: pretraining, stage: pretraining, cohort: all, quota: {v5p: 64, h100: 16, h200: 32, a100: 32, cpu: 32}}
    - {name: post-training, stage: post_training, cohort: all, quota: {h200: 16, h100: 16, cpu: 32}}
"""
CASES = [("h100", [1, 8, 16]), ("h200", [1, 8, 16, 32]), ("a100", [1, 8, 32]), ("v5p", [4, 16]), ("cpu", [4])]


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return parse_fleet(parse_document(FLEET, "fleet.yaml"))


def _render(fleet: Fleet, pool: str, chips: int, stage: str = "pretraining") -> dict[str, Any]:
    return render_kubernetes(from_experiment(experiment(stage, chips), source="e.yaml"), fleet, fleet.pool(pool))


def _asked(obj: dict[str, Any]) -> dict[str, str]:
    (podset,) = pod_sets(obj)
    return {k: v for k, v in podset.annotations.items() if k in TAS_ANNOTATIONS}


def test_only_tpu_pools_and_gpu_pools_that_opt_in_get_topology_aware_flavors(fleet: Fleet) -> None:
    flavors = {o["metadata"]["name"]: o["spec"] for o in render_kueue(fleet) if o["kind"] == "ResourceFlavor"}
    assert {name for name, spec in flavors.items() if spec.get("topologyName")} == {"v5p", "h200", "a100"}


def test_a_gang_gpu_job_asks_for_one_node_pool_as_its_pool_opts_in_and_others_ask_nothing(fleet: Fleet) -> None:
    assert _asked(_render(fleet, "h200", 32)) == {REQUIRED: NODE_POOL}  # a TrainJob of 4 hosts
    assert _asked(_render(fleet, "a100", 32)) == {PREFERRED: NODE_POOL}
    assert _asked(_render(fleet, "h200", 8)) == {REQUIRED: "kubernetes.io/hostname"}  # one host: its node
    assert _asked(_render(fleet, "h100", 16)) == {}  # no opt-in: no annotation, a plain flavor
    assert _asked(_render(fleet, "cpu", 4)) == {}


@pytest.mark.parametrize("stage", ["pretraining", "post_training"])
def test_every_render_is_admitted_onto_its_pools_flavor_in_queues_mixing_tas_and_plain(
    fleet: Fleet, stage: str
) -> None:
    objects = render_kueue(fleet)
    kueue = Kueue(objects)
    assert not any(kueue.tas_only(o["spec"]) for o in objects if o["kind"] == "ClusterQueue")  # all mixed
    quota = {"pretraining": {"v5p", "h100", "h200", "a100", "cpu"}, "post_training": {"h100", "h200", "cpu"}}[stage]
    checked = 0
    for pool, sizes in CASES:
        for chips in sizes:
            if pool not in quota or (stage == "post_training" and chips > 16):
                continue
            obj = _render(fleet, pool, chips, stage)
            answer = kueue.admit(obj)
            assert answer.flavor_set() == {flavor_name(fleet.pool(pool))}, (pool, chips, answer.reasons)
            checked += 1
    assert checked == {"pretraining": 13, "post_training": 7}[stage]


def test_without_its_annotation_a_job_on_an_opted_in_pool_would_wait_forever(fleet: Fleet) -> None:
    """What the annotation is for: Kueue passes a topology-aware flavor over for a pod set asking no topology
    when the ClusterQueue also has plain flavors (tas_flavorassigner.go; admission.Kueue.tas_problem)."""
    obj = _render(fleet, "h200", 8)
    del obj["spec"]["template"]["metadata"]["annotations"][REQUIRED]
    answer = Kueue(render_kueue(fleet)).admit(obj)
    assert not answer.admitted
    assert 'main: Flavor "h200" supports only TopologyAwareScheduling' in answer.reasons


@pytest.mark.parametrize(
    ("pool", "why"),
    [
        (
            "{name: t, accelerator: tpu, chip_type: tpu-v5p, chips: 8, chips_per_host: 4, topologies: [2x2x1]",
            "a TPU pool",
        ),
        ("{name: t, accelerator: cpu, chip_type: n2-standard-32, chips: 32, chips_per_host: 32", "this pool is cpu"),
        ("{name: t, accelerator: gpu, chip_type: h100, chips: 8, chips_per_host: 8", "not GKE's"),
    ],
    ids=["tpu-always-is", "cpu-never-is", "gpu-off-gke"],
)
def test_a_topology_opt_in_outside_a_gke_gpu_pool_is_refused_with_the_fix(pool: str, why: str) -> None:
    gke = ", gke: false" if "not GKE" in why else ""
    text = FLEET.split("  pools:", maxsplit=1)[0] + (
        f"  pools:\n    - {pool}, backend: kubernetes, kubernetes: {{topology: required{gke}}}}}\n"
        "  queues:\n    - {name: q, stage: pretraining, quota: {t: 8}}\n"
    )
    if gke:
        text = text.replace("topology: required, gke: false", "topology: required, gke: false, node_selector: {a: b}")
    with pytest.raises(SpecError) as caught:
        parse_fleet(parse_document(text, "fleet.yaml"))
    found = [p for p in caught.value.problems if p.path.endswith("kubernetes.topology")]
    assert found, caught.value.problems
    assert why in found[0].message
    assert found[0].fix is not None
    assert "only a GPU pool on GKE" in found[0].fix
