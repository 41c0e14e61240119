"""What happens to a run when one of its attempts ends: pure rules over plain records and a time.

The agent (crossrail.control.agent) and the simulator (crossrail.sim.simulation) both call these, so a
retry avoids the same pool and backs off as long in simulation as on the live fleet:

  1. `end_reason` reads an executor's observation as a typed `EndReason` and a sentence for people;
  2. `decide_end` turns the reason, the run's retry policy and its earlier attempts into an `EndDecision`:
     the attempt's state, the run's next state, whether a retry is spent, which pool the next attempt
     avoids and when it may be offered again (its back-off);
  3. `next_offer` answers the same two questions later from the attempts alone (an agent restarted after
     the end, or any pass that asks again): where not to go, and not before when;
  4. `heartbeat_silence_s` and `moves` decide the two things the agent watches between ends: an attempt
     whose heartbeats stopped, and attempts waiting in an engine's queue that a better pool should take.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crossrail.core.attempts import AttemptState, AttemptStatus, EndReason
from crossrail.core.events import EventType, RunState
from crossrail.spec import experiment

EX_TEMPFAIL = 75
"""The exit code a trainer uses to ask for a retry (docs/runtime.md)."""

ATTEMPT_STATE: dict[EndReason, AttemptState] = {
    EndReason.SUCCEEDED: AttemptState.SUCCEEDED,
    EndReason.EXIT_TEMPFAIL: AttemptState.FAILED,
    EndReason.EXIT_LISTED: AttemptState.FAILED,
    EndReason.EXIT: AttemptState.FAILED,
    EndReason.SIGNAL: AttemptState.FAILED,
    EndReason.LOST: AttemptState.LOST,
    EndReason.HEARTBEAT_TIMEOUT: AttemptState.LOST,
    EndReason.LAUNCH_FAILED: AttemptState.LOST,
    EndReason.PREEMPTED: AttemptState.PREEMPTED,
    EndReason.DRAINED: AttemptState.PREEMPTED,
    EndReason.UNPLACED: AttemptState.UNPLACED,
    EndReason.REPLACED: AttemptState.UNPLACED,
    EndReason.STALE_NUMBER: AttemptState.UNPLACED,
    EndReason.CANCELLED: AttemptState.CANCELLED,
    EndReason.SUSPENDED: AttemptState.SUSPENDED,
}
"""The attempt state each reason is recorded with."""

SPENDS_RETRY = frozenset(
    {
        EndReason.EXIT_TEMPFAIL,
        EndReason.EXIT_LISTED,
        EndReason.SIGNAL,
        EndReason.LOST,
        EndReason.HEARTBEAT_TIMEOUT,
        EndReason.LAUNCH_FAILED,
    }
)
"""Retryable failures: each spends one of `spec.retries.max`."""

REQUEUES_FREE = frozenset(
    {EndReason.PREEMPTED, EndReason.DRAINED, EndReason.UNPLACED, EndReason.REPLACED, EndReason.STALE_NUMBER}
)
"""Ends that are crossrail's or the engine's doing: the run goes back to its queue, no retry spent."""

BACKS_OFF = SPENDS_RETRY | {EndReason.UNPLACED}
"""Ends after which the next attempt waits out `spec.retries.backoff` (preemptions, drains and moves do not)."""

AVOIDS_POOL = SPENDS_RETRY | {EndReason.EXIT, EndReason.PREEMPTED, EndReason.DRAINED}
"""Ends whose pool the next attempt tries last."""

BY_USER = frozenset({EndReason.CANCELLED, EndReason.SUSPENDED})


_SPEC_BACKOFF = experiment.Backoff()
"""`spec.retries.backoff` as written when a run says nothing: the one place its defaults are set."""


@dataclass(frozen=True)
class RetryBackoff:
    """The wait before the next attempt after the n-th backing-off end: initial * factor**(n-1), at most max
    (a run's `spec.retries.backoff`, in seconds)."""

    initial_s: float = _SPEC_BACKOFF.initial
    factor: float = _SPEC_BACKOFF.factor
    max_s: float = _SPEC_BACKOFF.max

    def delay_s(self, ends: int) -> float:
        if ends <= 0:
            return 0.0
        exponent = min(ends - 1, 64)  # past this the cap holds anyway; keeps the power finite
        return float(min(self.initial_s * self.factor**exponent, self.max_s))


@dataclass(frozen=True)
class RetryPolicy:
    """A run's `spec.retries`: how many failures it may retry (None: any number), which exit codes are
    retryable besides 75, and its back-off."""

    max: int | None = 0
    exit_codes: tuple[int, ...] = ()
    backoff: RetryBackoff = field(default_factory=RetryBackoff)

    @classmethod
    def from_spec(cls, retries: Mapping[str, Any] | None) -> RetryPolicy:
        """From a recorded experiment's `spec.retries` (validated at submit; older records lack `backoff`)."""
        retries = retries or {}
        back = retries.get("backoff") or {}
        backoff = RetryBackoff(
            initial_s=float(back.get("initial", _SPEC_BACKOFF.initial)),
            factor=float(back.get("factor", _SPEC_BACKOFF.factor)),
            max_s=float(back.get("max", _SPEC_BACKOFF.max)),
        )
        codes = tuple(int(c) for c in retries.get("exit_codes") or ())
        return cls(max=int(retries.get("max") or 0), exit_codes=codes, backoff=backoff)


@dataclass(frozen=True)
class Ended:
    """An earlier attempt of the run as the decisions need it: where it ran, why and when it ended."""

    number: int
    pool: str
    reason: EndReason
    ended_at: float


@dataclass(frozen=True)
class NextOffer:
    """When a queued run may be offered to the scheduling core again, and which pool it tries last."""

    not_before: float | None = None
    avoid_pool: str | None = None

    def waiting(self, now: float) -> bool:
        return self.not_before is not None and now < self.not_before


@dataclass(frozen=True)
class EndDecision:
    """What one attempt's end means for its run; `event` is the end's event type (None: the run was
    cancelled or suspended, whose command recorded it) and `run_state` the run's next state (None: unchanged)."""

    reason: EndReason
    detail: str
    attempt_state: AttemptState
    event: EventType | None
    run_state: RunState | None
    retryable: bool
    retry: bool
    offer: NextOffer = NextOffer()
    ended_at: float = 0.0

    @property
    def final(self) -> bool:
        return not self.retry

    @property
    def backoff_s(self) -> float:
        return 0.0 if self.offer.not_before is None else self.offer.not_before - self.ended_at

    def data(self, pool: str) -> dict[str, Any]:
        """The end event's payload: the typed reason beside the sentence, and what follows."""
        out: dict[str, Any] = {"pool": pool, "cause": str(self.reason), "reason": self.detail}
        if self.event is not EventType.SUCCEEDED:
            out |= {"retryable": self.retryable, "final": self.final}
        if self.retry:
            out |= {"backoff_s": round(self.backoff_s, 3), "avoid_pool": self.offer.avoid_pool}
        return out


def end_reason(status: AttemptStatus, run_state: str, exit_codes: Iterable[int] = ()) -> tuple[EndReason, str]:  # noqa: PLR0911 (one return per rule)
    """The exit-code contract (docs/runtime.md): 0 succeeded; 75 retryable; stopped by crossrail -> as asked;
    never placed by the engine -> unplaced; another signal or lost -> retryable; any other code fails,
    retried only if listed in spec.retries.exit_codes."""
    stopped = status.stopped_by
    if stopped in ("cancelled", "suspended") or run_state in ("cancelled", "suspended"):
        why = stopped or run_state
        return EndReason(why), f"stopped by crossrail ({why})"
    if stopped == "preempted":
        return EndReason.PREEMPTED, "preempted by crossrail"
    if stopped == "drained":
        return EndReason.DRAINED, "stopped by crossrail: its pool was drained"
    if status.phase == "unplaced":
        return EndReason.UNPLACED, f"not placed: {status.detail or 'no room'}"
    if status.phase == "lost":
        return EndReason.LOST, f"lost: {status.detail or 'no exit status'}"
    if status.signal is not None:
        return EndReason.SIGNAL, f"killed by signal {status.signal}"
    code = status.exit_code
    if code == 0:
        return EndReason.SUCCEEDED, "exit 0"
    if code == EX_TEMPFAIL:
        return EndReason.EXIT_TEMPFAIL, "exit 75 (EX_TEMPFAIL): retryable"
    if code in set(exit_codes):
        return EndReason.EXIT_LISTED, f"exit {code}, listed in spec.retries.exit_codes"
    return EndReason.EXIT, (
        f"exit {code}: a failure of the training code, not retried unless listed in spec.retries.exit_codes"
    )


def decide_end(
    reason: EndReason, detail: str, *, pool: str, retries: RetryPolicy, history: Sequence[Ended], now: float
) -> EndDecision:
    """The decision for an attempt on `pool` that ended at `now` for `reason`; `history` holds the run's
    earlier ended attempts (not this one)."""
    state = ATTEMPT_STATE[reason]
    if reason is EndReason.SUCCEEDED:
        return EndDecision(reason, detail, state, EventType.SUCCEEDED, RunState.SUCCEEDED, False, False, ended_at=now)
    if reason in BY_USER:
        return EndDecision(reason, detail, state, None, None, False, False, ended_at=now)
    retryable = reason in SPENDS_RETRY or reason in REQUEUES_FREE
    retry = reason in REQUEUES_FREE or (
        reason in SPENDS_RETRY and (retries.max is None or _spent(history) < retries.max)
    )
    if reason in SPENDS_RETRY and not retry:
        detail = f"{detail}; no retries left (spec.retries.max = {retries.max})"
    event = {AttemptState.PREEMPTED: EventType.PREEMPTED, AttemptState.UNPLACED: EventType.UNPLACED}.get(
        state, EventType.FAILED
    )
    this = Ended(0, pool, reason, now)
    if not retry:
        offer = NextOffer()
    elif reason in BACKS_OFF:
        offer = next_offer([*history, this], retries)
    else:  # no back-off: only this end matters (a run preempted every round need not copy its history)
        offer = NextOffer(None, avoided_pool(this))
    next_state = RunState.QUEUED if retry else RunState.FAILED
    return EndDecision(reason, detail, state, event, next_state, retryable, retry, offer, now)


def _spent(history: Sequence[Ended]) -> int:
    """Retries a run has spent (counted only against a finite `spec.retries.max`: a run stopped every round
    for years has a long history, and an unbounded policy need not walk it)."""
    return sum(1 for e in history if e.reason in SPENDS_RETRY)


def next_offer(history: Sequence[Ended], retries: RetryPolicy) -> NextOffer:
    """Where the next attempt should not go and when it may be offered, from the run's ended attempts."""
    if not history:
        return NextOffer()
    last = history[-1]
    avoid = avoided_pool(last)
    if last.reason not in BACKS_OFF:
        return NextOffer(None, avoid)
    if last.reason is EndReason.UNPLACED:  # consecutive refusals of the engine count, not the run's whole life
        ends = len(history) - max(
            (i + 1 for i, e in enumerate(history) if e.reason is not EndReason.UNPLACED), default=0
        )
    else:
        ends = sum(1 for e in history if e.reason in SPENDS_RETRY)
    delay = retries.backoff.delay_s(ends)
    return NextOffer(last.ended_at + delay if delay > 0 else None, avoid)


def avoided_pool(last: Ended | None) -> str | None:
    """The pool a run's next attempt tries last: where its previous attempt failed, was lost or preempted."""
    return last.pool if last is not None and last.reason in AVOIDS_POOL else None


def heartbeat_silence_s(
    last_beat: float | None, started_at: float | None, now: float, timeout_s: float
) -> float | None:
    """Seconds a running attempt has been silent when that exceeds `timeout_s` (else None): for engines
    that cannot see processes, a missing heartbeat is the only sign an attempt is gone."""
    since = last_beat if last_beat is not None else started_at
    if since is None:
        return None
    silent = now - since
    return silent if silent > timeout_s else None


@dataclass(frozen=True)
class EngineQueued:
    """An attempt an engine holds in its own queue: nothing of it runs yet."""

    run: str
    attempt: int
    pool: str


@dataclass(frozen=True)
class Move:
    """Withdraw `attempt` of `run` from `from_pool` (its engine's queue) and place the run on `to_pool`."""

    run: str
    attempt: int
    from_pool: str
    to_pool: str


def replan_due(
    waiting: Sequence[EngineQueued], checked: Mapping[str, float], now: float, every_s: float
) -> tuple[list[EngineQueued], dict[str, float]]:
    """The waiting attempts due to be weighed again (each run at most every `every_s`), and the new record of
    when each still-waiting run was last weighed."""
    kept = {w.run: t for w in waiting if (t := checked.get(w.run)) is not None}
    due = [w for w in waiting if now - kept.get(w.run, -math.inf) >= every_s]
    return due, kept | {w.run: now for w in due}


def moves(due: Sequence[EngineQueued], planned: Mapping[str, str | None]) -> list[Move]:
    """Attempts whose run the plan now puts on another pool (the plan already holds each run to its pool
    unless another is clearly better, and lets a drained pool go at once)."""
    out = []
    for w in due:
        to = planned.get(w.run)
        if to is not None and to != w.pool:
            out.append(Move(w.run, w.attempt, w.pool, to))
    return out
