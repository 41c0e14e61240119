"""The Kubernetes executor against a real cluster with Kueue and JobSet installed (kind, GKE, ...).

Runs only when KUBECONFIG names a kubeconfig file; skipped otherwise (no API server can run on the
development machine). It applies the fleet's Kueue objects, runs a tiny CPU job that exits 0 and one that
exits 75 (the retryable code), and checks that crossrail reads both ends and the logs.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest

from crossrail.core.attempts import AttemptStatus, LaunchRequest
from crossrail.spec import Fleet, parse_document, parse_fleet

KUBECONFIG = os.environ.get("KUBECONFIG", "")
pytestmark = [
    pytest.mark.kubernetes,
    pytest.mark.skipif(
        not KUBECONFIG or not all(Path(p).is_file() for p in KUBECONFIG.split(os.pathsep)),
        reason="needs KUBECONFIG pointing at a cluster with Kueue and JobSet installed (none here)",
    ),
]
IMAGE = os.environ.get("CROSSRAIL_TEST_IMAGE", "busybox:1.36")
FLEET = """
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: live}
spec:
  kubernetes: {namespace: default, service_account: default}
  pools:
    - {name: live-cpu, accelerator: cpu, chip_type: any-cpu, chips: 4, chips_per_host: 4, backend: kubernetes}
  queues:
    - {name: crossrail-live-eval, stage: eval, quota: {live-cpu: 4}}
"""


def _request(run: str, command: str) -> LaunchRequest:
    spec = {"metadata": {"name": "live"}, "spec": {"stage": "eval", "image": IMAGE, "priority": "normal"}}
    env = {"EXPERIMENT_ID": "live", "CROSSRAIL_RUN_ID": run, "CROSSRAIL_SPEC": json.dumps(spec)}
    # Rendering refuses locations a pod would lose; the live commands write nothing there.
    env |= {
        "CROSSRAIL_CHECKPOINT_DIR": f"gs://crossrail-live/{run}",
        "CROSSRAIL_REPORT": f"gs://crossrail-live/{run}/r",
    }
    return LaunchRequest(run, 1, "live-cpu", "cpu", "any-cpu", 1, ["sh", "-c", command], env)


def _apply_kueue(fleet: Fleet) -> None:
    from kubernetes import client, config

    from crossrail.executors.render.kueue import render_kueue

    config.load_kube_config()
    custom = client.CustomObjectsApi()
    plurals = {
        "Topology": "topologies",
        "ResourceFlavor": "resourceflavors",
        "Cohort": "cohorts",
        "WorkloadPriorityClass": "workloadpriorityclasses",
        "ClusterQueue": "clusterqueues",
        "LocalQueue": "localqueues",
    }
    for obj in render_kueue(fleet):
        group, version = obj["apiVersion"].split("/") if "/" in obj["apiVersion"] else ("", obj["apiVersion"])
        ns = obj["metadata"].get("namespace")
        try:
            if obj["kind"] == "Namespace":
                client.CoreV1Api().create_namespace(obj)
            elif ns:
                custom.create_namespaced_custom_object(group, version, ns, plurals[obj["kind"]], obj)
            else:
                custom.create_cluster_custom_object(group, version, plurals[obj["kind"]], obj)
        except client.exceptions.ApiException as exc:
            if exc.status != 409:
                raise


def _wait(executor: object, run: str, timeout_s: float = 240.0) -> AttemptStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for status in executor.observe():  # type: ignore[attr-defined]
            if status.run == run and status.phase != "running":
                return status
        time.sleep(2)
    raise AssertionError(f"{run} did not end within {timeout_s} s")


def test_a_job_runs_through_kueue_and_its_exit_codes_come_back() -> None:
    from crossrail.executors.kubernetes import KubernetesExecutor

    fleet = parse_fleet(parse_document(FLEET, "live-fleet.yaml"))
    _apply_kueue(fleet)
    executor = KubernetesExecutor(fleet, allow_unpinned=True)
    tag = uuid.uuid4().hex[:6]
    ok, temp = f"live-ok-{tag}-1", f"live-tempfail-{tag}-1"
    try:
        executor.launch(_request(ok, "echo hello from crossrail; exit 0"))
        executor.launch(_request(temp, "echo capacity gone; exit 75"))
        done = _wait(executor, ok)
        assert (done.phase, done.exit_code) == ("exited", 0)
        assert "hello from crossrail" in executor.logs(ok, 1)
        failed = _wait(executor, temp)
        assert (failed.phase, failed.exit_code) == ("exited", 75)
        assert any(e.data.get("condition") == "Admitted" for e in executor.events())
    finally:
        executor.forget(ok, 1)
        executor.forget(temp, 1)


MIXED_FLEET = """
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: live-mixed}
spec:
  kubernetes: {namespace: default, service_account: default}
  pools:
    - {name: live-v5e, accelerator: tpu, chip_type: tpu-v5e, chips: 16, chips_per_host: 4, backend: kubernetes,
       topologies: [2x2, 4x4]}
    - {name: live-cpu, accelerator: cpu, chip_type: any-cpu, chips: 4, chips_per_host: 4, backend: kubernetes}
  queues:
    - {name: crossrail-live-mixed, stage: eval, quota: {live-v5e: 16, live-cpu: 4}}
