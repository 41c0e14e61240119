"""Max-min fairness over (normalised effective) throughput, after Gavel (Narayanan et al., OSDI 2020).

The allocation X[m, p] is the fraction of time job m should spend on pool p. Two objectives, in one
linear program solved with HiGHS through `scipy.optimize.linprog(method="highs")`:

  1. maximise t  subject to  share(m) >= t for every job,  sum_p X[m, p] <= 1,
                             sum_m chips(m) * X[m, p] <= capacity(p),  0 <= X <= 1;
  2. then (weighted LEXICOGRAPHIC against t) maximise the sum of shares, so chips the fairest floor
     leaves idle still do work.

Jobs alike (same gang, same rates) share one row with a count, so the program grows with the kinds of
job, not their number.

Agnostic: share(m) = chips(m) * sum_p X[m, p] (chip-time, every chip alike, as Gavel's LAS), spread
symmetrically over the pools. Hetero: share(m) is the job's effective
throughput sum_p rate(m, p) * X[m, p] normalised by a reference: by default its rate on its fastest chip
type (the fraction of its best speed it gets), or with `normalise="equal_share"` the throughput it would
get from an equal share of every chip in the fleet (Gavel's X^equal).

Each round turns X into placements with Gavel's round mechanics (`ledger.RoundLedger`: when X is
recomputed, priorities X / share of the time run since, deficits, chip types taken in turn).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crossrail.core.extras import require
from crossrail.scheduling.policies.assign import Room, fill
from crossrail.scheduling.policies.base import JobView, PoolView, SortKey, rate, runnable, worth_s
from crossrail.scheduling.policies.ledger import RoundLedger

Shares = dict[str, dict[str, float]]
"""run -> pool -> fraction of time."""

NORMALISATIONS = ("equal_share", "best")
CLASS_MEMO = 100_000
"""Runs whose job class a policy remembers (forgotten all at once beyond this: runs that ended pile up)."""
LEXICOGRAPHIC = 1e-4
"""The weight of stage 2 (the sum of shares) against stage 1 (the floor) in the one LP that solves both."""


def reference(job: JobView, pools: Sequence[PoolView], normalise: str) -> float:
    """The throughput a job's effective throughput is measured against."""
    if normalise == "best":
        return max((rate(job, p.chip_type) for p in pools if runnable(job, p)), default=0.0)
    total = sum(p.capacity for p in pools)
    return sum(rate(job, p.chip_type) * p.capacity / total for p in pools) if total else 0.0


def job_class(job: JobView, pools: Sequence[PoolView], hetero: bool) -> tuple[object, ...]:
    """What the LP sees of a job: jobs alike in this get the same shares at the optimum (by symmetry)."""
    return (job.chips, tuple(rate(job, p.chip_type) if hetero else runnable(job, p) for p in pools))


def max_min_shares(jobs: Sequence[JobView], pools: Sequence[PoolView], hetero: bool, normalise: str) -> Shares:
    """X: for each job, the fraction of time on each pool that maximises the smallest share (see above).

    Jobs alike (same gang, same rates) are one LP row with a count: averaging a solution over their
    permutations keeps it feasible and optimal, so one share per class loses nothing, and the LP has as
    many rows as there are job classes (a few dozen for Gavel's workloads), not jobs.
    """
    classes: dict[tuple[object, ...], list[JobView]] = {}
    for job in jobs:
        classes.setdefault(job_class(job, pools, hetero), []).append(job)
    reps = [members[0] for members in classes.values()]
    counts = [len(members) for members in classes.values()]
    per_class = class_shares(reps, counts, pools, hetero, normalise)
    shares: Shares = {}
    for i, members in enumerate(classes.values()):
        if i in per_class:
            for job in members:
                shares[job.run] = per_class[i]
    return shares


