"""Job/JobSet status and Kueue Workload conditions read as attempt states, on status objects written
from the Kubernetes, JobSet and Kueue documentation (tests/fixtures/kubernetes/status/)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from crossrail.core.events import EventType
from crossrail.executors.kube_status import Observed, observe

from .conftest import FIXTURES, problems

STATUS = FIXTURES / "status"
SCENARIOS = sorted(p.stem for p in STATUS.glob("*.yaml"))


def load(name: str) -> tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]]:
    docs = list(yaml.safe_load_all((STATUS / f"{name}.yaml").read_text()))
    obj = next(d for d in docs if d["kind"] in ("Job", "JobSet"))
    workload = next((d for d in docs if d["kind"] == "Workload"), None)
    return obj, workload, [d for d in docs if d["kind"] == "Pod"]


def read(name: str) -> Observed:
    return observe(*load(name))


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.slow
def test_every_status_fixture_is_a_valid_object_of_its_kind(name: str) -> None:
    for doc in yaml.safe_load_all((STATUS / f"{name}.yaml").read_text()):
        assert problems(doc) == [], f"{name}: {doc['kind']}"


def test_a_job_waiting_for_quota_is_pending_with_kueues_reason() -> None:
    seen = read("pending-in-queue")
    assert seen.status.phase == "pending"  # nothing runs, so the agent expects no heartbeats yet
    assert seen.admission == "pending"
    assert seen.pending
    assert "insufficient unused quota for nvidia.com/gpu in flavor h100-pool" in seen.status.detail
    assert seen.events == []


def test_an_admitted_job_runs_on_the_flavor_kueue_chose() -> None:
    seen = read("admitted-running")
    assert (seen.status.phase, seen.admission, seen.pending) == ("running", "admitted", False)
    assert seen.status.started_at is not None
    assert "nvidia.com/gpu on h100-pool" in seen.status.detail
    assert "1 pod(s) active" in seen.status.detail
    kinds = [(e.type, e.data["condition"]) for e in seen.events]
    assert kinds == [(EventType.REPORTED, "QuotaReserved"), (EventType.ADMITTED, "Admitted")]
    assert seen.events[1].data["flavors"] == {"nvidia.com/gpu": "h100-pool"}
    assert (seen.events[1].run, seen.events[1].attempt) == ("posttrain-042-1", 1)


def test_a_completed_job_exits_zero_at_its_completion_time() -> None:
    seen = read("succeeded")
    assert (seen.status.phase, seen.status.exit_code, seen.status.signal) == ("exited", 0, None)
    assert seen.admission == "finished"
    assert seen.status.ended_at is not None
    assert seen.status.started_at is not None
    assert seen.status.ended_at - seen.status.started_at == 90 * 60


def test_a_failed_job_carries_the_trainers_exit_code_so_75_stays_retryable() -> None:
    seen = read("failed-exit-75")
    assert (seen.status.phase, seen.status.exit_code, seen.status.signal) == ("exited", 75, None)
    assert "BackoffLimitExceeded" in seen.status.detail


def test_an_oom_killed_trainer_reads_as_killed_by_sigkill() -> None:
    seen = read("failed-oom")
    assert (seen.status.phase, seen.status.exit_code, seen.status.signal) == ("exited", None, 9)
    assert "OOMKilled" in seen.status.detail


def test_a_failed_job_whose_pods_are_gone_is_lost() -> None:
    obj, workload, _ = load("failed-exit-75")
    seen = observe(obj, workload, [])
    assert seen.status.phase == "lost"
    assert "no pod recorded the trainer's exit" in seen.status.detail


def test_a_kueue_eviction_ends_the_attempt_as_a_sigterm_and_a_preemption_event() -> None:
    seen = read("evicted-preempted")
    assert (seen.status.phase, seen.status.signal, seen.status.stopped_by) == ("exited", 15, None)
    assert seen.admission == "evicted"
    assert "evicted by Kueue (Preempted)" in seen.status.detail
    (event,) = [e for e in seen.events if e.type is EventType.PREEMPTED]
    assert event.data["reason"] == "Preempted"
    assert (event.run, event.attempt) == ("rl-003-1", 2)


def test_an_admitted_job_whose_trainer_has_not_started_is_still_pending() -> None:
    obj, workload, pods = load("admitted-running")
    pods[0]["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ContainerCreating"}}
    seen = observe(obj, workload, pods)
    assert (seen.status.phase, seen.admission, seen.pending) == ("pending", "admitted", False)


def test_a_running_jobset_counts_active_pods_across_slices() -> None:
    seen = read("jobset-slice-running")
    assert (seen.status.phase, seen.admission) == ("running", "admitted")
    assert "google.com/tpu on tpu-v5p-pool" in seen.status.detail
    assert "2 pod(s) active" in seen.status.detail


def test_a_failed_jobset_reports_the_failed_hosts_exit_code() -> None:
    seen = read("jobset-failed")
    assert (seen.status.phase, seen.status.exit_code) == ("exited", 1)
    assert "FailedJobs" in seen.status.detail


def test_a_job_kueue_has_not_seen_yet_is_submitted_and_a_stop_is_remembered() -> None:
    obj, _, _ = load("pending-in-queue")
    seen = observe(obj, None, [])
    assert (seen.status.phase, seen.admission, seen.pending) == ("pending", "submitted", True)
    obj["metadata"]["annotations"] = {"crossrail.dev/stopped-by": "preempted"}
    obj["metadata"]["deletionTimestamp"] = "2026-11-30T08:10:00Z"
    stopped = observe(obj, None, [])
    assert (stopped.status.phase, stopped.status.stopped_by, stopped.status.signal) == ("exited", "preempted", 15)


def test_an_object_crossrail_did_not_label_is_refused() -> None:
    obj, _, _ = load("succeeded")
    del obj["metadata"]["labels"]["crossrail.dev/run"]
    with pytest.raises(ValueError, match=r"crossrail\.dev/run"):
        observe(obj, None, [])
