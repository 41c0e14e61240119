"""Whom to preempt so a blocked head fits: the fewest victims, losing the least work since a checkpoint.

Candidates on the pool, for a head of queue q:
  - priority: q's own runs of a lower priority class;
  - reclaim: when the head fits within q's nominal quota, runs of other queues of q's cohort that are
    borrowing on that pool (their queue uses more than its own quota there), whatever their priority.
Runs already stopping, runs inside a reservation (for reclaim) and runs preempted `max_preemptions`
times within the window are never candidates. Candidates are ordered lowest priority first, then least
work lost since a checkpoint. On the snapshot, the first candidate that makes room on its own is the
whole victim set; failing that, candidates are released in order until the head fits, then every victim
the head can do without is put back (most work lost first). The snapshot is restored either way.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import NamedTuple

from crossrail.core import format_duration
from crossrail.scheduling.cache import Cache
from crossrail.scheduling.pool import ACTIVE, PoolState
from crossrail.scheduling.snapshot import Snapshot
from crossrail.scheduling.types import Allocation, Request


class Victim(NamedTuple):
    """A candidate run to preempt (a tuple: a cycle makes one for every run it may preempt)."""

    alloc: Allocation
    kind: str
    """`priority` (a lower class in the head's queue) or `reclaim` (borrowed quota the head's queue lends)."""

    def reason(self, req: Request, now: float, cohort: str | None) -> str:
        lost = format_duration(max(self.alloc.lost_work_s(now), 1))
        if self.kind == "priority":
            other = self.alloc.request.priority
            why = f"preempted for {req.run}: {req.priority} outranks {other} in queue {req.queue}"
        else:
            why = (
                f"reclaimed for {req.run}: queue {self.alloc.queue} borrows {self.alloc.pool} chips in cohort "
                f"{cohort} and queue {req.queue} needs its own quota"
            )
        return f"{why}; {lost} of work since its last checkpoint"


def victims(
    snap: Snapshot, book: Candidates, req: Request, pool: PoolState, fits: Callable[[], bool]
) -> list[Victim] | None:
    """The victims that let `req` fit `pool` (checked by `fits` on the snapshot), or None when none do."""
    sizes = pool.sizes_of(req.low, req.high, req.unit)
    gang = sizes[-1] if sizes else None  # largest first: the last is the smallest gang
    candidates = book.candidates(snap, req, pool) if gang is not None else []
    if gang is None or not candidates or sum(v.alloc.chips for v in candidates) < gang - pool.free_chips:
        return None
    hosts = _Hosts.of(pool, req.unit)
    single = _single(snap, candidates, hosts, gang, fits)
    if single is not None:
        return [single]
    chosen = _greedy(snap, candidates, hosts, gang, fits)
    if chosen is None:
        return None
    mark = snap.mark()
    try:
        for victim in chosen:
            snap.release(victim.alloc)
        for victim in sorted(chosen[:-1], key=lambda v: -v.alloc.lost_work_s(snap.now)):
            snap.take(victim.alloc)
            if fits():
                chosen.remove(victim)
            else:
                snap.release(victim.alloc)
        return chosen
    finally:
        snap.restore(mark)


def _greedy(
    snap: Snapshot, candidates: list[Victim], hosts: _Hosts, gang: int, fits: Callable[[], bool]
) -> list[Victim] | None:
    """Candidates in order up to the first prefix after which the head fits; None when none does.

    Prefixes whose freed chips could not form the gang's hosts are skipped without touching the snapshot.
    """
    chosen: list[Victim] = []
    freed: dict[int, int] = {}
    released: dict[str, int] = {}
    applied = 0
    mark = snap.mark()
    try:
        for victim in candidates:
            alloc = victim.alloc
            borrowing = snap.borrowed(alloc.queue, hosts.pool.name) - released.get(alloc.queue, 0)
            if victim.kind == "reclaim" and borrowing <= 0:
                continue  # its queue no longer borrows once the earlier victims are gone
            chosen.append(victim)
            released[alloc.queue] = released.get(alloc.queue, 0) + alloc.chips
            for h, c in alloc.hosts:
                freed[h] = freed.get(h, 0) + c
            if not hosts.room(gang, freed):
                continue
            for pending in chosen[applied:]:
                snap.release(pending.alloc)
            applied = len(chosen)
            if fits():
                return chosen
        return None
    finally:
        snap.restore(mark)


def _single(
    snap: Snapshot, candidates: list[Victim], hosts: _Hosts, gang: int, fits: Callable[[], bool]
) -> Victim | None:
    """The first candidate (in preference order) that makes room on its own."""
    for victim in candidates:
        if not hosts.room(gang, dict(victim.alloc.hosts)):
            continue
        mark = snap.mark()
        snap.release(victim.alloc)
        ok = fits()
        snap.restore(mark)
        if ok:
            return victim
    return None


class _Hosts(NamedTuple):
    """A cheap necessary test before a full fit on the snapshot: could the pool's hosts hold the gang once
    some chips are released? Reads the pool as it is; where a trial release already shows in it, the test
    only errs towards trying the full fit."""

    pool: PoolState
    whole: int
    best: int
    spreads: bool = False
    """A gang of workers that may spread over hosts (pool.py): free chips alone decide the cheap test."""

    @classmethod
    def of(cls, pool: PoolState, unit: int | None = None) -> _Hosts:
        per = pool.per_host
        whole = sum(len(b[per]) for b in pool.buckets.values())
        best = 0  # the most free chips on one active host
        for b in pool.buckets.values():
            for f in range(per, best, -1):
                if b[f]:
                    best = f
                    break
        return cls(pool, whole, best, unit is not None and pool.allows(unit, unit) and pool.shapes is None)

    def room(self, gang: int, freed: dict[int, int]) -> bool:
        """Whether a `gang` could find hosts once `freed` (host -> chips) is released."""
        pool = self.pool
        if pool.free_chips + sum(freed.values()) < gang:
            return False
        if self.spreads:
            return True
        per, free, state = pool.per_host, pool.free, pool.state
        if gang <= per:
            return self.best >= gang or any(state[h] == ACTIVE and free[h] + c >= gang for h, c in freed.items())
        extra = sum(1 for h, c in freed.items() if state[h] == ACTIVE and free[h] + c >= per)
        return self.whole + extra >= gang // per


def could_preempt(snap: Snapshot, cache: Cache, req: Request, pool: str) -> bool:
    """A cheap test before listing candidates: does q run lower-priority work here, or may it reclaim?"""
    return cache.has_lower(req.queue, pool, req.rank) or _may_reclaim(snap, req, pool)


def _may_reclaim(snap: Snapshot, req: Request, pool: str) -> bool:
    cohort = snap.quota.cohort_of(req.queue)
    if cohort is None:
        return False
    if snap.used.get((req.queue, pool), 0) + req.low > snap.quota.nominal(req.queue, pool):
        return False
    return any(snap.borrowed(m, pool) > 0 for m in snap.quota.members[cohort] if m != req.queue)


_Key = tuple[int, float, float, str]
"""(minus the priority rank, work lost since a checkpoint, minus the start time, run): smaller is preempted first."""


class Candidates:
    """Every (queue, pool)'s allocations in victim order, sorted once per cycle.

    A cycle's blocked heads ask for the candidates of the same few (queue, pool) pairs again and again; the
    cache's allocations, their keys and protections do not change while a cycle admits (its admissions are
    indexed after the commit; a run preempted in the cycle is `evicting`, which is checked at each ask).
    Only the order and each run's minus rank are kept, not the keys or victims: objects that live through
    the cycle would make the garbage collector run more often during it.
    """

    def __init__(self, cache: Cache, now: float) -> None:
        self.cache = cache
        self.now = now
        self._sorted: dict[tuple[str, str, str], tuple[list[int], list[Allocation]]] = {}

    def candidates(self, snap: Snapshot, req: Request, pool: PoolState) -> list[Victim]:
        """Victims for `req` on `pool`, lowest priority first, then least work lost since a checkpoint."""
        ranks, own = self._of(req.queue, pool.name, "priority")
        own = own[: bisect_left(ranks, -req.rank)]  # minus ranks ascending: lower classes come first
        if not _may_reclaim(snap, req, pool.name):
            return [Victim(a, "priority") for a in own if not a.evicting]
        now = self.now
        merged = [(_key(a, now), Victim(a, "priority")) for a in own if not a.evicting]
        for member in snap.quota.members[snap.quota.cohort_of(req.queue) or ""]:
            if member != req.queue and snap.borrowed(member, pool.name) > 0:
                lent = self._of(member, pool.name, "reclaim")[1]
                merged += [(_key(a, now), Victim(a, "reclaim")) for a in lent if not a.evicting]
        merged.sort(key=lambda item: item[0])
        return [victim for _, victim in merged]

    def _of(self, queue: str, pool: str, kind: str) -> tuple[list[int], list[Allocation]]:
        found = self._sorted.get((queue, pool, kind))
        if found is None:
            cache, now = self.cache, self.now
            allocs: Iterable[Allocation] = cache.by_queue.get((queue, pool), {}).values()
            if kind == "reclaim":
                allocs = [a for a in allocs if a.reservation is None]
            history = cache.preempted_at  # only runs preempted before can be protected, unless all are
            everyone = cache.config.max_preemptions == 0
            ordered = [
                a
                for _, a in sorted(
                    (_key(a, now), a)
                    for a in allocs
                    if not (everyone or (a.run in history and cache.protected(a.run, now)))
                )
            ]
            found = self._sorted[(queue, pool, kind)] = ([-a.request.rank for a in ordered], ordered)
        return found


def _key(alloc: Allocation, now: float) -> _Key:
    return (-alloc.request.rank, alloc.lost_work_s(now), -alloc.started_at, alloc.run)
