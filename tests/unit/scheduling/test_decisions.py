"""The shared end-of-attempt decisions (crossrail.scheduling.decisions): pure functions of records and a time."""

from __future__ import annotations

import pytest

from crossrail.core import EndReason, EventType
from crossrail.core.attempts import AttemptStatus
from crossrail.scheduling.decisions import (
    Ended,
    EngineQueued,
    Move,
    RetryBackoff,
    RetryPolicy,
    decide_end,
    end_reason,
    heartbeat_silence_s,
    moves,
    next_offer,
    replan_due,
)


def status(phase: str = "exited", **fields: object) -> AttemptStatus:
    return AttemptStatus("r", 1, phase, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("observed", "run_state", "reason"),
    [
        pytest.param(status(exit_code=0), "running", EndReason.SUCCEEDED, id="exit-0"),
        pytest.param(status(exit_code=75), "running", EndReason.EXIT_TEMPFAIL, id="exit-75"),
        pytest.param(status(exit_code=3), "running", EndReason.EXIT_LISTED, id="a-listed-code"),
        pytest.param(status(exit_code=4), "running", EndReason.EXIT, id="another-code"),
        pytest.param(status(signal=9), "running", EndReason.SIGNAL, id="a-signal"),
        pytest.param(status("lost"), "running", EndReason.LOST, id="lost"),
        pytest.param(status("unplaced"), "admitted", EndReason.UNPLACED, id="unplaced"),
        pytest.param(status(signal=15, stopped_by="preempted"), "running", EndReason.PREEMPTED, id="preempted"),
        pytest.param(status(signal=15, stopped_by="drained"), "running", EndReason.DRAINED, id="drained"),
        pytest.param(status(exit_code=0), "cancelled", EndReason.CANCELLED, id="the-run-was-cancelled"),
        pytest.param(status("unplaced"), "suspended", EndReason.SUSPENDED, id="the-run-was-suspended"),
    ],
)
def test_an_observation_reads_as_one_typed_reason(observed: AttemptStatus, run_state: str, reason: EndReason) -> None:
    assert end_reason(observed, run_state, exit_codes=[3])[0] is reason


def failure(number: int, pool: str = "tpu-a", at: float = 0.0) -> Ended:
    return Ended(number, pool, EndReason.EXIT_TEMPFAIL, at)


def test_a_retryable_failure_spends_a_retry_avoids_its_pool_and_backs_off() -> None:
    policy = RetryPolicy(max=2, backoff=RetryBackoff(10.0, 2.0, 100.0))
    first = decide_end(EndReason.LOST, "lost", pool="tpu-a", retries=policy, history=[], now=50.0)
    assert (first.event, first.run_state, first.retry, first.attempt_state) == (
        EventType.FAILED,
        "queued",
        True,
        "lost",
    )
    assert (first.offer.avoid_pool, first.offer.not_before, first.backoff_s) == ("tpu-a", 60.0, 10.0)
    second = decide_end(EndReason.SIGNAL, "sig", pool="tpu-b", retries=policy, history=[failure(1)], now=80.0)
    assert (second.offer.avoid_pool, second.backoff_s) == ("tpu-b", 20.0)
    third = decide_end(EndReason.SIGNAL, "sig", pool="tpu-a", retries=policy, history=[failure(1), failure(2)], now=0)
    assert (third.retry, third.run_state, third.final) == (False, "failed", True)
    assert third.detail == "sig; no retries left (spec.retries.max = 2)"


@pytest.mark.parametrize("reason", [EndReason.PREEMPTED, EndReason.DRAINED, EndReason.REPLACED, EndReason.STALE_NUMBER])
def test_crossrails_own_stops_and_moves_requeue_at_once_without_spending_a_retry(reason: EndReason) -> None:
    spent = [failure(1)]
    decision = decide_end(reason, "", pool="tpu-a", retries=RetryPolicy(max=1), history=spent, now=5.0)
    assert (decision.retry, decision.run_state, decision.offer.not_before) == (True, "queued", None)
    after = decide_end(EndReason.LOST, "", pool="tpu-a", retries=RetryPolicy(max=1), history=[*spent], now=6.0)
    assert not after.retry  # the one retry was spent by the failure, not by the stop


def test_a_non_retryable_exit_fails_the_run_and_user_stops_leave_its_state_alone() -> None:
    failed = decide_end(EndReason.EXIT, "exit 4", pool="p", retries=RetryPolicy(max=5), history=[], now=0.0)
    assert (failed.retry, failed.run_state, failed.retryable) == (False, "failed", False)
    cancelled = decide_end(EndReason.CANCELLED, "", pool="p", retries=RetryPolicy(), history=[], now=0.0)
    assert (cancelled.event, cancelled.run_state) == (None, None)


def test_an_engines_refusals_back_off_by_how_many_came_in_a_row() -> None:
    policy = RetryPolicy(backoff=RetryBackoff(30.0, 2.0, 600.0))
    refused = [Ended(n, "ray", EndReason.UNPLACED, 100.0 * n) for n in (1, 2, 3)]
    assert next_offer(refused, policy).not_before == 300.0 + 120.0
    broken_by_a_run = [refused[0], Ended(2, "ray", EndReason.PREEMPTED, 200.0), refused[2]]
    assert next_offer(broken_by_a_run, policy).not_before == 300.0 + 30.0
    assert next_offer(broken_by_a_run, policy).avoid_pool is None  # the engine's refusal is no fault of the pool


def test_an_unbounded_policy_keeps_retrying_and_a_huge_count_stays_at_the_cap() -> None:
    policy = RetryPolicy(max=None, backoff=RetryBackoff(1.0, 10.0, 60.0))
    many = [failure(n) for n in range(1, 500)]
    decision = decide_end(EndReason.LOST, "", pool="tpu-a", retries=policy, history=many, now=0.0)
    assert (decision.retry, decision.backoff_s) == (True, 60.0)


def test_heartbeats_time_out_only_past_the_timeout() -> None:
    assert heartbeat_silence_s(100.0, 0.0, 160.0, 60.0) is None
    assert heartbeat_silence_s(100.0, 0.0, 161.0, 60.0) == 61.0
    assert heartbeat_silence_s(None, 50.0, 120.0, 60.0) == 70.0  # no heartbeat yet: silent since the start
    assert heartbeat_silence_s(None, None, 1e9, 60.0) is None  # not started: nothing to time out


def test_waiting_work_is_weighed_at_most_every_interval_and_moves_where_the_plan_puts_it() -> None:
    waiting = [EngineQueued("a", 1, "tpu-a"), EngineQueued("b", 1, "tpu-a")]
    due, checked = replan_due(waiting, {"a": 98.0, "gone": 1.0}, 100.0, 5.0)
    assert (due, checked) == ([EngineQueued("b", 1, "tpu-a")], {"a": 98.0, "b": 100.0})
    assert moves(waiting, {"a": "tpu-b", "b": "tpu-a"}) == [Move("a", 1, "tpu-a", "tpu-b")]
    assert moves(waiting, {"a": None}) == []


def test_the_event_log_documents_every_event_type_and_every_end_cause() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "events.md").read_text()
    missing = [str(t) for t in EventType if f"| `{t}` |" not in text]
    missing += [str(r) for r in EndReason if f"`{r}`" not in text]
    assert missing == []
