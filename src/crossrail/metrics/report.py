"""What a metrics snapshot is made of: one GroupMetrics per stage x pool, and the Report around them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crossrail.metrics.distribution import EMPTY, Distribution

# The pool of runs that never started an attempt, and the stage of runs whose log names none.
NO_POOL = "-"
UNKNOWN_STAGE = "-"
# Stage and pool of the fleet-wide totals.
ALL = "*"


@dataclass(frozen=True)
class GroupMetrics:
    """Research-cycle metrics of one stage x pool (definitions: docs/metrics.md)."""

    stage: str
    pool: str
    runs: int
    succeeded: int
    failed: int
    cancelled: int
    active: int
    success_rate: float | None
    queue_time: Distribution
    run_time: Distribution
    recoveries: int
    recovery_time: Distribution
    chip_hours: float
    cost: float
    cost_per_effective_run: float | None
    jct: Distribution = EMPTY
    """Job completion time of runs that succeeded: `succeeded.ts − submitted.ts`."""
    useful_chip_hours: float | None = None
    """Chip-hours whose work was kept (`useful_chip_s` of end events); None when no end event reports it."""
    goodput: float | None = None
    """`useful_chip_hours / chip_hours`."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "pool": self.pool,
            "runs": self.runs,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "active": self.active,
            "success_rate": self.success_rate,
            "queue_time": self.queue_time.as_dict(),
            "run_time": self.run_time.as_dict(),
            "recoveries": self.recoveries,
            "recovery_time": self.recovery_time.as_dict(),
            "chip_hours": self.chip_hours,
            "cost": self.cost,
            "cost_per_effective_run": self.cost_per_effective_run,
            "jct": self.jct.as_dict(),
            "useful_chip_hours": self.useful_chip_hours,
            "goodput": self.goodput,
        }


@dataclass(frozen=True)
class Report:
    """A snapshot at `generated_at`: groups sorted by (stage, pool), their totals, and current queue waits."""

    groups: list[GroupMetrics]
    totals: GroupMetrics
    pending: dict[str, Distribution]
    generated_at: float
    makespan_s: float | None = None
    """Last terminal event − first arrival (`submitted` or `queued`); None before any run ended."""
    utilization: float | None = None
    """Chip-hours used since capacity was first recorded / `capacity_chip_hours`, in [0, 1]; None when the log
    has no `capacity_changed` events."""
    capacity_chip_hours: float | None = None
    """Chips on offer integrated over time since the first `capacity_changed` event, up to `now`."""
    capacity_since: float | None = None
    """When capacity was first recorded: utilization covers the time from then (a store older than its fleet
    records counts from the first agent pass after the upgrade)."""

    def group(self, stage: str, pool: str) -> GroupMetrics | None:
        """The metrics of one stage x pool, or None when the log has nothing there."""
        return next((g for g in self.groups if g.stage == stage and g.pool == pool), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "generated_at": self.generated_at,
            "groups": [g.as_dict() for g in self.groups],
            "totals": self.totals.as_dict(),
            "pending": {stage: d.as_dict() for stage, d in self.pending.items()},
            **({"fleet": self.fleet_dict()} if self.capacity_chip_hours is not None else {}),
        }

    def fleet_dict(self) -> dict[str, Any]:
        """Fleet-wide numbers; in `as_dict()` only when the log says what capacity the fleet had."""
        return {
            "makespan_s": self.makespan_s,
            "utilization": self.utilization,
            "capacity_chip_hours": self.capacity_chip_hours,
            "capacity_since": self.capacity_since,
        }
