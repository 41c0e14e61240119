"""What is true now: hosts of every pool, quota usage, allocations, reservations, decayed usage, history.

Updated incrementally by the scheduler's event methods; a cycle reads it through a Snapshot and commits
its admissions back. Never imports the scheduler.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from crossrail.errors import PlacementError
from crossrail.scheduling.fairness import DecayedUsage
from crossrail.scheduling.pool import NO_PINS, PoolState
from crossrail.scheduling.quota import QuotaBook, Usage
from crossrail.scheduling.reservation import Hold, choose_hosts, classes_for
from crossrail.scheduling.types import Allocation, Request, SchedulerConfig
from crossrail.spec import Fleet

RANKS = 5
"""Priority ranks counted per (queue, pool): the four classes and one for unknown names."""


def rank_slot(rank: int) -> int:
    return min(rank, RANKS - 1)


class Cache:
    def __init__(self, fleet: Fleet, config: SchedulerConfig) -> None:
        self.config = config
        self.pools = {p.name: PoolState(p) for p in fleet.spec.pools}
        self.quota = QuotaBook(fleet.spec.queues)
        self.used: Usage = {}
        self.excess: Usage = {}
        self.allocs: dict[str, Allocation] = {}
        self.by_pool: dict[str, dict[str, Allocation]] = {name: {} for name in self.pools}
        self.ranks: dict[tuple[str, str], list[int]] = {}
        self.elastic: dict[str, set[str]] = {name: set() for name in self.pools}
        self.by_queue: dict[tuple[str, str], dict[str, Allocation]] = {}
        """(queue, pool) -> the queue's allocations there: where preemption looks for victims."""
        self.holds: dict[str, Hold] = {}
        self.usage = DecayedUsage(config.half_life_s)
        self.preempted_at: dict[str, list[float]] = {}
        self.version = 0
        """Bumped by changes that may let a blocked run fit anywhere (quotas, policy, a time threshold)."""
        self.pool_version = dict.fromkeys(self.pools, 0)
        """Bumped by changes that may let a blocked run fit on that pool (chips freed, new victims)."""
        self._timers: list[float] = []

    def changed(self, pool: str | None = None) -> None:
        if pool is None:
            self.version += 1
        else:
            self.pool_version[pool] = self.pool_version.get(pool, 0) + 1

    def at(self, when: float) -> None:
        """Bump the version when `when` comes: a time at which a rule changes (a protection lapses, ...)."""
        heapq.heappush(self._timers, when)

    def tick(self, now: float) -> None:
        while self._timers and self._timers[0] <= now:
            heapq.heappop(self._timers)
            self.version += 1

    def by_cost(self) -> list[PoolState]:
        return sorted((p for p in self.pools.values() if not p.retired), key=lambda p: p.cost_key)

    # --- allocations ---------------------------------------------------------------------------

    def index(self, alloc: Allocation, at: float) -> None:
        """Record an allocation whose chips and quota the pools and usage already show (a committed cycle)."""
        self.allocs[alloc.run] = alloc
        self.by_pool[alloc.pool][alloc.run] = alloc
        self.by_queue.setdefault((alloc.queue, alloc.pool), {})[alloc.run] = alloc
        self.ranks.setdefault((alloc.queue, alloc.pool), [0] * RANKS)[rank_slot(alloc.request.rank)] += 1
        if alloc.request.high > alloc.request.low:
            self.elastic[alloc.pool].add(alloc.run)
        if self.quota.borrowed(self.used, alloc.queue, alloc.pool):
            self.changed(alloc.pool)  # a new candidate for reclaim
        self.usage.change(alloc.request.tenant, alloc.pool, alloc.chips, at)

    def charge(self, alloc: Allocation, sign: int) -> None:
        """Take (sign 1) or give back (sign -1) the allocation's host chips and quota."""
        pool = self.pools[alloc.pool]
        if sign > 0:
            pool.take(alloc.hosts)
        else:
            pool.release(alloc.hosts)
        if alloc.reservation is None:
            self.quota.charge(self.used, self.excess, alloc.queue, alloc.pool, sign * alloc.chips)

    def place(self, req: Request, pool_name: str, chips: int, at: float) -> Allocation:
        """Chips for a run that already holds them (a rebuild, or work the scheduler did not admit)."""
        pool = self.pools.get(pool_name)
        if pool is None:
            known = ", ".join(self.pools)
            raise PlacementError(f"{req.run} runs on pool {pool_name!r}, which the fleet lacks; pools are {known}")
        classes, _ = classes_for(pool, self.holds, req, at, self.config.grace_s)
        for pins, inside in classes:
            hosts = pool.find(chips, pins, req.unit)
            if hosts is not None:
                alloc = Allocation(req, pool_name, chips, hosts, at, reservation=inside)
                self.charge(alloc, 1)
                break
        else:
            hosts, overflow = pool.place_anyhow(chips)
            alloc = Allocation(req, pool_name, chips, hosts, at, overflow=overflow)
            if alloc.reservation is None:
                self.quota.charge(self.used, self.excess, req.queue, pool_name, chips)
        self.index(alloc, at)
        self.changed(pool_name)
        for hold in self.holds.values():
            if hold.pool == pool_name and set(hold.hosts) & {h for h, _ in alloc.hosts}:
                hold.claimed = False
        return alloc

    def remove(self, run: str, at: float) -> Allocation | None:
        alloc = self.allocs.pop(run, None)
        if alloc is None:
            return None
        del self.by_pool[alloc.pool][run]
        del self.by_queue[(alloc.queue, alloc.pool)][run]
        self.ranks[(alloc.queue, alloc.pool)][rank_slot(alloc.request.rank)] -= 1
        self.elastic[alloc.pool].discard(run)
        self.charge(alloc, -1)
        self.pools[alloc.pool].overflow -= alloc.overflow
        self.pools[alloc.pool].settle(alloc.hosts)
        self.usage.change(alloc.request.tenant, alloc.pool, -alloc.chips, at)
        self.changed(alloc.pool)
        return alloc

    def retag(self, alloc: Allocation, reservation: str | None) -> None:
        """Move an allocation into or out of a reservation: chips in one do not count against quota."""
        if alloc.reservation is None:
            self.quota.charge(self.used, self.excess, alloc.queue, alloc.pool, -alloc.chips)
        alloc.reservation = reservation
        if reservation is None:
            self.quota.charge(self.used, self.excess, alloc.queue, alloc.pool, alloc.chips)
        self.changed(alloc.pool)

    def has_lower(self, queue: str, pool: str, rank: int) -> bool:
        """Whether `queue` runs anything on `pool` of a lower priority than `rank`."""
        counts = self.ranks.get((queue, pool))
        return counts is not None and any(counts[rank_slot(rank) + 1 :])

    # --- preemption history --------------------------------------------------------------------

    def protected(self, run: str, now: float) -> bool:
        """Preempted `max_preemptions` times within the window: not chosen again until the window moves on."""
        times = self.preempted_at.get(run)
        if not times:
            return self.config.max_preemptions == 0
        since = now - self.config.preemption_window_s
        return sum(1 for t in times if t > since) >= self.config.max_preemptions

    def preempting(self, alloc: Allocation, now: float, *, counted: bool = True) -> None:
        """`alloc` is being stopped; `counted=False` (a round boundary of a time-sliced pool) spares its bound."""
        alloc.evicting = True
        if not counted:
            return
        times = self.preempted_at.setdefault(alloc.run, [])
        times.append(now)
        self.at(now + self.config.preemption_window_s)
        del times[: -max(self.config.max_preemptions, 1)]

    # --- reservations --------------------------------------------------------------------------

    def hold(self, hold: Hold) -> None:
        """Pin whole hosts for `hold`; PlacementError when the pool cannot spare them."""
        pool = self.pools.get(hold.pool)
        if pool is None:
            raise PlacementError(f"reservation {hold.name}: no pool {hold.pool!r}; pools are {', '.join(self.pools)}")
        if hold.chips % pool.per_host:
            raise PlacementError(
                f"reservation {hold.name}: {hold.chips} chips are not whole hosts of {pool.per_host}; "
                f"reserve a multiple of {pool.per_host}"
            )
        hosts = choose_hosts(pool, hold, self.holds.values(), self.by_pool[hold.pool].values(), self.config.grace_s)
        if len(hosts) * pool.per_host < hold.chips:
            spare = len(hosts) * pool.per_host
            raise PlacementError(
                f"reservation {hold.name}: {hold.pool} can spare {spare} chips from then on "
                f"(other reservations overlap); ask for at most {spare} or move it"
            )
        self.holds[hold.name] = hold
        self._pin(hold, hosts)

    def _pin(self, hold: Hold, hosts: list[int]) -> None:
        pool = self.pools[hold.pool]
        for h in set(hold.hosts) - set(hosts):
            pool.set_pins(h, pool.pins[h] - {hold.name})
        for h in set(hosts) - set(hold.hosts):
            pool.set_pins(h, pool.pins[h] | {hold.name})
        hold.hosts = sorted(hosts)
        hold.claimed = False
        self.changed(hold.pool)
        for when in (hold.start - self.config.grace_s, hold.start, hold.end):
            self.at(when)

    def release_hold(self, name: str) -> Hold | None:
        """Unpin a reservation; its runs count against their queues' quota from now on."""
        hold = self.holds.pop(name, None)
        if hold is None:
            return None
        self._pin(hold, [])
        for alloc in self.by_pool[hold.pool].values():
            if alloc.reservation == name:
                self.retag(alloc, None)
        return hold

    def repin(self, pool_name: str) -> None:
        """After hosts left the pool, pin replacements for the reservations that held them, where there are any."""
        pool = self.pools[pool_name]
        for hold in self.holds.values():
            if hold.pool == pool_name:
                gone = [h for h in hold.hosts if pool.state[h] != 0]
                for h in gone:
                    pool.set_pins(h, NO_PINS)
                hold.hosts = [h for h in hold.hosts if h not in gone]
                if gone:
                    allocs = self.by_pool[pool_name].values()
                    self._pin(hold, choose_hosts(pool, hold, self.holds.values(), allocs, self.config.grace_s))

    def on_hosts(self, pool_name: str, hosts: set[int]) -> Iterator[Allocation]:
        for alloc in self.by_pool[pool_name].values():
            if any(h in hosts for h, _ in alloc.hosts):
                yield alloc
