"""Event types of the append-only log and the run states they imply (schema: docs/events.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    SUBMITTED = "submitted"
    QUEUED = "queued"
    PLACED = "placed"
    PLANNED = "planned"
    REPLACED = "replaced"
    ADMITTED = "admitted"
    STARTED = "started"
    HEARTBEAT = "heartbeat"
    CHECKPOINTED = "checkpointed"
    PREEMPTED = "preempted"
    UNPLACED = "unplaced"  # the engine (Ray) could not place an admitted attempt; the run is queued again
    FAILED = "failed"
    RETRIED = "retried"
    SUCCEEDED = "succeeded"
    CANCELLED = "cancelled"
    SUSPENDED = "suspended"
    RESUMED = "resumed"
    CAPACITY_CHANGED = "capacity_changed"
    BUDGET_EXCEEDED = "budget_exceeded"  # a team's spend crossed its budget this period (once per period)
    RESIZED = "resized"  # a running attempt's degree changed (workers lost or joined, or a part resized)
    REPORTED = "reported"
    EVALUATED = "evaluated"  # an eval run's score: {evaluated_run, checkpoint, step, metric, value}
    UNKNOWN_ATTEMPT = "unknown_attempt"  # an executor runs (or ran) an attempt the store has no record of
    LEADER_ELECTED = "leader_elected"  # an agent took the leader's lease under a new fencing term


class RunState(StrEnum):
    QUEUED = "queued"
    ADMITTED = "admitted"
    RUNNING = "running"
    SUSPENDED = "suspended"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


RUN_STATES = tuple(RunState)
TERMINAL_RUN_STATES = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED})

# The state a run is in right after an event of this type; events absent here leave it unchanged.
STATE_AFTER: dict[EventType, RunState] = {
    EventType.QUEUED: RunState.QUEUED,
    EventType.ADMITTED: RunState.ADMITTED,
    EventType.STARTED: RunState.RUNNING,
    EventType.RETRIED: RunState.QUEUED,
    EventType.SUCCEEDED: RunState.SUCCEEDED,
    EventType.FAILED: RunState.FAILED,
    EventType.CANCELLED: RunState.CANCELLED,
    EventType.SUSPENDED: RunState.SUSPENDED,
    EventType.RESUMED: RunState.QUEUED,
}

# Event types that end one attempt. `failed` and `preempted` carry `final: false` in their data when
# the run will be retried, in which case the run's state is not terminal (see docs/events.md).
ATTEMPT_END_TYPES = frozenset({EventType.SUCCEEDED, EventType.FAILED, EventType.PREEMPTED, EventType.CANCELLED})


@dataclass(frozen=True)
class Event:
    """One record of the event log. `seq` is assigned by the store, strictly increasing."""

    type: EventType
    ts: float
    run: str | None = None
    attempt: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    seq: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "ts": self.ts,
            "type": str(self.type),
            "run": self.run,
            "attempt": self.attempt,
            "data": self.data,
        }


def state_after(current: RunState, event: Event) -> RunState:
    """The run state after `event`; a non-final failure or a preemption leaves the run queued for retry."""
    if event.type in (EventType.FAILED, EventType.PREEMPTED) and event.data.get("final") is False:
        return RunState.QUEUED
    if event.type is EventType.PREEMPTED:
        return RunState.QUEUED
    return STATE_AFTER.get(event.type, current)
