"""Per-run records of a simulation, folded by crossrail.metrics from the events it recorded."""

from __future__ import annotations

from collections.abc import Iterable

from crossrail.core import Event
from crossrail.metrics import RunFacts, Sample, fold_runs
from crossrail.spec import Fleet


def run_facts(events: Iterable[Event], fleet: Fleet, now: float, samples: Iterable[Sample] = ()) -> list[RunFacts]:
    """Every simulated run's facts as of `now`, each attempt with its pool's accelerator and chip type, and the
    metric samples its attempts reported (`SimExecutor.samples`: evaluations on a job's quality curve)."""
    runs = fold_runs(events, samples, now=now)
    pools = {p.name: p for p in fleet.pools}
    for run in runs:
        for attempt in run.attempts:
            pool = pools.get(attempt.pool)
            if pool is not None:
                attempt.accelerator, attempt.chip_type = str(pool.accelerator), pool.chip_type
    return runs
