"""Policies defined by a sort key: fifo, priority, las and min_jct, each agnostic or heterogeneity-aware.

`order` sorts pending jobs by the key (hetero forms also name the pool whose chips run each job fastest
among those with room); `allocate` fills a round in key order, so running work that falls behind in the
order is preempted at the round boundary and work may move to a faster chip type.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from crossrail.scheduling.policies.assign import Room, fill, preferred
from crossrail.scheduling.policies.base import JobView, PoolView, SortKey, worth_s


def fifo_key(job: JobView) -> SortKey:
    return (0.0, job.submitted_at, 0.0, job.run)


def priority_key(job: JobView) -> SortKey:
    return (float(-job.priority), job.submitted_at, 0.0, job.run)


def las_key(job: JobView) -> SortKey:
    """Least attained service (chip-seconds) first."""
    return (0.0, job.attained_s, job.submitted_at, job.run)


def las_hetero_key(job: JobView) -> SortKey:
    """Least attained service first, service counted at its worth on the job's fastest chip type."""
    return (0.0, worth_s(job), job.submitted_at, job.run)


def min_jct_key(job: JobView) -> SortKey:
    """Shortest time left on the job's fastest chip type first; unknown remaining work after known."""
    fastest = max(job.throughput.values(), default=0.0) if job.throughput else 1.0
    left = job.remaining / fastest if job.remaining is not None and fastest > 0 else math.inf
    return (0.0, left, job.submitted_at, job.run)


@dataclass
class KeyedPolicy:
    """A policy whose whole judgement is a per-job sort key; placement is agnostic or hetero (see assign.py)."""

    name: str
    round_based: bool
    hetero: bool
    rank: Callable[[JobView], SortKey]

    @property
    def uses_remaining(self) -> bool:
        return self.rank is min_jct_key

    def key(self, job: JobView) -> SortKey:
        return self.rank(job)

    def order(self, jobs: Sequence[JobView], pools: Sequence[PoolView], now: float) -> list[tuple[JobView, str | None]]:
        pending = sorted((j for j in jobs if j.pool is None), key=self.rank)
        if not self.hetero:
            return [(job, None) for job in pending]
        placed = fill(pending, Room(pools, free=True), hetero=True)
        return [(job, placed.get(job.run) or preferred(job, pools)) for job in pending]

    def allocate(
        self, jobs: Sequence[JobView], pools: Sequence[PoolView], now: float, round_s: float
    ) -> dict[str, str]:
        return fill(sorted(jobs, key=self.rank), Room(pools), self.hetero)
