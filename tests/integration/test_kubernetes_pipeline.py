"""A pipeline run (spec.parts) on Kubernetes pools under the agent, with the API server, Kueue and the kubelet
played by the test (tests/unit/render/apiserver.py): one JobSet with a replicated job per part, each part its
own attempt; and pipelines an earlier agent submitted part by part are re-adopted in that shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crossrail.client import Client
from crossrail.control.agent.loop import Agent, AgentConfig
from crossrail.executors.kubernetes import KubernetesExecutor
from crossrail.runtime.report import Reporter, replica_report

from ..unit.render.apiserver import ApiServer  # noqa: TID252 (tests are not a package on sys.path)
from ..unit.render.conftest import assert_valid  # noqa: TID252

CONFIG = AgentConfig(poll_s=0.1, fallback_wait_s=0.0, stop_grace_s=5.0, heartbeat_s=1.0)
NAMESPACE = "alignment"  # init's fleet maps the alignment team to its own namespace
PIPELINE = """\
apiVersion: crossrail/v1
kind: Experiment
metadata: {name: rl-k8s, team: alignment, owner: ada@example.com}
spec:
  stage: reinforcement_learning
  image: ghcr.io/crossrail/workloads@sha256:3f1c5e0a9b7d2c4e6f8a1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e
  code: {repo: https://github.com/acme/trainer, commit: auto}
  command: [python, -m, crossrail.workloads.rl]
  args: [--steps, "14"]
  dataset: {uri: DATA, version: v1}
  checkpoint: {dir: memory://crossrail-k8s/rl-k8s, format: crossrail-ckpt/v1}
  resources: {chips: 10}
  parts:
    sampler: {chips: 4, replicas: 2, prefer: tpu}
    reward: {chips: 1, prefer: gpu}
    learner: {chips: 1, prefer: gpu}
"""


@pytest.fixture
def api() -> ApiServer:
    return ApiServer()


@pytest.fixture
def pipeline(client: Client, checkout: Path) -> Path:
    """Every pool on Kubernetes with the workspace as a ReadWriteMany claim (the pods' dataset, and where the
    RL stages meet); the RL queue holds the two 4-chip samplers; checkpoints on object storage."""
    ws = client.workspace
    volume = f"kubernetes: {{volumes: [{{name: workspace, mount_path: {checkout}, claim: crossrail-workspace}}]}}"
    text = ws.fleet_path.read_text().replace("backend: local", f"backend: kubernetes\n      {volume}")
    rl_queue = "stage: reinforcement_learning\n      quota: {tpu-v5p: 4, h100: 4}"
    assert rl_queue in text
    ws.fleet_path.write_text(
        text.replace(rl_queue, "stage: reinforcement_learning\n      quota: {tpu-v5p: 8, h100: 4}")
    )
    policy = ws.policy_path
    policy.write_text(policy.read_text().replace("local_uri_schemes: [file]", "local_uri_schemes: [file, memory]"))
    (checkout / "data").mkdir()
    path = checkout / "rl-k8s.yaml"
    path.write_text(PIPELINE.replace("DATA", f"file://{checkout}/data"))
    return path


def _agent(client: Client, api: ApiServer) -> Agent:
    """An agent as `crossrail agent` starts it (a restart is a new one over the same cluster)."""
    client.service.reload_fleet()
    agent = Agent(client.service, KubernetesExecutor(client.service.fleet, api=api), client.workspace.root, CONFIG)
    agent.fleet_path = client.workspace.fleet_path
    return agent


def _parts(client: Client, run: str) -> dict[str, dict[str, Any]]:
    return {a["part"]: a for a in client.show(run)["attempts"]}


def _admit_and_run(api: ApiServer, obj: dict[str, Any], pod_labels: list[dict[str, str]]) -> None:
    """Kueue admits `obj` (a Workload it owns) and unsuspends it; the kubelet runs one pod per label set."""
    meta = obj["metadata"]
    owner = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": "2026-11-30T08:05:00Z"}
        for t in ("QuotaReserved", "Admitted")
    ]
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "status": {"conditions": conditions}}
    workload["metadata"] = {"name": f"wl-{meta['name']}", "namespace": NAMESPACE, "ownerReferences": [owner]}
    api.add(workload)
    for i, labels in enumerate(pod_labels):
        running = {"containerStatuses": [{"name": "trainer", "state": {"running": {}}}]}
        api.add(
            {
                "kind": "Pod",
                "metadata": {"name": f"{meta['name']}-{i}", "namespace": NAMESPACE, "labels": labels},
                "status": running,
            }
        )
    stored = api.get(obj["kind"], NAMESPACE, meta["name"])
    stored["spec"]["suspend"] = False
    stored["status"] = {"startTime": "2026-11-30T08:05:00Z"}


@pytest.mark.slow  # the JobSet CRD's schema takes seconds to compile
def test_a_pipeline_on_kubernetes_pools_is_one_jobset_with_a_replicated_job_per_part(
    client: Client, api: ApiServer, pipeline: Path
) -> None:
    agent = _agent(client, api)
    run = client.submit(pipeline)["run"]["id"]
    agent.reconcile()

    assert api.list("Job", NAMESPACE, "") == []  # no part went as its own Workload
    (jobset,) = api.list("JobSet", NAMESPACE, "")
    assert_valid({k: v for k, v in jobset.items() if k != "status"})  # against JobSet's CRD, unknown fields refused
    parts = _parts(client, run)
    assert set(parts) == {"sampler", "reward", "learner"}
    assert jobset["metadata"]["name"] == f"{run}-a{min(a['number'] for a in parts.values())}"
    jobs = {j["name"]: j for j in jobset["spec"]["replicatedJobs"]}
    assert set(jobs) == set(parts)
    # Two 4-chip samplers: two replicas of a 2x2x1 slice, not one linked 2x2x2 slice.
    assert jobs["sampler"]["replicas"] == 2
    sampler_pod = jobs["sampler"]["template"]["spec"]["template"]
    assert sampler_pod["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x2x1"
    assert jobs["sampler"]["template"]["spec"]["parallelism"] == 1
    for name, job in jobs.items():  # each part its own attempt, report prefix and pool
        pod = job["template"]["spec"]["template"]
        labels = pod["metadata"]["labels"]
        assert (labels["crossrail.dev/part"], labels["crossrail.dev/attempt"]) == (name, str(parts[name]["number"]))
        assert labels["crossrail.dev/pool"] == parts[name]["pool"]
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["CROSSRAIL_REPORT"] == replica_report(parts[name]["report_uri"], name, "$(CROSSRAIL_PART_REPLICA)")
        assert env["CROSSRAIL_PART"] == name
        (replica,) = [
            e["valueFrom"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == "CROSSRAIL_PART_REPLICA"
        ]
        assert replica == {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}}
        args = pod["spec"]["containers"][0]["args"]
        assert args[-2:] == ["--rendezvous", f"{pipeline.parent}/crossrail-rl/{run}"]  # one directory per run
    assert len({parts[n]["report_uri"] for n in parts}) == 3

    # Kueue admits the JobSet; each part's pods run: every part's attempt is running.
    pods = [{**job["template"]["spec"]["template"]["metadata"]["labels"]} for job in jobs.values()]
    _admit_and_run(api, jobset, pods)
    agent.reconcile()
    assert {n: a["state"] for n, a in _parts(client, run).items()} == dict.fromkeys(parts, "running")

    # The learner's replicated job succeeds: its attempt succeeds, the run with it, and the JobSet is deleted
    # once, taking the parts still running with it (cancelled: their pipeline ended).
    api.get("JobSet", NAMESPACE, jobset["metadata"]["name"])["status"]["replicatedJobsStatus"] = [
        {"name": "learner", "succeeded": 1, "active": 0, "failed": 0, "ready": 0, "suspended": 0}
    ]
    for _ in range(3):
        agent.reconcile()
    states = {n: a["state"] for n, a in _parts(client, run).items()}
    assert states == {"learner": "succeeded", "sampler": "cancelled", "reward": "cancelled"}
    assert client.show(run)["run"]["state"] == "succeeded"
    assert [d[:3] for d in api.deleted if d[0] == "JobSet"] == [("JobSet", NAMESPACE, jobset["metadata"]["name"])]


def test_each_replica_of_a_part_reports_under_its_own_prefix_and_the_agent_reads_them_all(
    client: Client, api: ApiServer, pipeline: Path
) -> None:
    """The agent's path gives each replica the prefix `crossrail render` shows (`<attempt's report>/parts/<part>/
    <replica>`), so two samplers' report objects never overwrite each other, and reads both back."""
    agent = _agent(client, api)
    run = client.submit(pipeline)["run"]["id"]
    agent.reconcile()
    (jobset,) = api.list("JobSet", NAMESPACE, "")
    jobs = {j["name"]: j for j in jobset["spec"]["replicatedJobs"]}
    sampler = client.show(run)["attempts"]
    (attempt,) = [a for a in sampler if a["part"] == "sampler"]
    env = {
        e["name"]: e.get("value")
        for e in jobs["sampler"]["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    prefixes = [env["CROSSRAIL_REPORT"].replace("$(CROSSRAIL_PART_REPLICA)", str(i)) for i in range(2)]
    assert prefixes == [f"{attempt['report_uri']}/parts/sampler/{i}" for i in range(2)]

    pods = [{**job["template"]["spec"]["template"]["metadata"]["labels"]} for job in jobs.values()]
    _admit_and_run(api, jobset, pods)
    for replica, prefix in enumerate(prefixes):  # what each sampler replica's trainer writes
        with Reporter(prefix, run=run, attempt=attempt["number"]) as reporter:
            reporter.metric("reward", 0.5 + replica, step=3)
            reporter.heartbeat(3 + replica)
    agent.reconcile()

    store = client.service.store
    assert sorted(s["value"] for s in store.metric_samples(run, "reward")) == [0.5, 1.5]  # neither replica lost
    beats = [e.data["step"] for e in store.events(run=run, types=["heartbeat"]) if e.attempt == attempt["number"]]
    assert beats == [3, None]  # both alive; the part's progress is its first replica's
    (record,) = [a for a in store.attempts(run) if a.number == attempt["number"]]
    cursor = record.report_cursor
    assert cursor == "m1:0;sampler=1,1"


def test_parts_an_earlier_agent_submitted_each_as_its_own_workload_are_re_adopted_in_that_shape(
    client: Client, api: ApiServer, pipeline: Path
) -> None:
    old = _agent(client, api)
    old._launch_parts = lambda run, atts: [old._launch(run, a) for a in atts]  # type: ignore[method-assign]
    run = client.submit(pipeline)["run"]["id"]
    old.reconcile()
    jobs, jobsets = api.list("Job", NAMESPACE, ""), api.list("JobSet", NAMESPACE, "")
    assert len(jobs) == 2  # reward and learner, each a Job of its own
    (linked,) = jobsets  # the two samplers as one 2x2x2 slice: the shape before pipelines were one JobSet
    assert [j["name"] for j in linked["spec"]["replicatedJobs"]] == ["slice"]
    for obj in [*jobs, *jobsets]:
        _admit_and_run(
            api, obj, [{k: v for k, v in obj["metadata"]["labels"].items() if k.startswith("crossrail.dev/")}]
        )

    new = _agent(client, api)  # the upgraded agent starts over the same cluster
    new.reconcile()
    parts = _parts(client, run)
    assert {n: a["state"] for n, a in parts.items()} == dict.fromkeys(parts, "running")
    assert len(api.list("JobSet", NAMESPACE, "")) == 1  # nothing submitted again
    assert len(api.list("Job", NAMESPACE, "")) == 2

    # The learner's own Job completes: observed there; each other part's object is stopped on its own.
    learner = next(
        j for j in jobs if j["metadata"]["labels"]["crossrail.dev/attempt"] == str(parts["learner"]["number"])
    )
    api.get("Job", NAMESPACE, learner["metadata"]["name"])["status"]["conditions"] = [
        {"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-30T09:00:00Z"}
    ]
    for _ in range(3):
        new.reconcile()
    states = {n: a["state"] for n, a in _parts(client, run).items()}
    assert states == {"learner": "succeeded", "sampler": "cancelled", "reward": "cancelled"}
    deleted = {d[2] for d in api.deleted}
    assert {o["metadata"]["name"] for o in [*jobs, *jobsets]} <= deleted


def test_parts_recorded_but_never_launched_go_as_one_jobset_after_a_restart(
    client: Client, api: ApiServer, pipeline: Path
) -> None:
    stopped = _agent(client, api)
    stopped._launch_parts = lambda run, atts: None  # type: ignore[method-assign]  # it stops between the two
    run = client.submit(pipeline)["run"]["id"]
    stopped.reconcile()
    assert api.list("JobSet", NAMESPACE, "") == []
    assert {a["state"] for a in client.show(run)["attempts"]} == {"starting"}

    _agent(client, api).reconcile()

    assert api.list("Job", NAMESPACE, "") == []
    (jobset,) = api.list("JobSet", NAMESPACE, "")
    assert {j["name"] for j in jobset["spec"]["replicatedJobs"]} == {"sampler", "reward", "learner"}
    assert len(client.show(run)["attempts"]) == 3  # the same attempts, none offered again
