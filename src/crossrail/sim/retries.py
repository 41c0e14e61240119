"""How the simulator ends an attempt and offers its run again: through crossrail.scheduling.decisions, as the agent.

The simulated executor says how an attempt ended (`succeeded`, `interrupted` by a failure, `preempted`);
this turns that into the agent's typed reasons (an interruption is a lost attempt, a stop for a drained
pool is `drained`), asks `decide_end` what follows, and remembers each run's ended attempts so the next
request avoids the same pool (`avoided_pool`) and backs off as long as a live retry would.
"""

from __future__ import annotations

from crossrail.core.attempts import EndReason, StopReason
from crossrail.scheduling.decisions import (
    SPENDS_RETRY,
    EndDecision,
    Ended,
    RetryBackoff,
    RetryPolicy,
    avoided_pool,
    decide_end,
)

SIM_RETRIES = RetryPolicy(max=None, backoff=RetryBackoff(initial_s=0.0, factor=1.0, max_s=0.0))
"""Simulated jobs retry every failure (they carry no spec.retries) and wait only the failure model's own
detection and rescheduling time (CheckpointModel.detect_s + reschedule_s); a simulation given a run's
`RetryPolicy` backs off exactly as the agent would."""

_STOPPED = {"preempted": EndReason.PREEMPTED, "drained": EndReason.DRAINED}
KEPT_SPENDS = 66
"""Failures past this many no longer change a decision: the back-off's exponent stops at 64 (`RetryBackoff.delay_s`)."""


class SimRetries:
    """Each simulated run's ended attempts, and the decision for each new end."""

    def __init__(self, policy: RetryPolicy = SIM_RETRIES) -> None:
        self.policy = policy
        self.history: dict[str, list[Ended]] = {}
        self._stopping: dict[str, StopReason] = {}

    def stop(self, run: str, reason: StopReason) -> None:
        """The scheduler stops `run` for `reason`; its end, when it comes, is recorded as that."""
        self._stopping[run] = reason

    def ended(
        self, run: str, number: int, pool: str, how: str, now: float, *, policy: RetryPolicy | None = None
    ) -> EndDecision:
        """The decision for attempt `number` of `run` on `pool` that ended `how` at `now`, under the run's own
        `policy` (its spec.retries) when it has one, else the simulation's."""
        stopped = self._stopping.pop(run, "preempted")
        if how == "succeeded":
            reason, detail = EndReason.SUCCEEDED, "exit 0"
        elif how == "interrupted":
            reason, detail = EndReason.LOST, "lost: interrupted by a failure"
        else:
            reason = _STOPPED.get(stopped, EndReason.PREEMPTED)
            detail = "preempted by crossrail" if reason is EndReason.PREEMPTED else "its pool was drained"
        retries = policy or self.policy
        earlier = self.history.setdefault(run, [])
        decision = decide_end(reason, detail, pool=pool, retries=retries, history=earlier, now=now)
        earlier.append(Ended(number, pool, reason, now))
        keep = max(KEPT_SPENDS, (retries.max or 0) + 1)
        if len(earlier) > 2 * keep:
            self.history[run] = _recent(earlier, keep)
        return decision

    def avoid_pool(self, run: str) -> str | None:
        """The pool `run`'s next attempt tries last (None for a run that has not ended an attempt)."""
        earlier = self.history.get(run)
        return avoided_pool(earlier[-1]) if earlier else None


def _recent(history: list[Ended], keep: int) -> list[Ended]:
    """What of a long history the decisions still read: its last `keep` failures (the count a finite
    `retries.max` and the back-off compare, both settled by then) and its last end (the pool to avoid). A
    run interrupted every few minutes for months would otherwise have each decision walk all its ends."""
    spent = [e for e in history if e.reason in SPENDS_RETRY][-keep:]
    last = history[-1]
    return spent if last.reason in SPENDS_RETRY else [*spent, last]
