"""KubernetesExecutor end to end against an in-memory API server: submit suspended to the LocalQueue,
read Kueue's admission, stop with a reason, withdraw and move a pending attempt to another pool."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from crossrail.control.executor import Executor
from crossrail.core.attempts import LaunchRequest
from crossrail.core.clock import ManualClock
from crossrail.core.events import EventType
from crossrail.errors import ConflictError, SpecError, UsageError
from crossrail.executors.kubernetes import KubernetesExecutor, OfficialApi
from crossrail.spec import Fleet

from .apiserver import ApiServer
from .builders import IMAGE, experiment
from .conftest import FIXTURES, assert_valid


def request(pool: str = "h100-pool", chips: int = 8, attempt: int = 1, accelerator: str = "gpu") -> LaunchRequest:
    """What the agent's launch_request builds (crossrail.control.attempts), for run posttrain-042-3."""
    exp = experiment("post_training", chips, name="posttrain-042")
    spec = {**exp.model_dump(mode="json", by_alias=True), "run": "posttrain-042-3", "attempt": attempt}
    env = {
        "LOG_LEVEL": "info",
        "TRAINING_BACKEND": accelerator,
        "EXPERIMENT_ID": "posttrain-042",
        "CROSSRAIL_RUN_ID": "posttrain-042-3",
        "CROSSRAIL_ATTEMPT": str(attempt),
        "CROSSRAIL_CHECKPOINT_DIR": "gs://acme-models/checkpoints/posttrain-042/posttrain-042-3",
        "CROSSRAIL_CONFIG": "gs://acme-models/configs/posttrain-042.yaml",
        "CROSSRAIL_DATASET": "gs://acme-data/sft/v3/",
        "CROSSRAIL_REPORT": "gs://acme-models/reports/posttrain-042-3/1",
        "CROSSRAIL_SPEC": json.dumps(spec, sort_keys=True),
        "CROSSRAIL_HEARTBEAT_S": "30",
    }
    command = ["python", "-m", "trainer.run", "--steps", "200"]
    return LaunchRequest("posttrain-042-3", attempt, pool, accelerator, "h100", chips, command, env)