"""


def test_a_cpu_job_in_a_queue_with_a_tpu_slice_flavor_is_admitted_onto_its_own_flavor() -> None:
    """The queue mixes a topology-aware TPU flavor with the plain CPU one: Kueue admits the CPU Job, as
    crossrail.executors.render.admission (the upstream-rule check) says it will, and it runs."""
    from crossrail.executors.kubernetes import KubernetesExecutor
    from crossrail.executors.render.admission import Kueue
    from crossrail.executors.render.kubernetes import render_kubernetes
    from crossrail.executors.render.kueue import render_kueue
    from crossrail.executors.render.workload import from_launch

    fleet = parse_fleet(parse_document(MIXED_FLEET, "live-mixed.yaml"))
    _apply_kueue(fleet)
    run = f"live-mixed-{uuid.uuid4().hex[:6]}-1"
    request = _request(run, "echo admitted; exit 0")
    predicted = Kueue(render_kueue(fleet)).admit(
        render_kubernetes(from_launch(request, allow_unpinned=True), fleet, fleet.pool("live-cpu"))
    )
    assert predicted.flavor_set() == {"live-cpu"}
    executor = KubernetesExecutor(fleet, allow_unpinned=True)
    try:
        executor.launch(request)
        done = _wait(executor, run)
        assert (done.phase, done.exit_code) == ("exited", 0)
        assert "admitted" in executor.logs(run, 1)
    finally:
        executor.forget(run, 1)


def test_a_pipelines_parts_run_as_one_jobset_and_each_part_ends_as_its_own_attempt() -> None:
    """Two CPU parts, each its own attempt, launched together: one JobSet through Kueue, each part's exit
    read back from its own ReplicatedJob and pods."""
    from crossrail.executors.kubernetes import KubernetesExecutor
    from crossrail.executors.render.pipeline import PART_ENV

    fleet = parse_fleet(parse_document(FLEET, "live-fleet.yaml"))
    _apply_kueue(fleet)
    executor = KubernetesExecutor(fleet, allow_unpinned=True)
    run = f"live-parts-{uuid.uuid4().hex[:6]}-1"
    parts = {"producer": {"chips": 1}, "consumer": {"chips": 1}}
    requests = []
    for number, name in enumerate(parts, 1):
        base = _request(run, f"echo part {name}; exit 0")
        spec = json.loads(base.env["CROSSRAIL_SPEC"])
        spec["spec"]["parts"] = parts
        env = {**base.env, PART_ENV: name, "CROSSRAIL_SPEC": json.dumps(spec), "CROSSRAIL_ATTEMPT": str(number)}
        requests.append(LaunchRequest(run, number, "live-cpu", "cpu", "any-cpu", 1, base.command, env))
    try:
        executor.launch_parts(requests)
        assert len(executor.api.list("JobSet", "default", f"crossrail.dev/run={run}")) == 1
        deadline, ended = time.monotonic() + 240.0, {}
        while len(ended) < 2 and time.monotonic() < deadline:
            ended = {s.attempt: s for s in executor.observe() if s.run == run and s.phase not in ("pending", "running")}
            time.sleep(2)
        assert {n: (s.phase, s.exit_code) for n, s in ended.items()} == {1: ("exited", 0), 2: ("exited", 0)}
        assert "part consumer" in executor.logs(run, 2)
    finally:
        executor.forget(run, 1)
        executor.forget(run, 2)
