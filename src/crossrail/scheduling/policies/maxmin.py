"""Max-min fairness over (normalised effective) throughput, after Gavel (Narayanan et al., OSDI 2020).

The allocation X[m, p] is the fraction of time job m should spend on pool p. Two linear programs, solved
with HiGHS through `scipy.optimize.linprog`:

  1. maximise t  subject to  share(m) >= t for every job,  sum_p X[m, p] <= 1,
                             sum_m chips(m) * X[m, p] <= capacity(p),  0 <= X <= 1;
  2. keep every share(m) >= t* and maximise the sum of shares, so chips the fairest floor leaves idle
     still do work.

Agnostic: share(m) = sum_p X[m, p] (time, every chip alike). Hetero: share(m) is the job's effective
throughput sum_p rate(m, p) * X[m, p] normalised by a reference: by default the throughput it would get
from an equal share of every chip in the fleet (Gavel's X^equal), or with `normalise="best"` its rate on
its fastest chip type.

Each round turns X into placements with Gavel's priorities: priority(m, t) = X[m, t] / (fraction of
the job's time in the system it has run on chip type t); the highest priorities take their chip type
first, and chips left over go to the jobs that received least, so no chip idles while a job waits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from crossrail.scheduling.policies.assign import Room, fill, pick
from crossrail.scheduling.policies.base import JobView, PoolView, SortKey, rate, runnable, worth_s

Shares = dict[str, dict[str, float]]
"""run -> pool -> fraction of time."""

NORMALISATIONS = ("equal_share", "best")
FLOOR_SLACK = 1e-6
"""Stage 2 may lower the fairest floor by this fraction, so rounding in stage 1 never makes it infeasible."""


def reference(job: JobView, pools: Sequence[PoolView], normalise: str) -> float:
    """The throughput a job's effective throughput is measured against."""
    if normalise == "best":
        return max((rate(job, p.chip_type) for p in pools if runnable(job, p)), default=0.0)
    total = sum(p.capacity for p in pools)
    return sum(rate(job, p.chip_type) * p.capacity / total for p in pools) if total else 0.0


def max_min_shares(jobs: Sequence[JobView], pools: Sequence[PoolView], hetero: bool, normalise: str) -> Shares:
    """X: for each job, the fraction of time on each pool that maximises the smallest share (see above)."""
    from scipy.optimize import linprog  # type: ignore[import-untyped]  # lazy: only LP policies need scipy
    from scipy.sparse import coo_array  # type: ignore[import-untyped]

    cells = [(m, p) for m, job in enumerate(jobs) for p, pool in enumerate(pools) if runnable(job, pool)]
    if not cells:
        return {}
    refs = [reference(job, pools, normalise) if hetero else 1.0 for job in jobs]
    weight = [rate(jobs[m], pools[p].chip_type) / refs[m] if hetero and refs[m] > 0 else 1.0 for m, p in cells]
    # Columns: one X per cell, then t. Rows (sparse): -share(m) + t <= 0 and sum_p X[m, p] <= 1 per served
    # job; sum_m chips(m) X[m, p] <= capacity(p) per pool.
    n, served = len(cells), {m: i for i, m in enumerate(sorted({m for m, _ in cells}))}
    rows, cols, vals = [], [], []
    for i, (m, p) in enumerate(cells):
        rows += [served[m], len(served) + served[m], 2 * len(served) + p]
        cols += [i, i, i]
        vals += [-weight[i], 1.0, float(jobs[m].chips)]
    rows += list(range(len(served)))
    cols += [n] * len(served)
    vals += [1.0] * len(served)
    a_ub = coo_array((vals, (rows, cols)), shape=(2 * len(served) + len(pools), n + 1)).tocsr()
    b_ub = [0.0] * len(served) + [1.0] * len(served) + [float(pool.capacity) for pool in pools]
    first = linprog([0.0] * n + [-1.0], A_ub=a_ub, b_ub=b_ub, bounds=[(0, 1)] * n + [(0, None)], method="highs")
    if not first.success:
        raise ArithmeticError(f"max-min fairness LP failed: {first.message}")
    floor = float(first.x[-1]) * (1 - FLOOR_SLACK)
    objective = [-w for w in weight] + [0.0]
    second = linprog(objective, A_ub=a_ub, b_ub=b_ub, bounds=[(0, 1)] * n + [(floor, floor)], method="highs")
    x = second.x if second.success else first.x
    shares: Shares = {}
    for i, (m, p) in enumerate(cells):
        if x[i] > 1e-9:
            shares.setdefault(jobs[m].run, {})[pools[p].name] = float(x[i])
    return shares


