"""From an order of jobs to placements: which jobs fit a round, and on which pool each one runs.

Agnostic placement keeps a job where it runs, else takes the pool with the most chips left (ties by name):
it never looks at rates. Hetero placement first lets the jobs whose rates differ most between chip types
choose (largest fastest/slowest ratio first), each taking the fastest chip type with room.
"""

from __future__ import annotations

from collections.abc import Sequence

from crossrail.scheduling.policies.base import JobView, PoolView, rate, runnable, speedup


class Room:
    """Chips left per pool while a round (or an admission order) is being filled."""

    def __init__(self, pools: Sequence[PoolView], *, free: bool = False) -> None:
        self.pools = sorted(pools, key=lambda p: p.name)
        self.left = {p.name: p.free if free else p.capacity for p in self.pools}
        self.largest = max(self.left.values(), default=0)
        """An upper bound on the chips left in any one pool (a gang larger than it fits nowhere)."""

    @property
    def total(self) -> int:
        return sum(self.left.values())

    def fits(self, job: JobView, pool: PoolView) -> bool:
        return runnable(job, pool) and self.left[pool.name] >= job.chips

    def take(self, job: JobView, pool: PoolView) -> None:
        self.left[pool.name] -= job.chips
        if self.left[pool.name] + job.chips == self.largest:
            self.largest = max(self.left.values(), default=0)


def pick(job: JobView, room: Room, hetero: bool) -> PoolView | None:
    """The pool `job` takes in `room`, or None when none has room for its gang."""
    if job.chips > room.largest:
        return None  # a full round: nothing left to weigh
    candidates = [p for p in room.pools if room.fits(job, p)]
    if not candidates:
        return None
    if hetero:
        return min(candidates, key=lambda p: (-rate(job, p.chip_type), p.name != job.pool, -room.left[p.name]))
    return min(candidates, key=lambda p: (p.name != job.pool, -room.left[p.name]))


def fill(order: Sequence[JobView], room: Room, hetero: bool) -> dict[str, str]:
    """Run -> pool for the jobs of `order` that fit `room`, earlier jobs first.

    1. Select: jobs in order while the chips left in all pools cover their gangs.
    2. Place the selected (hetero: largest speedup first, so fast chips go where they matter most).
    3. Fill: chips a gang could not use go to later jobs, in order.
    """
    budget, selected = room.total, []
    for job in order:
        if job.chips <= budget and any(runnable(job, p) for p in room.pools):
            selected.append(job)
            budget -= job.chips
    if hetero:
        position = {job.run: i for i, job in enumerate(selected)}
        selected.sort(key=lambda j: (-speedup(j, room.pools), position[j.run]))
    placed: dict[str, str] = {}
    for job in [*selected, *order]:
        if job.run in placed:
            continue
        pool = pick(job, room, hetero)
        if pool is not None:
            room.take(job, pool)
            placed[job.run] = pool.name
    return placed


def preferred(job: JobView, pools: Sequence[PoolView]) -> str | None:
    """The pool whose chip type runs `job` fastest (ties by name), or None when none can hold it."""
    usable = [p for p in sorted(pools, key=lambda p: p.name) if runnable(job, p)]
    return max(usable, key=lambda p: rate(job, p.chip_type)).name if usable else None
