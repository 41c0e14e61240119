"""The reconcile agent driving the Kubernetes executor, with the API server, Kueue and the kubelet played by
the test (tests/unit/render/apiserver.py): a run waits in Kueue, starts, succeeds; an exit 75 is retried."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from crossrail.client import Client
from crossrail.control.agent.loop import Agent, AgentConfig
from crossrail.executors.kubernetes import KubernetesExecutor

from ..unit.render.apiserver import ApiServer  # noqa: TID252 (tests are not a package on sys.path)

STATUS = Path(__file__).resolve().parents[1] / "fixtures" / "kubernetes" / "status"
CONFIG = AgentConfig(poll_s=0.1, fallback_wait_s=0.0, stop_grace_s=5.0, heartbeat_s=1.0)
NAMESPACE = "evals"  # init's fleet maps eval-smoke's team to its own namespace


def _docs(name: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((STATUS / f"{name}.yaml").read_text()))


@pytest.fixture
def api() -> ApiServer:
    return ApiServer()


@pytest.fixture
def agent(client: Client, api: ApiServer, experiments: Path) -> Agent:
    fleet = client.workspace.fleet_path
    smoke = experiments / "eval-smoke.yaml"
    # Its config and dataset are the workspace's files, which a pod reaches only on a volume: the workspace's
    # directory as a ReadWriteMany claim on every pool.
    found = re.search(r"uri: file://(\S+)/data/", smoke.read_text())
    assert found is not None
    volume = f"kubernetes: {{volumes: [{{name: workspace, mount_path: {found.group(1)}, claim: crossrail-workspace}}]}}"
    fleet.write_text(fleet.read_text().replace("backend: local", f"backend: kubernetes\n      {volume}"))
    # A pod's checkpoints must outlive it: object storage (fsspec's in-process memory store stands in here).
    policy = client.workspace.policy_path
    policy.write_text(policy.read_text().replace("local_uri_schemes: [file]", "local_uri_schemes: [file, memory]"))
    smoke.write_text(
        re.sub(r"dir: file://\S*checkpoints/eval-smoke", "dir: memory://crossrail-k8s/eval-smoke", smoke.read_text())
    )
    executor = KubernetesExecutor(client.service.fleet, api=api)
    agent = Agent(client.service, executor, client.workspace.root / "reports", CONFIG)
    agent.fleet_path = fleet  # it follows `crossrail fleet drain` as `crossrail agent` does
    return agent


def _job(api: ApiServer, attempt: int = 1) -> dict[str, Any]:
    (job,) = [
        j for j in api.list("Job", NAMESPACE, "") if j["metadata"]["labels"]["crossrail.dev/attempt"] == str(attempt)
    ]
    return api.get("Job", NAMESPACE, job["metadata"]["name"])


def _kueue_admits_and_pod_runs(api: ApiServer, job: dict[str, Any]) -> dict[str, Any]:
    _, workload, pod = _docs("admitted-running")
    workload["metadata"]["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
    workload["metadata"]["name"] = f"job-{job['metadata']['name']}"
    workload["metadata"]["namespace"] = pod["metadata"]["namespace"] = NAMESPACE
    api.add(workload)
    pod["metadata"]["name"] = f"{job['metadata']['name']}-pod"
    pod["metadata"]["labels"] = {k: v for k, v in job["metadata"]["labels"].items() if k.startswith("crossrail.dev/")}
    api.add(pod)
    job["spec"]["suspend"] = False
    job["status"] = {"startTime": "2026-11-30T08:05:00Z", "active": 1}
    return api.get("Pod", NAMESPACE, pod["metadata"]["name"])


def _types(client: Client, run: str) -> list[str]:
    return [e["type"] for e in client.events(run)["events"]]


def test_a_run_waits_in_kueue_then_runs_and_succeeds(
    client: Client, experiments: Path, agent: Agent, api: ApiServer
) -> None:
    run = client.submit(experiments / "eval-smoke.yaml")["run"]["id"]
    agent.reconcile()
    job = _job(api)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "eval"
    agent.reconcile()  # still waiting in Kueue: pending, nothing started, nothing lost
    assert "started" not in _types(client, run)
    assert client.service.store.get_run(run).state == "admitted"

    _kueue_admits_and_pod_runs(api, job)
    agent.reconcile()
    assert client.service.store.get_run(run).state == "running"

    job["status"] = _docs("succeeded")[0]["status"]
    agent.reconcile()
    assert client.service.store.get_run(run).state == "succeeded"
    assert _types(client, run)[-1] == "succeeded"
    (attempt,) = client.show(run)["attempts"]
    assert attempt["exit_code"] == 0


def test_an_exit_75_on_kubernetes_is_retried_as_a_new_attempt(
    client: Client, experiments: Path, agent: Agent, api: ApiServer
) -> None:
    sets = ["spec.retries={max: 2, backoff: {initial: 0s}}"]
    run = client.submit(experiments / "eval-smoke.yaml", sets=sets)["run"]["id"]
    agent.reconcile()
    job = _job(api)
    pod = _kueue_admits_and_pod_runs(api, job)
    agent.reconcile()
    failed_job, failed_pod = _docs("failed-exit-75")
    job["status"] = failed_job["status"]
    pod["status"] = failed_pod["status"]
    for _ in range(3):
        agent.reconcile()
    attempts = client.show(run)["attempts"]
    assert attempts[0]["exit_code"] == 75
    assert attempts[0]["state"] == "failed"
    assert len(attempts) == 2
    second = _job(api, attempt=2)
    assert second["spec"]["suspend"] is True
    assert second["metadata"]["name"] == f"{run}-a2"


def test_a_pod_reports_through_object_storage_next_to_its_checkpoints(
    client: Client, experiments: Path, agent: Agent, api: ApiServer
) -> None:
    """A pod cannot write the agent's local files: its report channel is chunks under the checkpoint dir."""
    from crossrail.runtime.report import Reporter

    sets = ["spec.checkpoint.dir=memory://crossrail-k8s-reports/ckpt"]
    run = client.submit(experiments / "eval-smoke.yaml", sets=sets)["run"]["id"]
    agent.reconcile()
    job = _job(api)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    uid = client.show(run)["run"]["uid"]
    assert env["CROSSRAIL_REPORT"] == f"memory://crossrail-k8s-reports/ckpt/{run}-{uid}/reports/attempt-1"
    assert job["metadata"]["labels"]["crossrail.dev/run-uid"] == uid  # a label; the object's name stays {run}-a1
    assert client.show(run)["attempts"][0]["report_uri"] == env["CROSSRAIL_REPORT"]

    _kueue_admits_and_pod_runs(api, job)
    with Reporter(env["CROSSRAIL_REPORT"], run=run, attempt=1) as reporter:  # what the trainer in the pod does
        reporter.metric("loss", 2.5, step=10)
        reporter.checkpoint(10, f"memory://crossrail-k8s-reports/ckpt/{run}-{uid}/step-0000000010")
    agent.reconcile()

    store = client.service.store
    assert [s["value"] for s in store.metric_samples(run, "loss")] == [2.5]
    assert [c.step for c in store.checkpoints(run)] == [10]


