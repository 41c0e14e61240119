"""Capacity that arrives and several clusters as Kueue objects: ProvisioningRequestConfigs and their admission
checks on flex-start and autoscaled flavors, MultiKueue on the manager, each worker's own queues, spot pods'
grace from the pool's preemption notice; every object validated against the CRDs in schemas/crds/."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.errors import SpecError
from crossrail.executors.render.kubernetes import STOP_BUDGET_ENV, render_kubernetes
from crossrail.executors.render.kueue import (
    MULTIKUEUE_CHECK,
    MULTIKUEUE_CONTROLLER,
    PROVISIONING_CONTROLLER,
    render_kueue,
)
from crossrail.executors.render.workload import from_experiment
from crossrail.spec import Fleet, parse_document, parse_fleet

from .builders import experiment
from .conftest import assert_valid

FLEET = """
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: arrivals}
spec:
  preemption: {grace: 5m}
  clusters:
    - {name: us-east, context: gke-us-east}
    - {name: eu-west, kubeconfig_secret: eu-west-config}
  pools:
    - {name: h100-flex, accelerator: gpu, chip_type: h100, chips: 64, chips_per_host: 8, backend: kubernetes,
       cluster: us-east, provisioning: flex-start, provisioning_wait: 20m, max_run_duration: 1d,
       kubernetes: {node_pool: h100-dws}}
    - {name: h100-spot, accelerator: gpu, chip_type: h100, chips: 32, chips_per_host: 8, backend: kubernetes,
       cluster: us-east, kubernetes: {spot: true}}
    - {name: h100, accelerator: gpu, chip_type: h100, chips: 32, chips_per_host: 8, backend: kubernetes,
       cluster: eu-west, provisioning: autoscaled, provisioning_wait: 4m, kubernetes: {node_pool: h100-od}}
    - {name: h200-spot, accelerator: gpu, chip_type: h200, chips: 16, chips_per_host: 8, backend: kubernetes,
       cluster: eu-west, kubernetes: {spot: true}, preemption_notice: 20s}
  queues:
    - {name: post-training, stage: post_training, quota: {h100-flex: 32, h100-spot: 16, h100: 16, h200-spot: 8}}
    - {name: eval, stage: eval, quota: {h100: 8}, cohort: research}
