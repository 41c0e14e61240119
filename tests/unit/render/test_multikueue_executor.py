"""Several clusters as one fleet: the Kubernetes executor submits to the manager cluster, follows the workload to
the worker cluster MultiKueue dispatched it to, and reads its status, exit code and logs there. Two in-memory
API servers stand for the manager and the worker at the executor's client seam."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from crossrail.core.clock import ManualClock
from crossrail.executors.kubernetes import KubernetesExecutor, admitted_cluster
from crossrail.executors.render.kueue import MULTIKUEUE_CHECK
from crossrail.spec import Fleet, parse_document, parse_fleet

from .apiserver import ApiServer
from .conftest import FIXTURES, assert_valid
from .test_kubernetes_executor import request

FLEET = """
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: two-regions}
spec:
  clusters:
    - {name: us-east, context: gke-us-east}
    - {name: eu-west}
  pools:
    - {name: h100-pool, accelerator: gpu, chip_type: h100, chips: 64, chips_per_host: 8, backend: kubernetes,
       cluster: us-east}
    - {name: h100-eu, accelerator: gpu, chip_type: h100, chips: 32, chips_per_host: 8, backend: kubernetes,
       cluster: eu-west, kubernetes: {node_pool: h100-eu}}
  queues:
    - {name: post-training, stage: post_training, quota: {h100-pool: 32, h100-eu: 16}}
"""
RUN = {"crossrail.dev/run": "posttrain-042-3", "crossrail.dev/attempt": "1"}
RESERVED = 'The workload got reservation on "us-east"'


def status_docs(fixture: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((FIXTURES / "status" / f"{fixture}.yaml").read_text()))


@pytest.fixture
def fleet() -> Fleet:
    return parse_fleet(parse_document(FLEET, "two-regions.yaml"))


@pytest.fixture
def manager() -> ApiServer:
    return ApiServer()


@pytest.fixture
def worker() -> ApiServer:
    return ApiServer()


@pytest.fixture
def executor(fleet: Fleet, manager: ApiServer, worker: ApiServer) -> KubernetesExecutor:
    return KubernetesExecutor(fleet, api=manager, workers={"us-east": worker}, clock=ManualClock(1000.0))


def dispatched_workload(job: dict[str, Any], *, cluster_name: bool = True) -> dict[str, Any]:
    """The manager's Workload of `job` as MultiKueue leaves it once a worker (us-east) reserved quota."""
    workload = copy.deepcopy(next(d for d in status_docs("admitted-running") if d["kind"] == "Workload"))
    workload["metadata"]["name"] = f"job-{job['metadata']['name']}-abcde"
    workload["metadata"]["ownerReferences"][0].update(uid=job["metadata"]["uid"], name=job["metadata"]["name"])
    check = {
        "name": MULTIKUEUE_CHECK,
        "state": "Ready",
        "message": RESERVED,
        "lastTransitionTime": "2026-11-30T08:05:00Z",
    }
    workload["status"]["admissionChecks"] = [check]
    if cluster_name:
        workload["status"]["clusterName"] = "us-east"
    return workload


def multikueue_dispatches(manager: ApiServer, worker: ApiServer, fixture: str, *, cluster_name: bool = True) -> None:
    """Play MultiKueue: the manager's Workload reserved on us-east, and the worker's copy of the Job running
    (or ended) there with its own Workload and pod; the manager's Job stays suspended."""
    (job,) = manager.list("Job", "default", "crossrail.dev/run")
    docs = status_docs(fixture)
    workload = dispatched_workload(job, cluster_name=cluster_name)
    manager.add(workload)
    remote = copy.deepcopy(job)
    remote["spec"]["suspend"] = False
    remote["status"] = next(d for d in docs if d["kind"] == "Job")["status"]
    remote = worker.add(remote)
    remote_workload = copy.deepcopy(workload)
    remote_workload["metadata"]["ownerReferences"][0]["uid"] = remote["metadata"]["uid"]
    remote_workload["status"].pop("clusterName", None)  # the worker's own Workload: no MultiKueue there
    del remote_workload["status"]["admissionChecks"]
    worker.add(remote_workload)
    pod = next(d for d in docs if d["kind"] == "Pod")
    pod["metadata"]["labels"] = dict(RUN)
    worker.add(pod)


