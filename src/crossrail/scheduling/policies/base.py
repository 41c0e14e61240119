"""The policy seam: what a policy sees of jobs and pools, what it returns, and the rates it reasons with."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from crossrail.core.priority import PRIORITIES, priority_level

SortKey = tuple[float, float, float, str]
"""(class, primary, secondary, run): smaller goes first. The agent orders fair share between class and primary."""


@dataclass
class JobView:
    """A job as a policy sees it (a policy reads it and never changes it).

    Not frozen: rounds build one per run at every boundary and admission one per key, and a frozen
    dataclass's `__init__` costs about three times as much.

    `throughput` is the job's whole-gang rate (work units per second) on each chip type it could run on,
    e.g. a row of Gavel's matrix; empty means unknown, and hetero policies then behave like their agnostic
    forms. A rate of 0 means the job cannot run on that chip type. `attained_by_type` splits `attained_s`
    (chip-seconds of service) by chip type; hetero policies use it to count service at its real worth.
    """

    run: str
    queue: str
    priority: int
    """Higher is more important (`level_of("critical") > level_of("low")`)."""
    submitted_at: float
    chips: int
    attained_s: float
    throughput: Mapping[str, float]
    remaining: float | None = None
    """Work units left (same units as `throughput`); None when unknown."""
    pool: str | None = None
    """The pool it runs on now; None when pending."""
    attained_by_type: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PoolView:
    name: str
    chip_type: str
    capacity: int
    """Chips it has."""
    free: int
    """Chips free now (ordering policies place pending work in these)."""
    time_sliced: bool = True
    """Round-based policies apply only to time-sliced pools (every pool in simulation)."""


class Policy(Protocol):
    """An admission ordering (`order`) and a round-based allocation (`allocate`); `round_based` says which to use."""

    name: str
    round_based: bool
    hetero: bool

    @property
    def uses_remaining(self) -> bool:
        """Whether it reads `JobView.remaining` (callers may leave it None otherwise: it costs to compute)."""
        ...

    def key(self, job: JobView) -> SortKey:
        """Where `job` stands in admission order (smaller first), from the job alone."""
        ...

    def order(self, jobs: Sequence[JobView], pools: Sequence[PoolView], now: float) -> list[tuple[JobView, str | None]]:
        """Pending jobs in the order to admit them, each with the pool the policy wants (None: any).

        Only orders: quotas, fair share and capacity are still checked by the scheduler, never overridden.
        """
        ...

    def allocate(
        self, jobs: Sequence[JobView], pools: Sequence[PoolView], now: float, round_s: float
    ) -> dict[str, str]:
        """Run -> pool for the next round; jobs absent do not run. Every job's gang fits its pool.

        A running job moved to another pool pays its checkpoint-restore cost (the caller charges it).
        """
        ...


PRIORITY_LEVELS = {name: priority_level(name) for name in PRIORITIES}
"""crossrail.core's priority table as levels (higher is more important)."""


def level_of(priority: str) -> int:
    """A priority class as JobView's integer (higher is more important); unknown classes come last."""
    return PRIORITY_LEVELS.get(priority, -1)


def rate(job: JobView, chip_type: str) -> float:
    """The job's rate on a chip type; 1 when its rates are unknown (every chip counts alike)."""
    if not job.throughput:
        return 1.0
    return float(job.throughput.get(chip_type, 0.0))


def best_rate(job: JobView, pools: Sequence[PoolView]) -> float:
    """The job's highest rate on any pool's chip type that can hold its gang (0: none can)."""
    return max((rate(job, p.chip_type) for p in pools if p.capacity >= job.chips), default=0.0)


def runnable(job: JobView, pool: PoolView) -> bool:
    """The pool can hold the job's gang and the job can run on its chips."""
    return pool.capacity >= job.chips and rate(job, pool.chip_type) > 0


def speedup(job: JobView, pools: Sequence[PoolView]) -> float:
    """Fastest over slowest rate across the chip types that could run the job: 1 when unknown or uniform."""
    rates = [rate(job, p.chip_type) for p in pools if runnable(job, p)]
    return max(rates) / min(rates) if rates else 1.0


def worth_s(job: JobView) -> float:
    """Service received in chip-seconds of the job's fastest chip type (its attained service at real worth).

    Without rates or a split by chip type this is `attained_s`.
    """
    if not job.throughput or not job.attained_by_type:
        return job.attained_s
    best = max(job.throughput.values(), default=0.0)
    if best <= 0:
        return job.attained_s
    return sum(s * rate(job, t) / best for t, s in job.attained_by_type.items())


def time_left_s(job: JobView, pools: Sequence[PoolView]) -> float:
    """Seconds to finish on the job's fastest usable chip type; infinite when unknown."""
    fastest = best_rate(job, pools)
    if job.remaining is None or fastest <= 0:
        return math.inf
    return job.remaining / fastest
