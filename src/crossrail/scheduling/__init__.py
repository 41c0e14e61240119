"""Pure scheduling: feasibility, queues, placement. No clock, file, database or process access."""

from crossrail.scheduling.feasibility import PoolFit, feasible_pools, require_feasible

__all__ = ["PoolFit", "feasible_pools", "require_feasible"]
