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

import functools
import operator
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

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


class RoundLedger:
    """Every active job's time run, deficit and allocation per chip type, and the plan for each round."""

    def __init__(self, solve: Solve, round_s: float, *, shuffle: bool, seed: int = 0) -> None:
        self.solve = solve
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
        self.seen: dict[str, dict[str, float]] = {}
        """Run -> chip type -> service seen so far (`sync` credits what grew since)."""

    # --- membership and service ------------------------------------------------------------------

    def join(self, view: JobView) -> None:
        """A job arrives: it runs half a round on every chip type so far, and waits for an allocation."""
        if view.run in self.slot:
            return
        if not self.free:
            self._grow(max(8, 2 * len(self.views)))
        s = self.free.pop()
        self.slot[view.run], self.views[s] = s, view
        self.order[s], self.seq = self.seq, self.seq + 1
        self.chips[s], self.active[s], self.allocated[s] = view.chips, True, False
        self.stepped[s] = bool(view.throughput)
        self.rates[s] = [rate(view, t) for t in self.types]
        self.time[s], self.deficit[s], self.alloc[s] = self.half, 0.0, 0.0
        self.changed = True

    def leave(self, run: str) -> None:
        """A job has finished (or is no longer a candidate): it leaves; the allocation is due again."""
        s = self.slot.pop(run, None)
        self.seen.pop(run, None)
        if s is None:
            return
        self.views[s], self.active[s], self.allocated[s] = None, False, False
        self.free.append(s)
        self.changed = True

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

    def ran_each(self, runs: Sequence[str], chip_types: Sequence[str], seconds: Sequence[float]) -> None:
        """As `ran(runs[i], chip_types[i], seconds[i])` for each i in turn (each run named at most once), in
        one numpy step: a simulator credits every running job at each round boundary."""
        index = {t: i for i, t in enumerate(self.types)}
        rows, cols, secs = [], [], []
        for run, kind, sec in zip(runs, chip_types, seconds, strict=True):
            s, t = self.slot.get(run), index.get(kind)
            if s is not None and t is not None and sec > 0:
                rows.append(s)
                cols.append(t)
                secs.append(sec)
        if not rows:
            return
        at, on, got = np.array(rows), np.array(cols), np.array(secs)
        rates = self.rates[at, on]
        whole = self.stepped[at] & (rates > 0)  # as whole_steps_s, element by element
        got[whole] = np.floor(rates[whole] * got[whole] + STEP_SLACK) / rates[whole]
        self.time[at, on] += got
        for t in range(len(self.types)):  # summed in turn, as `ran` one job after another would
            self.worker_time[t] = functools.reduce(operator.add, got[on == t].tolist(), float(self.worker_time[t]))

    def sync(self, jobs: Sequence[JobView], pools: Sequence[PoolView]) -> None:
        """Make the ledger's jobs those of `jobs` (in arrival order) and credit the service each gained since
        it was last seen (for callers that hand over views rather than report every stretch run)."""
        self._types(pools)
        here = {j.run for j in jobs}
        for run in [r for r in self.slot if r not in here]:
            self.leave(run)
        chip_type = {p.name: p.chip_type for p in pools}
        for job in sorted(jobs, key=lambda j: (j.submitted_at, j.run)):
            self.join(job)
            before, chips = self.seen.get(job.run, {}), max(job.chips, 1)
            if job.attained_by_type:
                got = dict(job.attained_by_type)
                for kind, chip_s in got.items():
                    self.ran(job.run, kind, (chip_s - before.get(kind, 0.0)) / chips)
            else:  # service without a split by chip type: what grew counts where the job runs now
                got = {ANY_TYPE: job.attained_s}
                if job.pool in chip_type:
                    self.ran(job.run, chip_type[job.pool], (job.attained_s - before.get(ANY_TYPE, 0.0)) / chips)
            self.seen[job.run] = got

    # --- the round -------------------------------------------------------------------------------

    def plan(self, now: float, pools: Sequence[PoolView], running: Mapping[str, str]) -> dict[str, str]:
        """Run -> pool for the next round (`running`: run -> the pool it runs on now)."""
        self._types(pools)
        if self.changed and (now - self.last_reset >= RESOLVE_S or self.last_reset == 0.0):
            self._reset(now, pools)
        act = self.active
        share = np.divide(self.time, self.worker_time, out=np.zeros_like(self.time), where=self.worker_time > 0)
        priority = np.where(share > 0, self.alloc / np.where(share > 0, share, 1.0), self.alloc * UNRUN)
        priority[(self.alloc <= 0) | (self.rates <= 0) | ~self.allocated[:, None]] = 0.0
        left = {t: sum(p.capacity for p in pools if p.chip_type == t) for t in self.types}
        taken = np.zeros(len(self.views), dtype=bool)
        chosen: list[tuple[int, int]] = []
        for t in self._type_order():
            rows = np.flatnonzero(act & (self.rates[:, t] > 0) & ~taken)
            ranked = rows[
                np.lexsort((self.order[rows], -self.alloc[rows, t], -self.deficit[rows, t], -priority[rows, t]))
            ]
            took = _take(ranked, self.chips[ranked], left[self.types[t]])
            taken[took] = True
            chosen.extend((s, t) for s in took)
        return self._place(chosen, pools, running)

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
            act = self.active
            fastest = list(range(len(self.types)))
            if act.any():
                best = self.rates[act].max(axis=1, keepdims=True)
                rel = np.divide(self.rates[act], best, out=np.zeros_like(self.rates[act]), where=best > 0)
                speed = rel.mean(axis=0)
                fastest.sort(key=lambda t: (-speed[t], self.types[t]))
            self._fastest = (members, fastest)
        order = list(self._fastest[1])
        if self.shuffle:
            self.rng.shuffle(order)
        return order

    def _reset(self, now: float, pools: Sequence[PoolView]) -> None:
        """Deficits take what each job got below its allocation since the last reset; time restarts from half
        a round; the allocation is solved again for every active job."""
        act = self.active
        elapsed = now - self.last_reset
        got = np.where(act[:, None], self.time - self.half, 0.0)
        self.deficit += np.where(self.allocated[:, None], self.alloc * elapsed, 0.0) - got
        self.time[act] = self.half
        self.worker_time = np.full(len(self.types), self.half * int(act.sum()))
        views = [v for v in self.views if v is not None]
        shares = self.solve(views, pools)
        column = {p.name: self.types.index(p.chip_type) for p in pools}
        alloc = [[0.0] * len(self.types) for _ in self.views]  # summed as plain floats, then stored at once
        for run, s in self.slot.items():
            row = alloc[s]
            for pool, x in shares.get(run, {}).items():
                row[column[pool]] += x
        self.alloc = np.array(alloc).reshape(len(self.views), len(self.types))
        self.allocated[:] = act
        self.last_reset, self.changed = now, False

    # --- storage ---------------------------------------------------------------------------------

    def _types(self, pools: Sequence[PoolView]) -> None:
        """Track the fleet's chip types (a new one adds a column) and note a change of capacity."""
        fleet = tuple(sorted((p.name, p.chip_type, p.capacity) for p in pools))
        if fleet != self.fleet:
            self.fleet, self.changed = fleet, True
        for t in sorted({p.chip_type for p in pools} - set(self.types)):
            self.types.append(t)
            for name in ("rates", "time", "deficit", "alloc"):
                column = np.full((len(self.views), 1), self.half if name == "time" else 0.0)
                setattr(self, name, np.hstack([getattr(self, name), column]))
            self.worker_time = np.append(self.worker_time, 0.0)
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
        for name in ("rates", "time", "deficit", "alloc"):
            setattr(self, name, np.vstack([getattr(self, name), np.zeros((extra, t))]))


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
    return float(np.floor(rate_now * seconds + STEP_SLACK)) / rate_now


@runtime_checkable
class Ledgered(Protocol):
    """A policy whose rounds keep a `RoundLedger` (a simulator tells it of arrivals, ends and time run)."""

    def ledger(self, round_s: float) -> RoundLedger: ...
