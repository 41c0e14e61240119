"""Estimates for placement: queue wait, run time, recovery overhead and cost per pool, and start times.

Pure functions over plain data, so the control plane and the simulator call the same code:

  estimate_starts(pending, running, pools, now)     when each pending run is expected to start, and where
  estimate_placements(work, pools, waits)           every pool's terms for one run, and the pick with why

This module is their public face; the parts live beside it: each pool's free chips over time (timeline.py),
the forward simulation of the queues (starts.py, with backfill.py), one run's terms and score per pool
(scoring.py) and the pick among them (choice.py).
"""

from crossrail.scheduling.choice import Choice, estimate_placements
from crossrail.scheduling.scoring import (
    MEASURED_RUNS,
    OBJECTIVES,
    Candidate,
    PlacementWork,
    PoolInfo,
    Term,
    candidates,
    cost,
    measured_run_time,
    recovery_s,
    run_time_s,
)
from crossrail.scheduling.starts import estimate_starts
from crossrail.scheduling.timeline import Busy, StartEstimate, Waiting

__all__ = [
    "MEASURED_RUNS",
    "OBJECTIVES",
    "Busy",
    "Candidate",
    "Choice",
    "PlacementWork",
    "PoolInfo",
    "StartEstimate",
    "Term",
    "Waiting",
    "candidates",
    "cost",
    "estimate_placements",
    "estimate_starts",
    "measured_run_time",
    "recovery_s",
    "run_time_s",
]
