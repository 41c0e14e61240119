"""The fleet as Kueue objects: every object validates against the Kueue CRDs, and quotas, cohorts,
limits, preemption, queueing and namespaces match the fleet."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from crossrail.errors import SpecError
from crossrail.executors.render.kueue import render_kueue
from crossrail.spec import Fleet, parse_document, parse_fleet

from .conftest import MATRIX_FLEET, assert_valid, problems


def _by(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {
        f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}".lstrip("/"): o
        for o in objects
        if o["kind"] == kind
    }


def _quota(cq: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f["resources"][0] for group in cq["spec"]["resourceGroups"] for f in group["flavors"]}


def test_every_kueue_object_of_the_fleet_validates(matrix_fleet: Fleet, gke_fleet: Fleet) -> None:
    for fleet in (matrix_fleet, gke_fleet):
        objects = render_kueue(fleet)
        assert {o["kind"] for o in objects} == {
            "Namespace",
            "Topology",
            "ResourceFlavor",
            "Cohort",
            "WorkloadPriorityClass",
            "ClusterQueue",
            "LocalQueue",
        }
        for obj in objects:
            assert_valid(obj)


def test_flavors_select_each_kubernetes_pools_nodes(matrix_fleet: Fleet) -> None:
    flavors = _by(render_kueue(matrix_fleet), "ResourceFlavor")
    assert set(flavors) == {"h100", "h200-spot", "v5p", "trillium", "cpu"}  # not the Ray pool
    assert flavors["trillium"]["spec"]["nodeLabels"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}
    assert flavors["h200-spot"]["spec"]["nodeLabels"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h200-141gb",
        "cloud.google.com/gke-spot": "true",
    }


def test_cluster_queues_carry_quota_cohort_limits_and_preemption(matrix_fleet: Fleet) -> None:
    queues = _by(render_kueue(matrix_fleet), "ClusterQueue")
    post = queues["post-training"]["spec"]
    assert post["cohortName"] == "research"
    assert post["queueingStrategy"] == "StrictFIFO"
    assert post["preemption"] == {
        "withinClusterQueue": "LowerPriority",
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "Never"},
    }
    quota = _quota(queues["post-training"])
    assert quota["h100"] == {"name": "nvidia.com/gpu", "nominalQuota": 32, "borrowingLimit": 16}
    assert quota["v5p"] == {"name": "google.com/tpu", "nominalQuota": 32, "lendingLimit": 16}
    assert quota["trillium"] == {"name": "google.com/tpu", "nominalQuota": 0}  # in a cohort: may borrow it
    groups = {tuple(g["coveredResources"]): [f["name"] for f in g["flavors"]] for g in post["resourceGroups"]}
    assert groups[("google.com/tpu",)] == ["v5p", "trillium"]
    eval_queue = queues["eval"]["spec"]
    assert "cohortName" not in eval_queue
    assert eval_queue["queueingStrategy"] == "BestEffortFIFO"
    assert eval_queue["preemption"]["reclaimWithinCohort"] == "Never"
    assert _quota(queues["eval"]) == {
        "h100": {"name": "nvidia.com/gpu", "nominalQuota": 8},
        "cpu": {"name": "cpu", "nominalQuota": 32},
    }


def test_local_queues_per_team_namespace(matrix_fleet: Fleet) -> None:
    local = _by(render_kueue(matrix_fleet), "LocalQueue")
    assert local["align/alignment-post"]["spec"] == {"clusterQueue": "alignment-post"}
    assert "research/alignment-post" not in local
    for shared in ("pretraining", "post-training", "eval"):
        assert {f"research/{shared}", f"align/{shared}"} <= set(local)


def test_a_queue_of_two_teams_has_a_local_queue_in_each_teams_namespace() -> None:
    from .conftest import MATRIX_FLEET as text

    old = "team: alignment, quota: {h100: 16}"
    assert old in text
    shared = parse_fleet(parse_document(text.replace(old, "teams: [alignment, safety], quota: {h100: 16}"), "f.yaml"))
    objects = render_kueue(shared)
    local = _by(objects, "LocalQueue")
    assert {"align/alignment-post", "safety/alignment-post"} <= set(local)
    assert "research/alignment-post" not in local
    cq = _by(objects, "ClusterQueue")["alignment-post"]
    assert cq["metadata"]["labels"]["crossrail.dev/team"] == "alignment.safety"
    for obj in objects:
        assert_valid(obj)


def test_priority_classes_keep_crossrails_order(matrix_fleet: Fleet) -> None:
    classes = _by(render_kueue(matrix_fleet), "WorkloadPriorityClass")
    values = [classes[f"crossrail-{p}"]["value"] for p in ("low", "normal", "high", "critical")]
    assert values == sorted(values)
    assert len(set(values)) == 4


@pytest.mark.parametrize(
    ("edit", "expect"),
    [
        (lambda cq: cq["spec"].update(cohort=cq["spec"].pop("cohortName")), "cohort"),
        (
            lambda cq: cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(nominalQuota="8 chips"),
            "8 chips",
        ),
        (lambda cq: cq["spec"].update(queueingStrategy="Fifo"), "Fifo"),
    ],
    ids=["cohort-renamed-in-v1beta2", "quota-with-words", "unknown-queueing-strategy"],
)
def test_the_crd_validator_refuses_broken_cluster_queues(matrix_fleet: Fleet, edit: Any, expect: str) -> None:
    good = _by(render_kueue(matrix_fleet), "ClusterQueue")["post-training"]
    bad = copy.deepcopy(good)
    edit(bad)
    found = problems(bad)
    assert found
    assert any(expect in p for p in found), found


def test_a_fleet_without_kubernetes_pools_or_with_a_shared_flavor_is_refused(matrix_fleet: Fleet) -> None:
    local = parse_fleet(parse_document(MATRIX_FLEET.replace("backend: kubernetes", "backend: local"), "f.yaml"))
    with pytest.raises(SpecError, match="no pool has backend: kubernetes"):
        render_kueue(local)
    shared = MATRIX_FLEET.replace("kubernetes: {flavor: trillium}", "kubernetes: {flavor: v5p}")
    with pytest.raises(SpecError, match="flavor 'v5p' is pool v5p's too") as caught:
        render_kueue(parse_fleet(parse_document(shared, "f.yaml")))
    assert caught.value.problems[0].path == "spec.pools[3].kubernetes.flavor"
