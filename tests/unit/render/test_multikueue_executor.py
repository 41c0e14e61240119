"""Several clusters as one fleet: the Kubernetes executor submits to the manager cluster, follows the workload to
the worker cluster MultiKueue dispatched it to, and reads its status, exit code and logs there. Two in-memory
API servers stand for the manager and the worker at the executor's client seam."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from crossrail.core.attempts import LaunchRequest
from crossrail.core.clock import ManualClock
from crossrail.errors import ExecutionError
from crossrail.executors import kubernetes as kubernetes_executor
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


def reporting(pool: str = "h100-pool", attempt: int = 1, config: str | None = None) -> LaunchRequest:
    """An attempt posting its reports with a secret (a report Secret), its config a file here when given (a
    ConfigMap)."""
    launch = request(pool=pool, attempt=attempt)
    launch.env["CROSSRAIL_REPORT"] = f"https://crossrail.example.com/v1/ingest/posttrain-042-3/{attempt}"
    launch.env["CROSSRAIL_REPORT_SECRET"] = "s3cret"
    if config is not None:
        launch.env["CROSSRAIL_CONFIG"] = f"file://{config}"
    return launch


def copies(api: ApiServer) -> dict[tuple[str, str], dict[str, Any]]:
    return {(k, name): o for (k, _, name), o in api.objects.items() if k in ("Secret", "ConfigMap")}


def test_what_the_pods_mount_is_created_on_every_worker_and_deleted_with_the_attempt(
    fleet: Fleet, manager: ApiServer, worker: ApiServer, tmp_path: Path
) -> None:
    """MultiKueue copies only the Job and its Workload to the worker that admits it (Kueue's SyncJob); the report
    Secret and the shipped config the pods mount there are the executor's to create, on every worker."""
    eu = ApiServer()
    executor = KubernetesExecutor(fleet, api=manager, workers={"us-east": worker, "eu-west": eu}, clock=ManualClock(0))
    config = tmp_path / "posttrain.yaml"
    config.write_text("lr: 3.0e-4\n")
    assert executor.launch(reporting(config=str(config))).phase == "pending"
    assert executor.launch(reporting(config=str(config))).phase == "pending"  # a relaunch makes nothing twice

    owned = copies(manager)
    assert set(owned) == {("Secret", "posttrain-042-3-a1-report"), ("ConfigMap", "posttrain-042-3-a1-config")}
    for cluster in (worker, eu):
        there = copies(cluster)
        assert set(there) == set(owned)
        for key, obj in there.items():
            assert obj["metadata"]["namespace"] == "default"  # the team namespace, as on the manager
            assert obj["metadata"]["labels"] == {"crossrail.dev/run": "posttrain-042-3", "crossrail.dev/attempt": "1"}
            assert "ownerReferences" not in obj["metadata"]  # the manager's Job is not on the worker
            body = {k: v for k, v in obj.items() if k not in ("metadata",)}
            assert body == {k: v for k, v in owned[key].items() if k not in ("metadata",)}
        assert there["Secret", "posttrain-042-3-a1-report"]["stringData"] == {"secret": "s3cret"}

    multikueue_dispatches(manager, worker, "admitted-running")
    executor.stop("posttrain-042-3", 1, 30.0, "preempted")
    assert copies(worker) == {}
    assert copies(eu) == {}

    executor.launch(reporting(attempt=2))
    assert set(copies(eu)) == {("Secret", "posttrain-042-3-a2-report")}
    executor.withdraw("posttrain-042-3", 2)
    assert copies(eu) == {}


def test_the_attempts_own_worker_must_take_them_and_the_others_as_they_can(
    fleet: Fleet, manager: ApiServer, worker: ApiServer
) -> None:
    """eu-west has no kube context and its kubeconfig Secret is not there: an attempt on its pool could not start its
    pods there (lost, with the fix); one on us-east's pool goes on without eu-west's copy."""
    executor = KubernetesExecutor(fleet, api=manager, workers={"us-east": worker}, clock=ManualClock(0))
    lost = executor.launch(reporting(pool="h100-eu", attempt=1))
    assert lost.phase == "lost"
    assert lost.detail is not None
    assert "worker cluster eu-west" in lost.detail
    assert "kueue-system/eu-west-kubeconfig" in lost.detail

    executor.forget("posttrain-042-3", 1)  # the agent forgets the lost attempt: its Job and us-east's copy go
    assert copies(worker) == {}

    assert executor.launch(reporting(pool="h100-pool", attempt=2)).phase == "pending"
    assert set(copies(worker)) == {("Secret", "posttrain-042-3-a2-report")}


def kubeconfig_secret(server: str) -> dict[str, Any]:
    """The Secret a MultiKueueCluster names: a kubeconfig with a token, as Kueue's create-multikueue-kubeconfig.sh
    writes it, under key `kubeconfig`."""
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "eu-west", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "multikueue-sa", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "eu-west", "context": {"cluster": "eu-west", "user": "multikueue-sa"}}],
        "current-context": "eu-west",
    }
    data = {"kubeconfig": base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()}
    meta = {"name": "eu-west-kubeconfig", "namespace": "kueue-system"}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "data": data}


def test_a_worker_without_a_context_is_read_through_the_kubeconfig_multikueue_uses(
    fleet: Fleet, manager: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    eu = ApiServer()
    given: list[dict[str, Any]] = []

    def connect(*args: Any, config: dict[str, Any] | None = None) -> ApiServer:
        assert config is not None
        given.append(config)
        return eu

    monkeypatch.setattr(kubernetes_executor, "OfficialApi", connect)
    clock = ManualClock(0)
    executor = KubernetesExecutor(fleet, api=manager, clock=clock)
    assert executor.worker_api("eu-west") is None  # no Secret yet: the manager's view, read again later
    manager.add(kubeconfig_secret("https://eu-west.example.com"))
    assert executor.worker_api("eu-west") is None  # not before WORKER_RETRY_S
    clock.advance(kubernetes_executor.WORKER_RETRY_S)
    assert executor.worker_api("eu-west") is eu
    assert given[0]["clusters"][0]["cluster"]["server"] == "https://eu-west.example.com"

    executor.launch(request(pool="h100-eu"))
    multikueue_dispatches(manager, eu, "admitted-running")
    manager.objects[("Workload", "default", "job-posttrain-042-3-a1-abcde")]["status"]["clusterName"] = "eu-west"
    (status,) = executor.observe()
    assert status.phase == "running"  # read on eu-west itself, not the manager's suspended copy


@pytest.mark.slow  # the kubernetes client takes seconds to import
def test_the_kubeconfig_from_a_secret_becomes_a_client_of_that_server() -> None:
    secret = kubeconfig_secret("https://eu-west.example.com:6443")
    api = kubernetes_executor.OfficialApi(config=kubernetes_executor._kubeconfig(secret, "kueue-system/x"))
    assert api._api.configuration.host == "https://eu-west.example.com:6443"
    with pytest.raises(ExecutionError, match="no kubeconfig"):
        kubernetes_executor._kubeconfig({"data": {}}, "kueue-system/x")
