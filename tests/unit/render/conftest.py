"""Offline validation of rendered manifests: kubernetes-validate (strict) for built-in kinds, and
jsonschema over the copied CRDs (schemas/crds/) with unknown fields refused, as `kubectl --validate=strict`."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from crossrail.spec import Fleet, load_fleet, parse_document, parse_fleet

ROOT = Path(__file__).resolve().parents[3]
CRDS = ROOT / "schemas" / "crds"
FIXTURES = ROOT / "tests" / "fixtures" / "kubernetes"
KUBERNETES_VERSION = "1.33"
CRD_FILES = {
    "JobSet": "jobset.x-k8s.io_jobsets.yaml",
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "Cohort": "kueue.x-k8s.io_cohorts.yaml",
    "WorkloadPriorityClass": "kueue.x-k8s.io_workloadpriorityclasses.yaml",
    "Workload": "kueue.x-k8s.io_workloads.yaml",
    "Topology": "kueue.x-k8s.io_topologies.yaml",
    "AdmissionCheck": "kueue.x-k8s.io_admissionchecks.yaml",
    "ProvisioningRequestConfig": "kueue.x-k8s.io_provisioningrequestconfigs.yaml",
    "MultiKueueCluster": "kueue.x-k8s.io_multikueueclusters.yaml",
    "MultiKueueConfig": "kueue.x-k8s.io_multikueueconfigs.yaml",
    "TrainJob": "trainer.kubeflow.org_trainjobs.yaml",
    "ClusterTrainingRuntime": "trainer.kubeflow.org_clustertrainingruntimes.yaml",
}


def _strict(node: Any) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str) and node["pattern"].startswith("^(?i)"):
            # Go's RE2 takes a flag after `^` (AdmissionCheck's parameters.kind); Python's re only at the start
            node["pattern"] = "(?i)^" + node["pattern"].removeprefix("^(?i)")
        if (
            node.get("type") == "object"
            and "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for value in node.values():
            _strict(value)
    elif isinstance(node, list):
        for value in node:
            _strict(value)


@functools.cache
def crd_validator(kind: str, version: str) -> jsonschema.Draft202012Validator:
    crd = yaml.safe_load((CRDS / CRD_FILES[kind]).read_text())
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    schema = copy.deepcopy(served["schema"]["openAPIV3Schema"])
    _strict(schema)
    schema["properties"]["apiVersion"] = {"const": f"{crd['spec']['group']}/{version}"}
    schema["properties"]["kind"] = {"const": crd["spec"]["names"]["kind"]}
    schema["required"] = [*schema.get("required", []), "apiVersion", "kind", "metadata"]
    return jsonschema.Draft202012Validator(schema)


def problems(obj: dict[str, Any]) -> list[str]:
    """Every schema problem of one manifest ([] when it validates)."""
    kind = obj.get("kind", "")
    if kind in CRD_FILES:
        version = str(obj.get("apiVersion", "/")).split("/")[-1]
        errors = crd_validator(kind, version).iter_errors(obj)
        return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(map(str, exc.path))}: {exc.message}"]
    return []


def assert_valid(obj: dict[str, Any]) -> None:
    found = problems(obj)
    assert not found, f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}: " + "; ".join(found)


@pytest.fixture(scope="session")
def gke_fleet() -> Fleet:
    return load_fleet(ROOT / "examples" / "fleet.yaml")


MATRIX_FLEET = """
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: matrix}
spec:
  kubernetes: {namespace: research, team_namespaces: {alignment: align}, service_account: trainer-wi}
  pools:
    - {name: h100, accelerator: gpu, chip_type: h100, chips: 64, chips_per_host: 8, backend: kubernetes}
    - {name: h200-spot, accelerator: gpu, chip_type: h200, chips: 16, chips_per_host: 8, backend: kubernetes,
       kubernetes: {spot: true, service_account: spot-trainer}}
    - {name: v5p, accelerator: tpu, chip_type: tpu-v5p, chips: 256, chips_per_host: 4,
       topologies: [2x2x1, 2x2x2, 2x2x4, 4x4x4], backend: kubernetes}
    - {name: v6e, accelerator: tpu, chip_type: tpu-v6e, chips: 64, chips_per_host: 4,
       topologies: [1x1, 2x2, 2x4, 4x4], backend: kubernetes, kubernetes: {flavor: trillium}}
    - {name: cpu, accelerator: cpu, chip_type: n2-standard-32, chips: 64, chips_per_host: 32, backend: kubernetes}
    - {name: ray-h100, accelerator: gpu, chip_type: h100, chips: 16, chips_per_host: 8, backend: ray,
       ray: {address: "10.0.0.2:6379"}}
  queues:
    - {name: pretraining, stage: pretraining, quota: {v5p: 192, h100: 32}, cohort: research}
    - {name: post-training, stage: post_training, quota: {v5p: 32, h100: 32, h200-spot: 16},
       cohort: research, borrowing_limit: {h100: 16}, lending_limit: {v5p: 16}}
    - {name: alignment-post, stage: post_training, team: alignment, quota: {h100: 16}, cohort: research}
    - {name: rl, stage: reinforcement_learning, quota: {v6e: 32, h100: 8}, cohort: research}
    - {name: eval, stage: eval, quota: {h100: 8, cpu: 32, ray-h100: 8}, queueing: best_effort_fifo}
    - {name: experiment, stage: experiment, quota: {v6e: 8, h100: 8}}
    - {name: inference, stage: inference, quota: {v6e: 16}}
"""


@pytest.fixture(scope="session")
def matrix_fleet() -> Fleet:
    return parse_fleet(parse_document(MATRIX_FLEET, "matrix-fleet.yaml"))