def class_shares(
    jobs: Sequence[JobView], counts: Sequence[int], pools: Sequence[PoolView], hetero: bool, normalise: str
) -> dict[int, dict[str, float]]:
    """The max-min LP over job classes (`counts[m]` jobs like `jobs[m]`): class index -> pool -> share."""
    import numpy as np
    from scipy.optimize import linprog  # type: ignore[import-untyped]  # lazy: only LP policies need scipy

    cells = [(m, p) for m, job in enumerate(jobs) for p, pool in enumerate(pools) if runnable(job, pool)]
    if not cells:
        return {}
    refs = [reference(job, pools, normalise) if hetero else 1.0 for job in jobs]
    weight = [_weight(jobs[m], pools[p], refs[m], hetero) for m, p in cells]
    # Columns: one X per cell, then t. Rows: -share(m) + t <= 0 and sum_p X[m, p] <= 1 per served class;
    # sum_m count(m) chips(m) X[m, p] <= capacity(p) per pool. Dense: a few dozen classes by a few pools.
    n, served = len(cells), {m: i for i, m in enumerate(sorted({m for m, _ in cells}))}
    a_ub = np.zeros((2 * len(served) + len(pools), n + 1))
    for i, (m, p) in enumerate(cells):
        a_ub[served[m], i] = -weight[i]
        a_ub[len(served) + served[m], i] = 1.0
        a_ub[2 * len(served) + p, i] = float(jobs[m].chips * counts[m])
    a_ub[: len(served), n] = 1.0
    b_ub = np.array([0.0] * len(served) + [1.0] * len(served) + [float(pool.capacity) for pool in pools])
    bounds = np.array([(0.0, 1.0)] * n + [(0.0, np.inf)])
    # One LP for both stages: the floor t first, then (weighted by LEXICOGRAPHIC, so that it can move t
    # by at most that much) the sum of every job's share.
    total = sum(counts[m] * weight[i] for i, (m, _) in enumerate(cells))
    tie = LEXICOGRAPHIC / total if total > 0 else 0.0
    objective = [-tie * counts[m] * weight[i] for i, (m, _) in enumerate(cells)] + [-1.0]
    c = np.array(objective)
    solved = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if not solved.success:
        raise ArithmeticError(f"max-min fairness LP failed: {solved.message}")
    found = solved.x
    x = found if hetero else _spread(found, cells, jobs, counts, pools)
    shares: dict[int, dict[str, float]] = {}
    for i, (m, p) in enumerate(cells):
        if x[i] > 1e-9:
            shares.setdefault(m, {})[pools[p].name] = float(x[i])
    return shares


