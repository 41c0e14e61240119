"""Each part of a pipeline's JobSet reads as its own attempt: from its replicated job's status and its own pods."""

from __future__ import annotations

from typing import Any

from crossrail.executors.kube_status import observe_part, part_attempts

ENDED = "2026-11-30T09:00:00Z"


def jobset(status: dict[str, Any]) -> dict[str, Any]:
    def job(name: str, attempt: int, replicas: int) -> dict[str, Any]:
        labels = {"crossrail.dev/run": "rl-1", "crossrail.dev/attempt": str(attempt), "crossrail.dev/part": name}
        return {
            "name": name,
            "replicas": replicas,
            "template": {"spec": {"template": {"metadata": {"labels": labels}}}},
        }

    labels = {"crossrail.dev/run": "rl-1", "crossrail.dev/attempt": "3"}
    jobs = [job("sampler", 3, 2), job("learner", 4, 1)]
    meta = {"name": "rl-1-a3", "namespace": "ns", "uid": "u1", "labels": labels}
    return {"kind": "JobSet", "metadata": meta, "spec": {"replicatedJobs": jobs}, "status": status}


def exited(code: int) -> dict[str, Any]:
    terminated = {"exitCode": code, "reason": "Error", "finishedAt": ENDED}
    return {"status": {"containerStatuses": [{"name": "trainer", "state": {"terminated": terminated}}]}}


def test_a_jobset_names_each_part_with_its_attempt_and_other_objects_name_none() -> None:
    assert part_attempts(jobset({})) == {"sampler": 3, "learner": 4}
    assert part_attempts({"kind": "Job", "metadata": {"labels": {"crossrail.dev/attempt": "1"}}}) == {}


def test_a_part_succeeds_when_every_replica_did_while_the_others_run() -> None:
    status = {
        "replicatedJobsStatus": [{"name": "sampler", "succeeded": 1, "active": 1}, {"name": "learner", "succeeded": 1}]
    }
    obj = jobset(status)

    assert observe_part(obj, "learner", 4, None, []).status.phase == "exited"
    assert observe_part(obj, "learner", 4, None, []).status.exit_code == 0
    sampler = observe_part(obj, "sampler", 3, None, []).status  # one of its two replicas is still at work
    assert (sampler.attempt, sampler.phase) == (3, "pending")


def test_a_failed_part_ends_with_its_exit_and_the_part_the_jobset_took_with_it_is_lost() -> None:
    failed = {"type": "Failed", "status": "True", "reason": "FailedJobs", "lastTransitionTime": ENDED}
    status = {"conditions": [failed], "replicatedJobsStatus": [{"name": "learner", "failed": 1}]}
    obj = jobset(status)

    learner = observe_part(obj, "learner", 4, None, [exited(3)]).status
    assert (learner.phase, learner.exit_code) == ("exited", 3)
    sampler = observe_part(obj, "sampler", 3, None, []).status
    assert (sampler.attempt, sampler.phase) == (3, "lost")
    assert "ended before part sampler did (FailedJobs)" in sampler.detail


def test_every_part_of_a_completed_jobset_succeeded() -> None:
    done = {"type": "Completed", "status": "True", "lastTransitionTime": ENDED}
    obj = jobset({"conditions": [done]})

    for part, attempt in part_attempts(obj).items():
        status = observe_part(obj, part, attempt, None, []).status
        assert (status.attempt, status.phase, status.exit_code) == (attempt, "exited", 0)