"""


def _fleet(text: str = FLEET) -> Fleet:
    return parse_fleet(parse_document(text, "arrivals.yaml"))


def _kinds(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


@pytest.mark.parametrize("api", ["v1beta1", "v1beta2"])
def test_each_worker_gets_provisioning_checks_on_its_queued_flavors_only(api: str) -> None:
    fleet = _fleet()
    east = render_kueue(fleet, api, cluster="us-east")
    for obj in east:
        assert_valid(obj)
    configs = _kinds(east, "ProvisioningRequestConfig")
    assert list(configs) == ["crossrail-provision-h100-flex"]
    flex = configs["crossrail-provision-h100-flex"]["spec"]
    assert flex["provisioningClassName"] == "queued-provisioning.gke.io"
    assert flex["managedResources"] == ["nvidia.com/gpu"]
    assert flex["parameters"] == {"maxRunDurationSeconds": "86400"}
    (check,) = _kinds(east, "AdmissionCheck").values()
    assert check["spec"]["controllerName"] == PROVISIONING_CONTROLLER
    assert check["spec"]["parameters"]["name"] == "crossrail-provision-h100-flex"
    assert set(_kinds(east, "ResourceFlavor")) == {"h100-flex", "h100-spot"}
    queue = _kinds(east, "ClusterQueue")["post-training"]["spec"]
    assert queue["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": "crossrail-provision-h100-flex", "onFlavors": ["h100-flex"]}]
    }
    # spot before on-demand in the queue's one GPU group: Kueue tries flavors in order
    assert [f["name"] for f in queue["resourceGroups"][0]["flavors"]] == ["h100-spot", "h100-flex"]
    west = render_kueue(fleet, api, cluster="eu-west")
    for obj in west:
        assert_valid(obj)
    (auto,) = _kinds(west, "ProvisioningRequestConfig").values()
    assert auto["spec"]["provisioningClassName"] == "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    assert "parameters" not in auto["spec"]  # only flex-start nodes have a run duration
    assert not _kinds(west, "MultiKueueConfig")


@pytest.mark.parametrize("api", ["v1beta1", "v1beta2"])
def test_the_manager_dispatches_every_queue_through_multikueue(api: str) -> None:
    objects = render_kueue(_fleet(), api)
    for obj in objects:
        assert_valid(obj)
    clusters = _kinds(objects, "MultiKueueCluster")
    assert set(clusters) == {"us-east", "eu-west"}
    source = clusters["eu-west"]["spec"] if api == "v1beta1" else clusters["eu-west"]["spec"]["clusterSource"]
    assert source["kubeConfig"] == {"locationType": "Secret", "location": "eu-west-config"}
    east = clusters["us-east"]["spec"] if api == "v1beta1" else clusters["us-east"]["spec"]["clusterSource"]
    assert east["kubeConfig"]["location"] == "us-east-kubeconfig"
    (config,) = _kinds(objects, "MultiKueueConfig").values()
    assert config["spec"]["clusters"] == ["us-east", "eu-west"]
    checks = _kinds(objects, "AdmissionCheck")
    assert list(checks) == [MULTIKUEUE_CHECK]
    assert checks[MULTIKUEUE_CHECK]["spec"]["controllerName"] == MULTIKUEUE_CONTROLLER
    assert checks[MULTIKUEUE_CHECK]["spec"]["parameters"]["kind"] == "MultiKueueConfig"
    assert not _kinds(objects, "ProvisioningRequestConfig")  # the workers provision, not the manager
    for queue in _kinds(objects, "ClusterQueue").values():
        assert queue["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": MULTIKUEUE_CHECK}]}


def test_a_fleet_of_one_cluster_renders_its_checks_without_multikueue() -> None:
    text = FLEET.split("  clusters:", maxsplit=1)[0] + "  pools:" + FLEET.split("  pools:")[1]
    text = text.replace("cluster: us-east, ", "").replace("cluster: eu-west, ", "")
    objects = render_kueue(_fleet(text))
    for obj in objects:
        assert_valid(obj)
    assert set(_kinds(objects, "AdmissionCheck")) == {"crossrail-provision-h100-flex", "crossrail-provision-h100"}
    assert not _kinds(objects, "MultiKueueCluster")
    eval_queue = _kinds(objects, "ClusterQueue")["eval"]["spec"]  # in a cohort: every flavor, the checks on two
    on = {c["onFlavors"][0] for c in eval_queue["admissionChecksStrategy"]["admissionChecks"]}
    assert on == {"h100-flex", "h100"}


def test_an_unknown_cluster_is_refused_with_the_clusters_named() -> None:
    with pytest.raises(SpecError, match="us-east, eu-west"):
        render_kueue(_fleet(), cluster="us-west")


def test_spot_pods_get_the_pools_notice_and_the_workload_its_budget() -> None:
    fleet = _fleet()
    work = from_experiment(experiment(chips=8), source="exp.yaml")

    def pod(pool: str) -> dict[str, Any]:
        obj = render_kubernetes(work, fleet, fleet.pool(pool))
        assert_valid(obj)
        return obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]["replicatedJobs"][0]

    def budget(spec: dict[str, Any]) -> str:
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        return str(env[STOP_BUDGET_ENV])

    spot, noticed, flex = pod("h100-spot"), pod("h200-spot"), pod("h100-flex")
    assert spot["terminationGracePeriodSeconds"] == 30  # GKE's spot notice, not the fleet's 5m grace
    assert budget(spot) == "30"
    assert noticed["terminationGracePeriodSeconds"] == 20
    assert flex["terminationGracePeriodSeconds"] == 300
    assert budget(flex) == "300"
    assert {"key": "cloud.google.com/gke-queued", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in (
        flex["tolerations"]
    )


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ("preemption_notice: 20s}", "spec.pools[2].preemption_notice"),
        ("max_run_duration: 1h}", "spec.pools[2].max_run_duration"),
    ],
    ids=["a notice on an on-demand pool", "a run duration on an autoscaled pool"],
)
def test_capacity_terms_only_where_the_pool_has_that_capacity(change: str, path: str) -> None:
    text = FLEET.replace("kubernetes: {node_pool: h100-od}}", "kubernetes: {node_pool: h100-od}, " + change)
    with pytest.raises(SpecError) as caught:
        _fleet(text)
    assert path in str(caught.value)


@pytest.mark.parametrize(
    ("old", "new", "path"),
    [
        ("cluster: eu-west, provisioning", "cluster: eu-wst, provisioning", "spec.pools[2].cluster"),
        ("cluster: eu-west, provisioning", "provisioning", "spec.pools[2].cluster"),
        (
            "provisioning: flex-start, provisioning_wait: 20m, max_run_duration: 1d,",
            "provisioning_wait: 20m,",
            "spec.pools[0].provisioning_wait",
        ),
    ],
    ids=["a misspelt cluster", "a Kubernetes pool without its cluster", "a wait without provisioning"],
)
def test_cluster_and_provisioning_references_are_checked(old: str, new: str, path: str) -> None:
    with pytest.raises(SpecError) as caught:
        _fleet(FLEET.replace(old, new))
    assert path in str(caught.value)


def test_fleet_render_cli_writes_a_workers_objects(tmp_path: Any) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    result = CliRunner().invoke(app, ["fleet", "render", "--fleet", str(path), "--cluster", "eu-west"])
    assert result.exit_code == 0, result.output
    objects = [o for o in yaml.safe_load_all(result.output) if o]
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "AdmissionCheck"} == {"crossrail-provision-h100"}


def test_every_cluster_and_capacity_problem_is_reported_at_once() -> None:
    text = FLEET.replace("cluster: eu-west, provisioning", "cluster: eu-wst, provisioning").replace(
        "cluster: us-east, kubernetes: {spot: true}}", "kubernetes: {spot: true}, max_run_duration: 1h}"
    )
    with pytest.raises(SpecError) as caught:
        _fleet(text)
    paths = {p.path for p in caught.value.problems}
    assert {"spec.pools[1].cluster", "spec.pools[1].max_run_duration", "spec.pools[2].cluster"} <= paths
