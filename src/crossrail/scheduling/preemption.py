"""Whom to preempt so a blocked head fits: the fewest victims, losing the least work since a checkpoint.

Candidates on the pool, for a head of queue q:
  - priority: q's own runs of a lower priority class;
  - reclaim: when the head fits within q's nominal quota, runs of other queues of q's cohort that are
    borrowing on that pool (their queue uses more than its own quota there), whatever their priority.
Runs the same cycle admitted earlier are candidates by the same rules: they have not started, so the cycle
takes them back (`Victim.fresh`) rather than start them and preempt them at its next pass.
Runs already stopping, runs inside a reservation (for reclaim) and runs preempted `max_preemptions`
times within the window are never candidates, nor are the parts of a pipeline this cycle admitted.
Candidates are ordered lowest priority first, then least work lost since a checkpoint. On the snapshot, the
first candidate that makes room on its own is the whole victim set; failing that, candidates are released in
order until the head fits, then every victim the head can do without is put back (most work lost first).
The snapshot is restored either way.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Set
from typing import NamedTuple

from crossrail.core import format_duration
from crossrail.scheduling.cache import Cache
from crossrail.scheduling.pool import ACTIVE, PoolState
from crossrail.scheduling.snapshot import Snapshot
from crossrail.scheduling.types import Allocation, Hosts, Request


class Victim(NamedTuple):
    """A candidate run to preempt (a tuple: a cycle makes one for every run it may preempt)."""

    alloc: Allocation
    kind: str
    """`priority` (a lower class in the head's queue) or `reclaim` (borrowed quota the head's queue lends)."""
    fresh: bool = False
    """Admitted earlier in this cycle, not started: taken back rather than preempted."""

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
    snap: Snapshot, book: Candidates, req: Request, pool: PoolState, fits: Callable[[], bool], *, lenders: list[str]
) -> list[Victim] | None:
    """The victims that let `req` fit `pool` (checked by `fits` on the snapshot), or None when none do.

    `lenders` are the queues of `req`'s cohort it may reclaim from on the pool (`could_reclaim`).
    """
    sizes = pool.sizes_of(req.low, req.high, req.unit)
    if not sizes:
        return None
    gang = sizes[-1]  # largest first: the last is the smallest gang
    candidates, lent = book.candidates(req, pool.name, lenders)
    if not candidates or sum(a.chips for a in candidates) < gang - pool.free_chips:
        return None
    hosts = _Hosts.of(pool, req.unit)
    fresh = book.fresh
    single = _single(snap, candidates, hosts, gang, fits)
    if single is not None:
        return [Victim(single, "reclaim" if single.run in lent else "priority", single.run in fresh)]
    chosen = _greedy(snap, candidates, hosts, gang, fits, lent=lent)
    if chosen is None:
        return None
    mark = snap.mark()
    try:
        for alloc in chosen:
            snap.release(alloc)
        now = snap.now
        for alloc in sorted(chosen[:-1], key=lambda a: -a.lost_work_s(now)):
            snap.take(alloc)
            if fits():
                chosen = [a for a in chosen if a is not alloc]
            else:
                snap.release(alloc)
        return [Victim(a, "reclaim" if a.run in lent else "priority", a.run in fresh) for a in chosen]
    finally:
        snap.restore(mark)


def _greedy(
    snap: Snapshot, candidates: list[Allocation], hosts: _Hosts, gang: int, fits: Callable[[], bool], *, lent: Set[str]
) -> list[Allocation] | None:
    """Candidates in order up to the first prefix after which the head fits; None when none does.

    Prefixes whose freed chips could not form the gang's hosts are skipped without touching the snapshot.
    """
    chosen: list[Allocation] = []
    freed: dict[int, int] = {}
    unapplied: dict[str, int] = {}
    """Chips per queue of the chosen runs not yet released on the snapshot (its usage shows the others)."""
    applied = 0
    pool = hosts.pool.name
    mark = snap.mark()
    try:
        for alloc in candidates:
            queue = alloc.queue
            if lent and alloc.run in lent and snap.borrowed(queue, pool) - unapplied.get(queue, 0) <= 0:
                continue  # its queue no longer borrows once the earlier victims are gone
            chosen.append(alloc)
            unapplied[queue] = unapplied.get(queue, 0) + alloc.chips
            for h, c in alloc.hosts:
                freed[h] = freed.get(h, 0) + c
            if not hosts.room(gang, freed):
                continue
            for pending in chosen[applied:]:
                snap.release(pending)
            applied = len(chosen)
            unapplied.clear()
            if fits():
                return chosen
        return None
    finally:
        snap.restore(mark)


def _single(
    snap: Snapshot, candidates: list[Allocation], hosts: _Hosts, gang: int, fits: Callable[[], bool]
) -> Allocation | None:
    """The first candidate (in preference order) that makes room on its own."""
    room = hosts.room_one
    for alloc in candidates:
        if not room(gang, alloc.hosts):
            continue
        mark = snap.mark()
        snap.release(alloc)
        ok = fits()
        snap.restore(mark)
        if ok:
            return alloc
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

    def room_one(self, gang: int, hosts: Hosts) -> bool:
        """`room` for the hosts of one allocation (each host once), without building a dict."""
        pool = self.pool
        if pool.free_chips + sum(c for _, c in hosts) < gang:
            return False
        if self.spreads:
            return True
        per, free, state = pool.per_host, pool.free, pool.state
        if gang <= per:
            return self.best >= gang or any(state[h] == ACTIVE and free[h] + c >= gang for h, c in hosts)
        extra = sum(1 for h, c in hosts if state[h] == ACTIVE and free[h] + c >= per)
        return self.whole + extra >= gang // per


def could_reclaim(snap: Snapshot, req: Request, pool: str) -> list[str]:
    """The queues `req` may reclaim from on `pool`: when it fits within its queue's nominal quota there, the
    other queues of its cohort that borrow there (in the cohort's order); none otherwise."""
    quota = snap.quota
    cohort = quota.cohort_of(req.queue)
    if cohort is None:
        return []
    if snap.used.get((req.queue, pool), 0) + req.low > quota.nominal(req.queue, pool):
        return []
    return [m for m in quota.members[cohort] if m != req.queue and snap.borrowed(m, pool) > 0]


_Key = tuple[int, float, float, str]
"""(minus the priority rank, work lost since a checkpoint, minus the start time, run): smaller is preempted first."""


class Candidates:
    """Every (queue, pool)'s allocations in victim order, sorted once per cycle.

    A cycle's blocked heads ask for the candidates of the same few (queue, pool) pairs again and again; the
    cache's allocations, their keys and protections do not change while a cycle admits (its admissions are
    indexed after the commit; a run preempted in the cycle is `evicting`, which is checked at each ask).
    One order per (queue, pool) serves both kinds: a queue's own lower classes read a prefix of it, a
    lender's borrowed runs the part outside reservations. Only the order and each run's minus rank are
    kept, not the keys: objects that live through the cycle make the garbage collector run more often.
    The cycle's own admissions so far (`admitted`) are candidates too, by the same rules, merged into the
    order where there are any (they have lost no work, so they come first within their class).
    """

    def __init__(self, cache: Cache, now: float) -> None:
        self.cache = cache
        self.now = now
        self._sorted: dict[tuple[str, str], tuple[list[int], list[Allocation]]] = {}
        self._lent: dict[tuple[str, str], list[Allocation]] = {}
        self._fresh: dict[tuple[str, str], list[Allocation]] = {}
        self.fresh: dict[str, Allocation] = {}
        """Run -> its allocation, for the runs this cycle admitted that could still be taken back."""

    def admitted(self, alloc: Allocation) -> None:
        """The cycle admitted `alloc` (not a pipeline's part: its parts start together or not at all)."""
        cache = self.cache
        if alloc.request.part is not None or cache.config.max_preemptions == 0:
            return
        if alloc.run in cache.preempted_at and cache.protected(alloc.run, self.now):
            return
        self._fresh.setdefault((alloc.queue, alloc.pool), []).append(alloc)
        self.fresh[alloc.run] = alloc

    def taken_back(self, alloc: Allocation) -> None:
        """The cycle took `alloc` back: no longer a candidate."""
        self._fresh[(alloc.queue, alloc.pool)].remove(alloc)
        del self.fresh[alloc.run]

    def candidates(self, req: Request, pool: str, lenders: list[str]) -> tuple[list[Allocation], Set[str]]:
        """Victims for `req` on `pool`, lowest priority first, then least work lost since a checkpoint, and the
        runs among them that are reclaimed (the others are `req`'s queue's own lower classes)."""
        ranks, own = self._of(req.queue, pool)
        cut = bisect_left(ranks, -req.rank)  # minus ranks ascending: lower classes come first
        fresh = self._fresh_own(req, pool) if self.fresh else []
        if not lenders:
            mine = [a for a in own[:cut] if not a.evicting]
            return (self._merged(fresh, _keyed(mine, self.now)) if fresh else mine), _NONE
        lent = [a for m in lenders for a in self._lent_by(m, pool) if not a.evicting]
        if self.fresh:
            fresh += [a for m in lenders for a in self._fresh.get((m, pool), ()) if a.reservation is None]
        if not (lent or fresh):
            return [a for a in own[:cut] if not a.evicting], _NONE
        keyed = _keyed([a for a in own[:cut] if not a.evicting], self.now) + _keyed(lent, self.now)
        merged = self._merged(fresh, keyed)
        return merged, {a.run for a in merged if a.queue != req.queue}

    def lower(self, req: Request, pool: str) -> bool:
        """Whether this cycle admitted a run of a lower class than `req` in its queue on `pool`."""
        return bool(self.fresh) and bool(self._fresh_own(req, pool))

    def _merged(self, fresh: list[Allocation], keyed: list[tuple[_Key, Allocation]]) -> list[Allocation]:
        """`keyed` in victim order with the cycle's own admissions `fresh` among them: within a class, before any
        started run (they lose no work), the last admitted first."""
        order = {run: i for i, run in enumerate(self.fresh)}
        keyed += [((-a.request.rank, -1.0, -order[a.run], a.run), a) for a in fresh]
        keyed.sort()
        return [a for _, a in keyed]

    def _fresh_own(self, req: Request, pool: str) -> list[Allocation]:
        rank = req.rank
        return [a for a in self._fresh.get((req.queue, pool), ()) if a.request.rank > rank]

    def _lent_by(self, queue: str, pool: str) -> list[Allocation]:
        found = self._lent.get((queue, pool))
        if found is None:
            found = self._lent[(queue, pool)] = [a for a in self._of(queue, pool)[1] if a.reservation is None]
        return found

    def _of(self, queue: str, pool: str) -> tuple[list[int], list[Allocation]]:
        found = self._sorted.get((queue, pool))
        if found is None:
            cache, now = self.cache, self.now
            history = cache.preempted_at  # only runs preempted before can be protected, unless all are
            allocs = (
                []
                if cache.config.max_preemptions == 0
                else [
                    a
                    for a in cache.by_queue.get((queue, pool), {}).values()
                    if not (a.run in history and cache.protected(a.run, now))
                ]
            )
            ordered = [a for _, a in sorted(_keyed(allocs, self.now))]
            found = self._sorted[(queue, pool)] = ([-a.request.rank for a in ordered], ordered)
        return found


_NONE: frozenset[str] = frozenset()


def _keyed(allocs: Iterable[Allocation], now: float) -> list[tuple[_Key, Allocation]]:
    """Each allocation with its victim key (`Allocation.lost_work_s` written out: every candidate is keyed)."""
    keyed = []
    for a in allocs:
        started = a.started_at
        since = a.checkpointed_at or started
        lost = now - (since if since > started else started)
        keyed.append(((-a.request.rank, 0.0 if lost < 0.0 else lost, -started, a.run), a))
    return keyed
