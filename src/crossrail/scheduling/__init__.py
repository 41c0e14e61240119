"""Pure scheduling: feasibility, queues, quotas and cohorts, placement, admission, preemption, reservations.

No clock, file, database or process access: every time is passed in.
"""

from crossrail.scheduling.feasibility import PoolFit, feasible_pools, require_feasible
from crossrail.scheduling.fleet_change import FleetChange, fleet_changes
from crossrail.scheduling.scheduler import PoolStatus, ReservationStatus, Scheduler
from crossrail.scheduling.types import (
    Admission,
    CycleResult,
    Growth,
    Preemption,
    Request,
    Running,
    SchedulerConfig,
)

__all__ = [
    "Admission",
    "CycleResult",
    "FleetChange",
    "Growth",
    "PoolFit",
    "PoolStatus",
    "Preemption",
    "Request",
    "ReservationStatus",
    "Running",
    "Scheduler",
    "SchedulerConfig",
    "feasible_pools",
    "fleet_changes",
    "require_feasible",
]