def test_a_workload_still_waiting_in_kueue_moves_when_its_pool_drains(
    client: Client, experiments: Path, agent: Agent, api: ApiServer
) -> None:
    """crossrail re-places what Kueue has not admitted: the waiting Job is deleted and the run goes elsewhere."""
    sets = ["spec.resources.chips=4"]  # a 2x2x1 v5p slice or half an H100 host: either pool holds it
    run = client.submit(experiments / "eval-smoke.yaml", sets=sets)["run"]["id"]
    agent.reconcile()
    first = _job(api)
    (attempt,) = client.show(run)["attempts"]
    old_pool = attempt["pool"]

    client.drain(old_pool)
    agent.reconcile()

    assert [j["metadata"]["labels"]["crossrail.dev/attempt"] for j in api.list("Job", NAMESPACE, "")] == ["2"]
    assert first["metadata"]["name"] not in {j["metadata"]["name"] for j in api.list("Job", NAMESPACE, "")}
    first_attempt, second = client.show(run)["attempts"]
    assert first_attempt["state"] == "unplaced"
    assert "re-placed on" in first_attempt["reason"]
    assert second["pool"] != old_pool
    events = _types(client, run)
    assert "replaced" in events
    assert "retried" not in events  # a move spends no retry
    assert "failed" not in events
    (moved,) = [e for e in client.events(run)["events"] if e["type"] == "replaced"]
    assert moved["data"]["from"] == old_pool
    assert moved["data"]["pool"] == second["pool"]


def test_a_workload_kueue_has_admitted_stays_where_it_is(
    client: Client, experiments: Path, agent: Agent, api: ApiServer
) -> None:
    run = client.submit(experiments / "eval-smoke.yaml")["run"]["id"]
    agent.reconcile()
    job = _job(api)
    _kueue_admits_and_pod_runs(api, job)
    agent.reconcile()
    old_pool = client.show(run)["attempts"][0]["pool"]

    client.drain(old_pool)
    agent.reconcile()

    assert [a["pool"] for a in client.show(run)["attempts"]] == [old_pool]
    assert "replaced" not in _types(client, run)


def test_lineage_records_the_image_digest_the_pod_ran(
    client: Client, experiments: Path, agent: Agent, api: ApiServer
) -> None:
    run = client.submit(experiments / "eval-smoke.yaml")["run"]["id"]
    agent.reconcile()
    pod = _kueue_admits_and_pod_runs(api, _job(api))
    ran = "sha256:" + "4e" * 32
    (trainer,) = pod["status"]["containerStatuses"]
    trainer["imageID"] = f"docker-pullable://us-docker.pkg.dev/acme/train/eval@{ran}"  # the kubelet's resolved image
    agent.reconcile()

    shown = client.show(run)
    assert shown["lineage"]["image_ran"] == ran
    assert shown["lineage"]["image_used"] is True
    assert [a["image_ran"] for a in shown["attempts"]] == [ran]
    pinned = shown["lineage"]["image_digest"]
    assert pinned != ran  # eval-smoke pins another digest: lineage says which one ran
    assert ran in shown["lineage"]["image_note"]
    assert pinned in shown["lineage"]["image_note"]
