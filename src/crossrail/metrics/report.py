"""What a metrics snapshot is made of: one GroupMetrics per stage x pool, and the Report around them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crossrail.metrics.distribution import Distribution

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
        }


@dataclass(frozen=True)
class Report:
    """A snapshot at `generated_at`: groups sorted by (stage, pool), their totals, and current queue waits."""

    groups: list[GroupMetrics]
    totals: GroupMetrics
    pending: dict[str, Distribution]
    generated_at: float

    def group(self, stage: str, pool: str) -> GroupMetrics | None:
        """The metrics of one stage x pool, or None when the log has nothing there."""
        return next((g for g in self.groups if g.stage == stage and g.pool == pool), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "generated_at": self.generated_at,
            "groups": [g.as_dict() for g in self.groups],
            "totals": self.totals.as_dict(),
            "pending": {stage: d.as_dict() for stage, d in self.pending.items()},
        }