def round_priorities(
    jobs: Sequence[JobView], pools: Sequence[PoolView], shares: Shares, now: float, hetero: bool
) -> list[tuple[float, float, str, str]]:
    """(-priority, -share, run, chip type or "") for every job with a share, highest priority first.

    Agnostic policies pool every chip into one type ("") and count time in plain chip-seconds; so do hetero
    ones for a job without rates, or whose service is not split by chip type.
    """
    entries = []
    for job in jobs:
        typed = hetero and bool(job.throughput) and (bool(job.attained_by_type) or job.attained_s == 0)
        kind = {p.name: p.chip_type if typed else "" for p in pools}
        by_type: dict[str, float] = {}
        for pool, x in shares.get(job.run, {}).items():
            by_type[kind[pool]] = by_type.get(kind[pool], 0.0) + x
        elapsed = max(now - job.submitted_at, 0.0) * job.chips
        for chip_type, x in sorted(by_type.items()):
            got = job.attained_by_type.get(chip_type, 0.0) if typed else job.attained_s
            received = got / elapsed if elapsed > 0 else 0.0
            priority = x / received if received > 0 else math.inf
            entries.append((-priority, -x, job.run, chip_type))
    return sorted(entries)


@dataclass
class MaxMinFairness:
    """`max_min_fairness` (agnostic) and `max_min_fairness_hetero`: round-based, LP allocations."""

    name: str
    hetero: bool
    normalise: str = "equal_share"
    round_based: bool = True
    _memo: dict[tuple[object, ...], Shares] = field(default_factory=dict, repr=False)

    def key(self, job: JobView) -> SortKey:
        """Outside rounds: least service per chip first (hetero: service at its worth)."""
        got = worth_s(job) if self.hetero else job.attained_s
        return (0.0, got / max(job.chips, 1), job.submitted_at, job.run)

    def order(self, jobs: Sequence[JobView], pools: Sequence[PoolView], now: float) -> list[tuple[JobView, str | None]]:
        pending = sorted((j for j in jobs if j.pool is None), key=self.key)
        if not self.hetero:
            return [(job, None) for job in pending]
        placed = fill(pending, Room(pools, free=True), hetero=True)
        return [(job, placed.get(job.run)) for job in pending]

    def shares(self, jobs: Sequence[JobView], pools: Sequence[PoolView]) -> Shares:
        """The LP allocation, solved once per distinct set of jobs and pools."""
        memo_key = (
            tuple((j.run, j.chips, tuple(sorted(j.throughput.items()))) for j in sorted(jobs, key=lambda j: j.run)),
            tuple((p.name, p.chip_type, p.capacity) for p in sorted(pools, key=lambda p: p.name)),
        )
        found = self._memo.get(memo_key)
        if found is None:
            if len(self._memo) >= 256:
                self._memo.clear()
            ordered = sorted(jobs, key=lambda j: j.run)
            found = self._memo[memo_key] = max_min_shares(
                ordered, sorted(pools, key=lambda p: p.name), self.hetero, self.normalise
            )
        return found

    def allocate(
        self, jobs: Sequence[JobView], pools: Sequence[PoolView], now: float, round_s: float
    ) -> dict[str, str]:
        shares = self.shares(jobs, pools)
        room, by_run = Room(pools), {j.run: j for j in jobs}
        placed: dict[str, str] = {}
        for _, _, run, chip_type in round_priorities(jobs, pools, shares, now, self.hetero):
            job = by_run[run]
            if run in placed:
                continue
            typed = [p for p in room.pools if not chip_type or p.chip_type == chip_type]
            pool = pick(job, _Within(room, typed), self.hetero)
            if pool is not None:
                room.take(job, pool)
                placed[run] = pool.name
        rest = sorted((j for j in jobs if j.run not in placed), key=self.key)
        placed.update(fill(rest, room, self.hetero))
        return placed


class _Within(Room):
    """A view of `room` limited to some pools (the chips left stay shared with it)."""

    def __init__(self, room: Room, pools: Sequence[PoolView]) -> None:
        self.pools = list(pools)
        self.left = room.left
