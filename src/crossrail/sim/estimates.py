"""Start-time estimates against what happened: predictions of `scheduling.estimate` checked by simulation.

At chosen virtual times the simulation asks `estimate_starts` (the estimator `crossrail queue` uses) when
every waiting job will start, from what the scheduler knows then: the running jobs' declared durations and
the waiting jobs' declared durations per pool. After the run each prediction is compared with the job's
actual first start. The error is reported against the median wait of the same jobs.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from crossrail.scheduling.estimate import Busy, PoolInfo, Waiting, estimate_starts
from crossrail.scheduling.types import PRIORITY_RANK
from crossrail.sim.engine import LATE
from crossrail.sim.simulation import Simulation


@dataclass(frozen=True)
class Prediction:
    run: str
    at: float
    """When the prediction was made."""
    predicted: float
    actual: float
    submitted: float

    @property
    def error_s(self) -> float:
        return abs(self.predicted - self.actual)


@dataclass
class StartCheck:
    predictions: list[Prediction] = field(default_factory=list)
    unpredicted: int = 0
    """Waiting jobs the estimator gave no start for, or that never started."""

    @property
    def median_error_s(self) -> float:
        return statistics.median(p.error_s for p in self.predictions)

    @property
    def median_wait_s(self) -> float:
        """Median queue wait (first start - submission) of the jobs predicted."""
        return statistics.median(p.actual - p.submitted for p in self.predictions)

    @property
    def ratio(self) -> float:
        wait = self.median_wait_s
        return self.median_error_s / wait if wait > 0 else float("inf")

    def summary(self) -> str:
        return (
            f"{len(self.predictions):,} start predictions: median absolute error {self.median_error_s:,.0f} s, "
            f"{self.ratio:.1%} of the median wait ({self.median_wait_s:,.0f} s)"
        )


def check_starts(sim: Simulation, at: Sequence[float], *, until_s: float | None = None) -> StartCheck:
    """Run `sim`, predicting every waiting job's start at each time in `at`; compare after the run."""
    raw: list[tuple[str, float, float]] = []
    for t in at:
        sim.engine.schedule(t, lambda: raw.extend(_predict(sim)), LATE)
    sim.run(until_s)
    check = StartCheck()
    for run, when, predicted in raw:
        rec = sim.runs[run]
        if rec.first_start_s is None or rec.first_start_s < when:
            check.unpredicted += rec.first_start_s is None
            continue
        check.predictions.append(Prediction(run, when, predicted, rec.first_start_s, rec.submit_s))
    return check


def _predict(sim: Simulation) -> list[tuple[str, float, float]]:
    now = sim.engine.now()
    pools = [PoolInfo.from_spec(p, sim.fleet.spec.currency) for p in sim.fleet.pools]
    running = [
        Busy(run, att.pool, att.chips, att.started_at + sim.jobs[run].declared_s / sim.pools[att.pool].relative_speed)
        for run, att in sim.executor.live.items()
    ]
    waiting = []
    for run, queued_at in sim.waiting.items():
        if sim.attempts.get(run):
            continue  # a retry: its first start is behind it
        job = sim.jobs[run]
        durations: dict[str, float | None] = {
            p.name: job.declared_s / p.relative_speed for p in sim.fleet.pools if job.runs_on(str(p.accelerator))
        }
        rank = PRIORITY_RANK.get(job.priority, 2) if sim.policy_name == "priority" else 2
        waiting.append(Waiting(run, job.chips, durations, rank=rank, queued_at=queued_at))
    starts = estimate_starts(waiting, running, pools, now)
    return [(run, now, est.start) for run, est in starts.items() if est.start is not None]