def kueue_admits(api: ApiServer, fixture: str = "admitted-running") -> None:
    """Play Kueue: a Workload owned by the submitted Job, with the fixture's conditions."""
    (job,) = api.list("Job", "default", "crossrail.dev/run")
    workload = next(
        d for d in yaml.safe_load_all((FIXTURES / "status" / f"{fixture}.yaml").read_text()) if d["kind"] == "Workload"
    )
    workload["metadata"]["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
    workload["metadata"]["name"] = f"job-{job['metadata']['name']}-abcde"
    api.add(workload)


def trainer_starts(api: ApiServer) -> None:
    """Play the kubelet: the attempt's pod with its trainer container running."""
    pod = list(yaml.safe_load_all((FIXTURES / "status" / "admitted-running.yaml").read_text()))[2]
    pod["metadata"]["labels"] = {"crossrail.dev/run": "posttrain-042-3", "crossrail.dev/attempt": "1"}
    api.add(pod)


@pytest.fixture
def api() -> ApiServer:
    return ApiServer()


@pytest.fixture
def executor(gke_fleet: Fleet, api: ApiServer) -> KubernetesExecutor:
    return KubernetesExecutor(gke_fleet, api=api, clock=ManualClock(1000.0))


def test_it_has_every_method_of_the_executor_protocol(executor: KubernetesExecutor) -> None:
    members = [m for m in vars(Executor) if not m.startswith("_")]
    assert members
    for name in members:
        if isinstance(vars(Executor)[name], property):  # capabilities: data, not a method
            assert hasattr(executor, name), name
            continue
        assert callable(getattr(executor, name)), name


def test_launch_submits_a_suspended_job_to_the_stage_queue_once(executor: KubernetesExecutor, api: ApiServer) -> None:
    status = executor.launch(request())
    assert (status.run, status.attempt, status.phase) == ("posttrain-042-3", 1, "pending")
    assert "Kueue has not created its Workload yet" in status.detail
    again = executor.launch(request())
    assert again.phase == "pending"
    (job,) = api.list("Job", "default", "")
    assert_valid(job)
    assert job["spec"]["suspend"] is True
    assert job["spec"]["backoffLimit"] == 0
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "post-training"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["command"] == ["python", "-m", "trainer.run", "--steps", "200"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CROSSRAIL_REPORT"] == "gs://acme-models/reports/posttrain-042-3/1"
    assert env["TRAINING_BACKEND"] == "gpu"


def test_the_report_secret_reaches_the_pod_only_through_a_secret_the_job_owns(
    executor: KubernetesExecutor, api: ApiServer
) -> None:
    secret = "5e" * 32
    launch = request()
    launch.env["CROSSRAIL_REPORT"] = "https://crossrail.example.com/v1/ingest/posttrain-042-3/1"
    launch.env["CROSSRAIL_REPORT_SECRET"] = secret
    assert executor.launch(launch).phase == "pending"
    assert executor.launch(launch).phase == "pending"  # a relaunch finds both and makes nothing twice
    (job,) = api.list("Job", "default", "")
    assert_valid(job)
    assert secret not in json.dumps(job)
    assert secret not in yaml.safe_dump(executor.render(launch))
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    ref = {"secretKeyRef": {"name": "posttrain-042-3-a1-report", "key": "secret"}}
    assert env["CROSSRAIL_REPORT_SECRET"] == {"name": "CROSSRAIL_REPORT_SECRET", "valueFrom": ref}
    (stored,) = [o for (kind, _, _), o in api.objects.items() if kind == "Secret"]
    assert stored["metadata"]["name"] == "posttrain-042-3-a1-report"
    assert stored["stringData"] == {"secret": secret}
    (owner,) = stored["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", job["metadata"]["name"], job["metadata"]["uid"])


def test_kueue_admission_shows_in_status_and_as_events_once(executor: KubernetesExecutor, api: ApiServer) -> None:
    executor.launch(request())
    kueue_admits(api)
    (status,) = executor.observe()
    assert status.phase == "pending"  # admitted, but the trainer has not started
    assert "admitted by Kueue (nvidia.com/gpu on h100-pool)" in status.detail
    trainer_starts(api)
    (status,) = executor.observe()
    assert status.phase == "running"
    events = executor.events()
    assert [e.type for e in events] == [EventType.REPORTED, EventType.ADMITTED]
    assert events[1].data["flavors"] == {"nvidia.com/gpu": "h100-pool"}
    assert executor.events() == []


def test_stop_records_the_reason_then_deletes_with_the_grace(executor: KubernetesExecutor, api: ApiServer) -> None:
    executor.launch(request())
    kueue_admits(api)
    executor.stop("posttrain-042-3", 1, 45.0, "preempted")
    assert api.deleted == [("Job", "default", "posttrain-042-3-a1", 45)]
    (status,) = executor.observe()
    assert (status.phase, status.stopped_by, status.signal, status.ended_at) == ("exited", "preempted", 15, 1000.0)
    executor.stop("posttrain-042-3", 1, 45.0, "cancelled")  # ended: nothing more happens
    assert len(api.deleted) == 1
    executor.forget("posttrain-042-3", 1)
    assert executor.observe() == []
    with pytest.raises(UsageError):
        executor.stop("posttrain-042-3", 1, -1, "preempted")


def test_a_pending_attempt_moves_to_a_tpu_pool(executor: KubernetesExecutor, api: ApiServer) -> None:
    executor.launch(request())
    moved = executor.move(request(pool="tpu-v5p-pool", accelerator="tpu"))
    assert moved.phase == "pending"
    assert api.list("Job", "default", "") == []
    (jobset,) = api.list("JobSet", "default", "")
    assert jobset["metadata"]["labels"]["crossrail.dev/pool"] == "tpu-v5p-pool"
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"google.com/tpu": "4"}
    assert {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}["TRAINING_BACKEND"] == "tpu"


def test_an_admitted_attempt_is_neither_withdrawn_nor_moved(executor: KubernetesExecutor, api: ApiServer) -> None:
    executor.launch(request())
    kueue_admits(api)
    assert executor.withdraw("posttrain-042-3", 1) is False
    with pytest.raises(ConflictError, match="already holds quota"):
        executor.move(request(pool="tpu-v5p-pool", accelerator="tpu"))
    assert len(api.list("Job", "default", "")) == 1
    assert api.deleted == []


def test_a_move_that_cannot_render_deletes_nothing(executor: KubernetesExecutor, api: ApiServer) -> None:
    executor.launch(request())
    with pytest.raises(SpecError, match="no slice shape"):
        executor.move(request(pool="tpu-v5p-pool", chips=6, accelerator="tpu"))
    assert len(api.list("Job", "default", "")) == 1


def test_a_failed_attempt_reports_the_exit_code_and_its_logs(executor: KubernetesExecutor, api: ApiServer) -> None:
    executor.launch(request())
    job = api.get("Job", "default", "posttrain-042-3-a1")
    failed = next(yaml.safe_load_all((FIXTURES / "status" / "failed-exit-75.yaml").read_text()))
    job["status"] = failed["status"]
    pod = list(yaml.safe_load_all((FIXTURES / "status" / "failed-exit-75.yaml").read_text()))[1]
    pod["metadata"]["labels"] = {"crossrail.dev/run": "posttrain-042-3", "crossrail.dev/attempt": "1"}
    api.add(pod)
    api.pod_logs[pod["metadata"]["name"]] = "step 120\ncapacity gone, exiting 75\n"
    (status,) = executor.observe()
    assert (status.phase, status.exit_code) == ("exited", 75)
    assert "exiting 75" in executor.logs("posttrain-042-3", 1)
    assert executor.logs("posttrain-042-3", 9) == ""


def test_an_attempt_that_cannot_render_is_lost_with_the_reason_until_forgotten(
    executor: KubernetesExecutor, api: ApiServer
) -> None:
    status = executor.launch(request(chips=12))  # one and a half 8-GPU hosts
    assert status.phase == "lost"
    assert "cannot be rendered for pool h100-pool" in status.detail
    assert "12 chips are not whole 8-chip hosts" in status.detail
    assert executor.observe() == [status]
    assert api.objects == {}
    executor.forget("posttrain-042-3", 1)
    assert executor.observe() == []
    unknown = executor.launch(request(pool="nope"))
    assert (unknown.phase, "no pool 'nope'" in unknown.detail) == ("lost", True)
    with pytest.raises(UsageError, match="no pool 'nope'"):
        executor.render(request(pool="nope"))


@pytest.mark.slow
def test_a_two_host_gpu_attempt_is_one_trainjob_read_back_through_its_node_pods(
    executor: KubernetesExecutor, api: ApiServer
) -> None:
    executor.launch(request(chips=16))
    job = api.get("TrainJob", "default", "posttrain-042-3-a1")
    assert_valid(job)
    assert (job["spec"]["trainer"]["numNodes"], job["spec"]["trainer"]["numProcPerNode"]) == (2, 8)
    assert api.list("Job", "default", "") == []
    failed = next(yaml.safe_load_all((FIXTURES / "status" / "failed-exit-75.yaml").read_text()))
    job["status"] = {"conditions": [{**failed["status"]["conditions"][0], "type": "Failed"}]}
    pod = list(yaml.safe_load_all((FIXTURES / "status" / "failed-exit-75.yaml").read_text()))[1]
    pod["metadata"]["labels"] = {"crossrail.dev/run": "posttrain-042-3", "crossrail.dev/attempt": "1"}
    for c in [*pod["spec"]["containers"], *pod["status"]["containerStatuses"]]:
        c["name"] = "node"  # Trainer's container name
    api.add(pod)
    api.pod_logs[pod["metadata"]["name"]] = "rank 3 lost its peer, exiting 75\n"
    (status,) = executor.observe()
    assert (status.phase, status.exit_code) == ("exited", 75)
    assert "exiting 75" in executor.logs("posttrain-042-3", 1)


def test_without_the_k8s_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    with pytest.raises(UsageError, match=r"crossrail\[k8s\]"):
        OfficialApi()


UID_A, UID_B = "01kdvdna3v000g40r40m30e209", "01kdvdna3v7zzzzzzzzzzzzzzz"


def of_run(uid: str, attempt: int = 1) -> LaunchRequest:
    """Run posttrain-042-3 of one store: another store sharing the namespace has a run of that id too."""
    launch = request(attempt=attempt)
    launch.env["CROSSRAIL_RUN_UID"] = uid
    return launch


def test_two_stores_sharing_a_namespace_never_take_each_others_objects_of_the_same_run_id(
    gke_fleet: Fleet, api: ApiServer
) -> None:
    uids = {"a": UID_A, "b": UID_B}
    a = KubernetesExecutor(gke_fleet, api=api, clock=ManualClock(1000.0), run_uid=lambda run: uids["a"])
    b = KubernetesExecutor(gke_fleet, api=api, clock=ManualClock(1000.0), run_uid=lambda run: uids["b"])
    assert a.launch(of_run(UID_A)).phase == "pending"
    (job,) = api.list("Job", "default", "")
    assert job["metadata"]["labels"]["crossrail.dev/run-uid"] == UID_A
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "posttrain-042-3-a1-0-x", "namespace": "default"}}
    pod["metadata"]["labels"] = {**job["metadata"]["labels"]}
    api.add(pod)
    api.pod_logs["posttrain-042-3-a1-0-x"] = "store a's step 10\n"

    assert b.observe() == []  # the object of the same name is store a's
    with pytest.raises(ConflictError) as refused:
        b.launch(of_run(UID_B))
    message = str(refused.value)
    assert UID_A in message
    assert UID_B in message
    assert "namespace" in message
    b.stop("posttrain-042-3", 1, 0.0, "cancelled")
    b.forget("posttrain-042-3", 1)
    assert b.withdraw("posttrain-042-3", 1) is False
    assert b.logs("posttrain-042-3", 1) == ""
    assert api.deleted == []
    assert [o["metadata"]["uid"] for o in api.list("Job", "default", "")] == [job["metadata"]["uid"]]

    restarted = KubernetesExecutor(gke_fleet, api=api, clock=ManualClock(1000.0), run_uid=lambda run: uids["a"])
    assert [(s.run, s.attempt, s.phase) for s in restarted.observe()] == [("posttrain-042-3", 1, "pending")]
    assert "store a's step 10" in restarted.logs("posttrain-042-3", 1)
    assert restarted.launch(of_run(UID_A)).phase == "pending"  # its own object: found, nothing made twice
    assert len(api.list("Job", "default", "")) == 1


def test_an_object_without_a_uid_is_not_taken_for_a_run_that_has_one(gke_fleet: Fleet, api: ApiServer) -> None:
    legacy = KubernetesExecutor(gke_fleet, api=api, clock=ManualClock(1000.0))
    legacy.launch(request())  # a run from before uids: no run-uid label
    (job,) = api.list("Job", "default", "")
    assert "crossrail.dev/run-uid" not in job["metadata"]["labels"]
    assert [s.run for s in legacy.observe()] == ["posttrain-042-3"]  # a run without a uid matches by id alone
    current = KubernetesExecutor(gke_fleet, api=api, clock=ManualClock(1000.0), run_uid=lambda run: UID_B)
    assert current.observe() == []
    with pytest.raises(ConflictError, match="none \\(a run from before uids\\)"):
        current.launch(of_run(UID_B))