@dataclass
class MaxMinFairness:
    """`max_min_fairness` (agnostic) and `max_min_fairness_hetero`: round-based, LP allocations."""

    name: str
    hetero: bool
    normalise: str = "best"
    round_based: bool = True
    uses_remaining: bool = False
    _memo: dict[tuple[object, ...], dict[Hashable, dict[str, float]]] = field(default_factory=dict, repr=False)
    _fleet: tuple[object, ...] = field(default=(), repr=False)
    _class_of: dict[str, tuple[object, ...]] = field(default_factory=dict, repr=False)
    """Run -> its job class on `_fleet` (a run's rates do not change)."""
    _reprs: dict[int, tuple[Hashable, str]] = field(default_factory=dict, repr=False)
    """id(class) -> (the class, its repr): reprs of floats cost (by identity: equal classes may print apart)."""
    _ledger: RoundLedger | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # The LP solver is loaded with the policy, not in its first round: a simulation's measured time and a
        # scheduling cycle's are their own work, not a module's loading (0.3-0.4 s of CPU for scipy.optimize).
        require("scipy.optimize", extra="sim", needed_for="the max-min fairness policies' linear programs")

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
        """The LP allocation per job class, solved once per distinct mix of job classes and pools."""
        members: dict[Hashable, list[JobView]] = {}
        for job, key in zip(jobs, self.classify(jobs, pools), strict=True):
            members.setdefault(key, []).append(job)
        found = self.solve_classes({k: (group[0], len(group)) for k, group in members.items()}, pools)
        return {job.run: found[k] for k in sorted(members, key=self._repr) if k in found for job in members[k]}

    def classify(self, jobs: Sequence[JobView], pools: Sequence[PoolView]) -> list[Hashable]:
        """Each job's class on `pools` (`job_class`), remembered per run: a run's rates do not change."""
        ordered, _fleet = self._on(pools)
        keys: list[Hashable] = []
        for job in jobs:
            key = self._class_of.get(job.run)
            if key is None or key[0] != job.chips:
                key = self._class_of[job.run] = job_class(job, ordered, self.hetero)
            keys.append(key)
        return keys

    def solve_classes(
        self, classes: Mapping[Hashable, tuple[JobView, int]], pools: Sequence[PoolView]
    ) -> Mapping[Hashable, dict[str, float]]:
        """Class -> pool -> share for `classes` (class -> (a job of it, how many jobs it has)), solved once per
        distinct mix of classes and pools; a class absent from the answer gets nothing."""
        ordered, fleet = self._on(pools)
        keys = sorted(classes, key=self._repr)
        memo_key = (tuple((k, classes[k][1]) for k in keys), fleet)
        found = self._memo.get(memo_key)
        if found is None:
            if len(self._memo) >= 256:
                self._memo.clear()
            reps, counts = [classes[k][0] for k in keys], [classes[k][1] for k in keys]
            solved = class_shares(reps, counts, ordered, self.hetero, self.normalise)
            found = self._memo[memo_key] = {keys[i]: share for i, share in solved.items()}
        return found

    def _on(self, pools: Sequence[PoolView]) -> tuple[list[PoolView], tuple[object, ...]]:
        """`pools` by name and as a fleet key; a new fleet (or too many runs remembered) forgets the classes."""
        ordered = sorted(pools, key=lambda p: p.name)
        fleet = tuple((p.name, p.chip_type, p.capacity) for p in ordered)
        if fleet != self._fleet or len(self._class_of) > CLASS_MEMO:
            self._fleet, self._class_of, self._reprs = fleet, {}, {}
        return ordered, fleet

    def _repr(self, key: Hashable) -> str:
        """The class's repr (the LP's row order), remembered while the class is."""
        known = self._reprs.get(id(key))
        if known is None or known[0] is not key:
            if len(self._reprs) > CLASS_MEMO:
                self._reprs.clear()
            known = self._reprs[id(key)] = (key, repr(key))
        return known[1]

    def ledger(self, round_s: float) -> RoundLedger:
        """The policy's round state (one per policy: a simulation or an agent drives one policy)."""
        if self._ledger is None:
            self._ledger = RoundLedger(self.shares, round_s, shuffle=not self.hetero, classes=self)
        return self._ledger

    def allocate(
        self, jobs: Sequence[JobView], pools: Sequence[PoolView], now: float, round_s: float
    ) -> dict[str, str]:
        """The next round from views of every candidate job (the ledger credits the service each gained)."""
        ledger = self.ledger(round_s)
        ledger.sync(jobs, pools)
        return ledger.plan(now, pools, {j.run: j.pool for j in jobs if j.pool is not None})


def _spread(
    x: Any, cells: list[tuple[int, int]], jobs: Sequence[JobView], counts: Sequence[int], pools: Sequence[PoolView]
) -> Any:
    """Agnostic X with every pool alike: each job that can run on every pool has its total share spread over
    them in proportion to the chips the other jobs leave there.

    Every pool is worth the same to an agnostic job, so the optimum is a whole face of the LP and a simplex
    solver returns an arbitrary vertex of it, pinning some jobs to one chip type and others to another.
    Gavel solves the same program with an interior-point method, whose answer is the symmetric point;
    spreading keeps the floor and every job's total, and fits the chips (the totals fitted before).
    """
    import numpy as np

    xs = np.array(x, dtype=float)
    n_pools = len(pools)
    everywhere = {m for m in range(len(jobs)) if sum(1 for c in cells if c[0] == m) == n_pools}
    left = np.array([float(p.capacity) for p in pools])
    totals: dict[int, float] = {}
    for i, (m, p) in enumerate(cells):
        if m in everywhere:
            totals[m] = totals.get(m, 0.0) + xs[i]
        else:
            left[p] -= jobs[m].chips * counts[m] * xs[i]
    left = np.clip(left, 0.0, None)
    if not totals or left.sum() <= 0:
        return xs
    for i, (m, p) in enumerate(cells):
        if m in everywhere:
            xs[i] = totals[m] * left[p] / left.sum()
    return xs


def _weight(job: JobView, pool: PoolView, ref: float, hetero: bool) -> float:
    """What one unit of X on `pool` is worth to the job: agnostic, chip-time (Gavel's LAS multiplies X by
    the job's scale factor, so a gang of k gets 1/k of the time a single-chip job gets); hetero, its rate
    there over its reference."""
    if not hetero or not job.throughput:  # without rates a hetero form weighs as its agnostic one
        return float(job.chips)
    if ref <= 0:
        return 1.0
    return rate(job, pool.chip_type) / ref