def test_an_attempt_is_submitted_to_the_manager_and_read_on_the_worker_that_admitted_it(
    executor: KubernetesExecutor, manager: ApiServer, worker: ApiServer
) -> None:
    submitted = executor.launch(request())
    assert submitted.phase == "pending"
    assert [j["metadata"]["name"] for j in manager.list("Job", "default", "")] == ["posttrain-042-3-a1"]
    assert worker.list("Job", "default", "") == []  # MultiKueue, not crossrail, creates the worker's copy

    multikueue_dispatches(manager, worker, "admitted-running")
    (status,) = executor.observe()

    assert status.phase == "running"  # the manager's Job is still suspended: this came from us-east
    assert manager.get("Job", "default", "posttrain-042-3-a1")["spec"]["suspend"] is True


def test_an_exit_code_and_the_logs_come_from_the_worker(
    executor: KubernetesExecutor, manager: ApiServer, worker: ApiServer
) -> None:
    executor.launch(request())
    multikueue_dispatches(manager, worker, "failed-exit-75", cluster_name=False)  # the check's message alone
    pod = next(d for d in status_docs("failed-exit-75") if d["kind"] == "Pod")
    worker.pod_logs[pod["metadata"]["name"]] = "step 120\ncapacity gone, exiting 75\n"

    (status,) = executor.observe()

    assert (status.phase, status.exit_code) == ("exited", 75)
    assert "exiting 75" in executor.logs("posttrain-042-3", 1)


def test_a_stop_deletes_on_the_manager_which_mirrors_it(
    executor: KubernetesExecutor, manager: ApiServer, worker: ApiServer
) -> None:
    executor.launch(request())
    multikueue_dispatches(manager, worker, "admitted-running")

    executor.stop("posttrain-042-3", 1, 30.0, "preempted")

    assert manager.deleted == [("Job", "default", "posttrain-042-3-a1", 30)]
    assert worker.deleted == []


def test_a_worker_crossrail_cannot_reach_leaves_the_managers_view(
    fleet: Fleet, manager: ApiServer, worker: ApiServer
) -> None:
    executor = KubernetesExecutor(fleet, api=manager, clock=ManualClock(1000.0))
    executor.launch(request())
    multikueue_dispatches(manager, worker, "admitted-running")
    manager.objects[("Workload", "default", "job-posttrain-042-3-a1-abcde")]["status"]["clusterName"] = "eu-west"

    assert executor.worker_api("eu-west") is None  # no kube context and none given
    (status,) = executor.observe()
    assert status.phase == "pending"  # the manager's suspended copy, as MultiKueue last synced it


@pytest.mark.slow  # compiling the Workload CRD's schema (1.4 MB) takes seconds
def test_the_multikueue_status_read_is_the_one_kueues_workload_crd_defines() -> None:
    job = {"metadata": {"name": "posttrain-042-3-a1", "uid": "uid-1"}}
    for cluster_name in (True, False):
        workload = dispatched_workload(job, cluster_name=cluster_name)
        assert_valid(workload)
        assert admitted_cluster(workload) == "us-east"


@pytest.mark.parametrize(
    ("status", "cluster"),
    [
        ({"clusterName": "eu-west"}, "eu-west"),
        ({"admissionChecks": [{"name": MULTIKUEUE_CHECK, "message": RESERVED}]}, "us-east"),
        ({"admissionChecks": [{"name": "crossrail-provision-h100", "message": RESERVED}]}, None),
        ({}, None),
    ],
    ids=["named by Kueue", "from the MultiKueue check's message", "another check's message", "not dispatched yet"],
)
def test_admitted_cluster(status: dict[str, Any], cluster: str | None) -> None:
    assert admitted_cluster({"status": status}) == cluster
