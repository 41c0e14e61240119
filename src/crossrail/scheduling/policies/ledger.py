"""Gavel's round mechanics for the max-min fairness policies: who runs in the next round, kept incrementally.

As Gavel's scheduler does it (Narayanan et al., OSDI 2020; `scheduler/scheduler.py` of its repository,
`_update_priorities`, `_reset_time_run_so_far`, `_schedule_jobs_on_workers`), per chip type ("worker type"):

1. The allocation X is recomputed only when jobs arrived or left (or the fleet changed) and at least
   `RESOLVE_S` has passed since the last recomputation (or none happened yet). A job that arrived since has
   no allocation: it is not placed until the next one (chips the allocated jobs leave stay idle).
2. At each recomputation the time each job ran on each chip type restarts from half a round; what it
   received below (or above) its allocation since the previous one is added to its deficit.
3. A job's priority on a chip type is X / (its share of the time run on that type since the recomputation);
   a job with an allocation there that has not run gets X * 1e9; a job without one, 0.
4. Chip types are taken in turn (agnostic policies: in an order shuffled every round, hetero ones: fastest
   first); each takes its jobs by priority, then deficit, then X, then arrival, while its chips last.
   A job is taken once; one its type cannot run is skipped.
5. Time run counts whole steps: a job with a throughput row is credited the time of the whole steps it did
   (Gavel runs `int(throughput x round)` steps per micro-task), which is what breaks ties in priority.

Everything per round is numpy over every active job: nothing is rebuilt per job and per round.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Protocol, cast, runtime_checkable

import numpy as np

from crossrail.scheduling.policies.base import JobView, PoolView, rate

RESOLVE_S = 1920.0
"""The least time between two recomputations of the allocation (Gavel's
`minimum_time_between_allocation_resets`)."""
UNRUN = 1e9
"""A job that has not run on a chip type since the recomputation: X times this (Gavel's stand-in for inf)."""

STEP_SLACK = 1e-6
"""Steps within this of a whole number count as whole (float error in rate x seconds)."""

ANY_TYPE = "*"
"""`seen`'s key for service a view does not split by chip type."""
Solve = Callable[[Sequence[JobView], Sequence[PoolView]], dict[str, dict[str, float]]]
"""The allocation for some jobs on some pools: run -> pool -> fraction of time."""


class ClassSolve(Protocol):
    """An allocation the same for every job of a class, solved per class (as `MaxMinFairness` does): the
    ledger keeps each job's class and hands over one job and a count per class instead of every job."""

    def classify(self, jobs: Sequence[JobView], pools: Sequence[PoolView]) -> list[Hashable]:
        """Each job's class on `pools` (a job's class changes only with the pools)."""
        ...

    def solve_classes(
        self, classes: Mapping[Hashable, tuple[JobView, int]], pools: Sequence[PoolView]
    ) -> Mapping[Hashable, Mapping[str, float]]:
        """Class -> pool -> fraction of time, for class -> (its first job, how many jobs it has)."""
        ...


class RoundLedger:
    """Every active job's time run, deficit and allocation per chip type, and the plan for each round."""

    def __init__(
        self, solve: Solve, round_s: float, *, shuffle: bool, seed: int = 0, classes: ClassSolve | None = None
    ) -> None:
        """`solve` gives the allocation of the active jobs; `classes`, when given, gives the same allocation
        per job class (cheaper: the ledger then keeps each job's class, and `solve` is not called)."""
        self.solve = solve
        self.classes = classes
        self.half = round_s / 2.0
        self.shuffle = shuffle
        self.rng = random.Random(seed + 5)
        self.types: list[str] = []
        self.slot: dict[str, int] = {}
        self.views: list[JobView | None] = []
        self.free: list[int] = []
        self.seq = 0
        n, t = 0, 0
        self.order = np.zeros(n, dtype=np.int64)
        """Arrival sequence of each slot (ties in priority go to the earlier arrival)."""
        self.runs = np.zeros(n, dtype=object)
        """Each slot's run (None when free)."""
        self.kind = np.zeros(n, dtype=np.int64)
        """Each active slot's job class as an index into `kinds` (-1: not classified on this fleet yet)."""
        self.kinds: dict[Hashable, int] = {}
        self.class_keys: list[Hashable] = []
        """Each slot's job class as `classes` gave it (valid where `kind` is)."""
        self.chips = np.zeros(n, dtype=np.int64)
        self.active = np.zeros(n, dtype=bool)
        self.allocated = np.zeros(n, dtype=bool)
        self.stepped = np.zeros(n, dtype=bool)
        """Whether the job's work is counted in steps (it has a throughput row), so its time in whole steps."""
        self.rates = np.zeros((n, t))
        self.time = np.zeros((n, t))
        self.deficit = np.zeros((n, t))
        self.alloc = np.zeros((n, t))
        self.worker_time = np.zeros(t)
        self.last_reset = 0.0
        self.changed = True
        self.fleet: tuple[object, ...] = ()
        self._fastest: tuple[tuple[int, int, int], list[int]] | None = None
        """The chip types fastest first, for the active jobs of (join count, free slots, types) then."""
        # Slot x chip type -> the job's rate there over its best rate (for the types' order), and which rows hold.
        self._rel, self._rel_ok = np.zeros((0, 0)), np.zeros(0, dtype=bool)
        self.seen: dict[str, dict[str, float]] = {}
        """Run -> chip type -> service seen so far (`sync` credits what grew since)."""
        self._ranks: list[np.ndarray] | None = None
        """Per chip type, the active slots that can run there by deficit there (largest first), then
        allocation there (largest first), then arrival: what ranks them after priority. Kept across rounds
        (joins and leaves update it) until the allocation changes."""
        self._behind: list[np.ndarray] = []
        """Per chip type, -deficit there of the slots of `_ranks` (ascending, so a joining job's place is found
        by bisection)."""
        self._unranked = np.zeros((n, t), dtype=bool)
        """Where a job's priority is 0: no allocation there, its chips cannot run it, or none yet (with `_ranks`)."""
        self.gangs = {"single": 0, "negative": 0}
        """Active jobs whose gang is not one chip, and whose gang is negative."""
        self._pools: tuple[tuple[object, ...], list[int], list[str | None]] | None = None
        """(fleet and types, chips per chip type, the type's pool when it has only one) for `plan`."""

    # --- membership and service ------------------------------------------------------------------

    def join(self, view: JobView) -> None:
        """A job arrives: it runs half a round on every chip type so far, and waits for an allocation."""
        if view.run in self.slot:
            return
        if not self.free:
            self._grow(max(8, 2 * len(self.views)))
        s = self.free.pop()
        self.slot[view.run], self.views[s], self.runs[s], self.kind[s] = s, view, view.run, -1
        self.order[s], self.seq = self.seq, self.seq + 1
        self.chips[s], self.active[s], self.allocated[s] = view.chips, True, False
        self.stepped[s] = bool(view.throughput)
        self.rates[s] = [rate(view, t) for t in self.types]
        if s < len(self._rel_ok):
            self._rel_ok[s] = False
        self.time[s], self.deficit[s], self.alloc[s] = self.half, 0.0, 0.0
        self.changed = True
        self.gangs["single"] += view.chips != 1
        self.gangs["negative"] += view.chips < 0
        if self._ranks is not None:  # no deficit, no allocation, the latest arrival: after every job ranked
            self._unranked[s] = True  # before it by deficit (>= 0), then allocation (>= 0)
            for t, rows in enumerate(self._ranks):
                if self.rates[s, t] > 0:
                    behind = self._behind[t]
                    at = int(np.searchsorted(behind, 0.0, side="left"))
                    tied = int(np.searchsorted(behind, 0.0, side="right"))
                    if tied > at:
                        at += int(np.count_nonzero(self.alloc[rows[at:tied], t] >= 0))
                    self._ranks[t] = np.concatenate((rows[:at], [s], rows[at:]))
                    self._behind[t] = np.concatenate((behind[:at], [-0.0], behind[at:]))

    def leave(self, run: str) -> None:
        """A job has finished (or is no longer a candidate): it leaves; the allocation is due again."""
        s = self.slot.pop(run, None)
        self.seen.pop(run, None)
        if s is None:
            return
        self.views[s], self.runs[s], self.active[s], self.allocated[s] = None, None, False, False
        self.free.append(s)
        self.changed = True
        self.gangs["single"] -= int(self.chips[s]) != 1
        self.gangs["negative"] -= int(self.chips[s]) < 0
        if self._ranks is not None:
            for t, rows in enumerate(self._ranks):
                if self.rates[s, t] > 0:
                    keep = rows != s
                    self._ranks[t], self._behind[t] = rows[keep], self._behind[t][keep]

    def ran(self, run: str, chip_type: str, seconds: float) -> None:
        """`run` ran `seconds` on `chip_type` (Gavel counts a job's time, whatever its gang).

        A job with a throughput row is credited the time of the whole steps it did (see `whole_steps_s`)."""
        s = self.slot.get(run)
        if s is None or seconds <= 0 or chip_type not in self.types:
            return
        t = self.types.index(chip_type)
        if self.stepped[s]:
            seconds = whole_steps_s(float(self.rates[s, t]), seconds)
        self.time[s, t] += seconds
        self.worker_time[t] += seconds

    def sync(self, jobs: Sequence[JobView], pools: Sequence[PoolView]) -> None:
        """Make the ledger's jobs those of `jobs` (in arrival order) and credit the service each gained since
        it was last seen (for callers that hand over views rather than report every stretch run)."""
        self._types(pools)
        here = {j.run for j in jobs}
        for run in [r for r in self.slot if r not in here]:
            self.leave(run)
        chip_type = {p.name: p.chip_type for p in pools}
        for job in sorted(jobs, key=lambda j: (j.submitted_at, j.run)):
            if job.run not in self.slot:
                self.join(job)
            before, chips = self.seen.get(job.run, {}), max(job.chips, 1)
            if job.attained_by_type:
                got = dict(job.attained_by_type)
                for kind, chip_s in got.items():
                    if not chip_s <= before.get(kind, 0.0):  # no growth is no credit (`ran` takes none)
                        self.ran(job.run, kind, (chip_s - before.get(kind, 0.0)) / chips)
            else:  # service without a split by chip type: what grew counts where the job runs now
                got = {ANY_TYPE: job.attained_s}
                if job.pool in chip_type:
                    self.ran(job.run, chip_type[job.pool], (job.attained_s - before.get(ANY_TYPE, 0.0)) / chips)
            self.seen[job.run] = got

    # --- the round -------------------------------------------------------------------------------

    def plan(self, now: float, pools: Sequence[PoolView], running: Mapping[str, str]) -> dict[str, str]:
        """Run -> pool for the next round (`running`: run -> the pool it runs on now)."""
        slots, where = self.plan_slots(now, pools, lambda: running)
        runs, names = self.runs[slots].tolist(), [p.name for p in pools]
        return dict(zip(runs, map(names.__getitem__, where.tolist()), strict=True))

    def plan_slots(
        self, now: float, pools: Sequence[PoolView], running: Callable[[], Mapping[str, str]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """`plan` as arrays: the slots of the runs placed (in `plan`'s order) and the index in `pools` of the
        pool each goes to. `running` gives run -> the pool it runs on now, asked only where a chip type has
        several pools (a simulator keeping its runs by slot builds no names for the common case)."""
        self._types(pools)
        if self.changed and (now - self.last_reset >= RESOLVE_S or self.last_reset == 0.0):
            self._reset(now, pools)
        ranks = self._ranks if self._ranks is not None else self._rank()
        share = np.divide(self.time, self.worker_time, out=np.zeros_like(self.time), where=self.worker_time > 0)
        ran = share > 0
        priority = np.where(ran, self.alloc / np.where(ran, share, 1.0), self.alloc * UNRUN)
        priority[self._unranked] = 0.0
        per_type, only_pool = self._fleet_view(pools)
        singles = self.gangs["single"] == 0
        taken = np.zeros(len(self.views), dtype=bool)
        chosen: list[np.ndarray] = []
        columns: list[int] = []
        for t in self._type_order():
            # Ranked by priority, then deficit, allocation and arrival: a stable sort by priority of the rows
            # already in order of the rest. Ranks are distinct (arrival breaks every tie), so dropping the
            # rows taken afterwards leaves the order ranking the rest would give.
            rows = ranks[t]
            ranked = rows[np.argsort(-priority[rows, t], kind="stable")]
            ranked = ranked[~taken[ranked]]
            if singles:  # one chip each: the first that fit
                took = ranked[: max(per_type[t], 0)]
            else:
                took = np.array(_take(ranked, self.chips[ranked], per_type[t]), dtype=np.int64)
            taken[took] = True
            chosen.append(took)
            columns.append(t)
        if self.gangs["negative"] == 0 and all(only_pool[t] is not None for t in columns):
            # Each chip type has one pool and its jobs were taken while their gangs fit its chips: every one
            # fits there whatever the order, so the plan is the chosen allocated jobs, largest gangs first.
            position = {p.name: i for i, p in enumerate(pools)}
            pool_of = np.array([position[only_pool[t] or ""] for t in columns], dtype=np.int64)
            at = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
            on = np.repeat(pool_of, [len(took) for took in chosen])
            if not singles:  # largest gangs first; all alike are kept in the order taken
                first = np.argsort(-self.chips[at], kind="stable")
                at, on = at[first], on[first]
            keep = self.allocated[at]
            return at[keep], on[keep]
        pairs = [(s, t) for t, took in zip(columns, chosen, strict=True) for s in took.tolist()]
        placed = self._place(pairs, pools, running())
        position = {p.name: i for i, p in enumerate(pools)}
        slots = np.array([self.slot[run] for run in placed], dtype=np.int64)
        return slots, np.array([position[name] for name in placed.values()], dtype=np.int64)

    def _rank(self) -> list[np.ndarray]:
        """`_ranks` and `_unranked` afresh from the allocation."""
        self._unranked = (self.alloc <= 0) | (self.rates <= 0) | ~self.allocated[:, None]
        self._ranks, self._behind = [], []
        for t in range(len(self.types)):
            rows = np.flatnonzero(self.active & (self.rates[:, t] > 0))
            rows = rows[np.lexsort((self.order[rows], -self.alloc[rows, t], -self.deficit[rows, t]))]
            self._ranks.append(rows)
            self._behind.append(-self.deficit[rows, t])
        return self._ranks

    def _fleet_view(self, pools: Sequence[PoolView]) -> tuple[list[int], list[str | None]]:
        """Chips per chip type (by column) and, for a type with a single pool, that pool's name."""
        key = (self.fleet, len(self.types))
        if self._pools is None or self._pools[0] != key:
            per_type = [sum(p.capacity for p in pools if p.chip_type == t) for t in self.types]
            names = [sorted(p.name for p in pools if p.chip_type == t) for t in self.types]
            self._pools = (key, per_type, [n[0] if len(n) == 1 else None for n in names])
        return self._pools[1], self._pools[2]

    def _place(
        self, chosen: list[tuple[int, int]], pools: Sequence[PoolView], running: Mapping[str, str]
    ) -> dict[str, str]:
        """Each chosen job on a pool of its chip type: where it runs now if that has room, else the pool with
        the most chips left. A job without an allocation holds its chips this round but is not placed."""
        left = {p.name: p.capacity for p in pools}
        of_type = {i: sorted(p.name for p in pools if p.chip_type == t) for i, t in enumerate(self.types)}
        chips, allocated = self.chips.tolist(), self.allocated.tolist()
        placed: dict[str, str] = {}
        for s, t in sorted(chosen, key=lambda c: -chips[c[0]]):  # largest gangs first, as Gavel
            view = self.views[s]
            assert view is not None
            need, names = chips[s], of_type[t]
            if len(names) == 1:  # the type's only pool: the chips its jobs were taken by are all there
                if left[names[0]] >= need:
                    left[names[0]] -= need
                    if allocated[s]:
                        placed[view.run] = names[0]
                continue
            candidates = [name for name in names if left[name] >= need]
            if not candidates:
                continue
            now_on = running.get(view.run)
            pool = now_on if now_on in candidates else max(candidates, key=lambda name: (left[name], name))
            left[pool] -= need
            if allocated[s]:
                placed[view.run] = pool
        return placed

    def _type_order(self) -> list[int]:
        """Fastest first (Gavel's v100, p100, k80), then, for agnostic policies, shuffled afresh each round
        by the same generator Gavel uses (Python's `random.Random(seed + 5)`)."""
        members = (self.seq, len(self.free), len(self.types))  # changes with every join, leave and new type
        if self._fastest is None or self._fastest[0] != members:
            act = np.flatnonzero(self.active)
            fastest = list(range(len(self.types)))
            if len(act):
                if self._rel.shape != self.rates.shape:  # a new chip type or more slots: every row afresh
                    self._rel, self._rel_ok = np.zeros_like(self.rates), np.zeros(len(self.rates), dtype=bool)
                stale = act[~self._rel_ok[act]]
                if len(stale):  # each job's rate on each type over its best, kept while it stays
                    rates = self.rates[stale]
                    best = rates.max(axis=1, keepdims=True)
                    self._rel[stale] = np.divide(rates, best, out=np.zeros_like(rates), where=best > 0)
                    self._rel_ok[stale] = True
                speed = self._rel[act].mean(axis=0)
                fastest.sort(key=lambda t: (-speed[t], self.types[t]))
            self._fastest = (members, fastest)
        order = list(self._fastest[1])
        if self.shuffle:
            self.rng.shuffle(order)
        return order

    def _reset(self, now: float, pools: Sequence[PoolView]) -> None:
        """Deficits take what each job got below its allocation since the last reset; time restarts from half
        a round; the allocation is solved again for every active job."""
        live = np.flatnonzero(self.active)
        elapsed = now - self.last_reset
        got = self.time[live] - self.half
        self.deficit[live] += np.where(self.allocated[live, None], self.alloc[live] * elapsed, 0.0) - got
        self.time[live] = self.half
        self.worker_time = np.full(len(self.types), self.half * len(live))
        column = {p.name: self.types.index(p.chip_type) for p in pools}
        width = len(self.types)
        if self.classes is None:
            shares = self.solve(self._views_at(live), pools)
            rows = [_row(shares.get(run, {}), column, width) for run in self.runs[live].tolist()]
            ids = np.arange(len(live))
        else:
            ids, rows = self._class_rows(live, pools, column)
        alloc = np.zeros((len(self.views), width))
        alloc[live] = np.array(rows, dtype=float).reshape(len(rows), width)[ids]
        self.alloc = alloc
        self.allocated[:] = self.active
        self.last_reset, self.changed, self._ranks = now, False, None

    def _class_rows(
        self, live: np.ndarray, pools: Sequence[PoolView], column: Mapping[str, int]
    ) -> tuple[np.ndarray, list[list[float]]]:
        """The allocation per job class (`classes`) as rows by column, and each active slot's row among them."""
        assert self.classes is not None
        new = live[self.kind[live] < 0]
        if len(new):
            keys = self.classes.classify(self._views_at(new), pools)
            for s, key in zip(new.tolist(), keys, strict=True):
                self.kind[s], self.class_keys[s] = self.kinds.setdefault(key, len(self.kinds)), key
        kind_keys = list(self.kinds)
        ids, first, inverse, counts = np.unique(
            self.kind[live], return_index=True, return_inverse=True, return_counts=True
        )
        classes: dict[Hashable, tuple[JobView, int]] = {}
        for i in np.argsort(first, kind="stable").tolist():  # classes in order of their first slot, as the jobs
            s = int(live[first[i]])
            view = self.views[s]
            assert view is not None
            classes[self.class_keys[s]] = (view, int(counts[i]))
        found = self.classes.solve_classes(classes, pools)
        empty: Mapping[str, float] = {}
        rows = [_row(found.get(kind_keys[int(u)], empty), column, len(self.types)) for u in ids.tolist()]
        return inverse.reshape(-1), rows

    def _views_at(self, slots: np.ndarray) -> list[JobView]:
        """The views of active slots (an active slot always holds one)."""
        return cast(list[JobView], [self.views[s] for s in slots.tolist()])

    # --- storage ---------------------------------------------------------------------------------

    def _types(self, pools: Sequence[PoolView]) -> None:
        """Track the fleet's chip types (a new one adds a column) and note a change of capacity."""
        fleet = tuple(sorted((p.name, p.chip_type, p.capacity) for p in pools))
        if fleet != self.fleet:
            self.fleet, self.changed = fleet, True
            self.kind[:], self.kinds = -1, {}  # a job's class depends on the pools
        for t in sorted({p.chip_type for p in pools} - set(self.types)):
            self.types.append(t)
            for name in ("rates", "time", "deficit", "alloc"):
                column = np.full((len(self.views), 1), self.half if name == "time" else 0.0)
                setattr(self, name, np.hstack([getattr(self, name), column]))
            self.worker_time = np.append(self.worker_time, 0.0)
            self._ranks = None
            for s in self.slot.values():
                view = self.views[s]
                if view is not None:
                    self.rates[s, -1] = rate(view, t)

    def _grow(self, extra: int) -> None:
        n, t = len(self.views), len(self.types)
        self.views.extend([None] * extra)
        self.free.extend(range(n + extra - 1, n - 1, -1))
        for name, dtype in (
            ("order", np.int64), ("chips", np.int64), ("active", bool), ("allocated", bool), ("stepped", bool)
        ):  # fmt: skip
            setattr(self, name, np.concatenate([getattr(self, name), np.zeros(extra, dtype=dtype)]))
        self.runs = np.concatenate([self.runs, np.full(extra, None, dtype=object)])
        self.kind = np.concatenate([self.kind, np.full(extra, -1, dtype=np.int64)])
        self.class_keys.extend([None] * extra)
        self._ranks = None
        for name in ("rates", "time", "deficit", "alloc"):
            setattr(self, name, np.vstack([getattr(self, name), np.zeros((extra, t))]))


def _row(shares: Mapping[str, float], column: Mapping[str, int], width: int) -> list[float]:
    """Pool -> share as a row by chip type, summed as plain floats in the order of `shares`."""
    row = [0.0] * width
    for pool, x in shares.items():
        row[column[pool]] += x
    return row


def _take(ranked: np.ndarray, chips: np.ndarray, room: int) -> list[int]:
    """The slots a chip type takes, in rank order: each whose gang fits what is left of `room` after those
    before it. The longest prefix that fits whole is found in one step; past it (a gang that does not fit),
    the rest are tried one by one, as smaller gangs may still fit."""
    if room <= 0 or not len(ranked):
        return []
    fit = int(np.searchsorted(np.cumsum(chips), room, side="right"))
    took: list[int] = ranked[:fit].tolist()
    room -= int(chips[:fit].sum())
    for s, need in zip(ranked[fit:].tolist(), chips[fit:].tolist(), strict=True):
        if room <= 0:
            break
        if need <= room:
            took.append(s)
            room -= need
    return took


def whole_steps_s(rate_now: float, seconds: float) -> float:
    """The time of the whole steps a job at `rate_now` steps/s did in `seconds`, as Gavel counts time received.

    Gavel's simulator runs `int(throughput x round)` steps in each micro-task (`_get_num_steps`) and credits
    the time those steps took (`_done_callback`), so jobs that ran the same round are credited slightly
    different times (a job loses what is left of its last step), and those differences, not the arrival
    order, break the ties in priority between them. Credited in full, every job that ran a round would tie
    with the others that did, and the earliest arrivals would win each tie round after round: closer to
    FIFO than Gavel's rotation (on Gavel's 15-job trace, 5,688 s against 5,837 s, mean of twelve shuffles).
    """
    if rate_now <= 0:
        return seconds
    steps = rate_now * seconds + STEP_SLACK
    whole = float(math.floor(steps)) if math.isfinite(steps) else steps  # np.floor's value, at a float's cost
    return whole / rate_now


@runtime_checkable
class Ledgered(Protocol):
    """A policy whose rounds keep a `RoundLedger` (a simulator tells it of arrivals, ends and time run)."""

    def ledger(self, round_s: float) -> RoundLedger: ...
