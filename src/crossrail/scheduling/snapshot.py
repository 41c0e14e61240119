"""The cycle's snapshot: a copy of the cache that the cycle may change, and restore to a mark.

Pools are copied when the cycle first changes them and quota usage is copied whole (queues x pools
entries), so taking a snapshot costs O(queues x pools) and never O(pending). Trial preemptions release
victims on the copy and `restore` puts them back; `commit` hands the copies to the cache.

A restored pool holds the same chips but not always the same order within its free-chip buckets (sets), and
that order is which host `PoolState.find` picks first. So the cycle's decisions depend on the exact sequence
of takes and releases, trials included: a faster cycle makes each change cheaper, never skips or reorders one.
"""

from __future__ import annotations

from itertools import repeat
from operator import truediv

from crossrail.scheduling.cache import Cache
from crossrail.scheduling.pool import PoolState
from crossrail.scheduling.types import Allocation


class Snapshot:
    def __init__(self, cache: Cache, now: float) -> None:
        self.cache = cache
        self.now = now
        self.quota = cache.quota
        self._charge = cache.quota.charge
        self.holds = cache.holds
        self.used = dict(cache.used)
        self.excess = dict(cache.excess)
        self._pools: dict[str, PoolState] = {}
        self._view = dict(cache.pools)
        """Every pool as this snapshot sees it: the cache's, or this snapshot's copy once it changed one."""
        self._held: dict[str, dict[str, float]] = {}
        self._caps = {name: max(pool.capacity, 1) for name, pool in cache.pools.items()}
        self._shares: dict[str, float] = {}
        self._journal: list[tuple[int, Allocation, bool]] = []
        self._trials = 0

    def pool(self, name: str) -> PoolState:
        return self._view[name]

    def _writable(self, name: str) -> PoolState:
        pool = self._pools.get(name)
        if pool is None:
            pool = self._pools[name] = self._view[name] = self.cache.pools[name].copy()
        return pool

    def headroom(self, queue: str, pool: str) -> int:
        return self.quota.headroom(self.used, self.excess, queue, pool)

    def borrowed(self, queue: str, pool: str) -> int:
        return self.quota.borrowed(self.used, queue, pool)

    def share(self, tenant: str) -> float:
        """The tenant's dominant share, counting what this cycle admitted so far."""
        share = self._shares.get(tenant)
        if share is None:  # the largest chips / capacity over the pools it used, without a list between
            held = self._held_by(tenant)
            share = max(map(truediv, held.values(), map(self._caps.get, held, repeat(1))), default=0.0)
            self._shares[tenant] = share
        return share

    def _held_by(self, tenant: str) -> dict[str, float]:
        held = self._held.get(tenant)
        if held is None:
            held = self._held[tenant] = self.cache.usage.held(tenant, self.now)
        return held

    def _capacity(self, pool: str) -> int:
        return self._caps.get(pool, 1)

    # --- changes -------------------------------------------------------------------------------

    def take(self, alloc: Allocation) -> None:
        self._apply(alloc, 1, self._trials == 0)

    def release(self, alloc: Allocation) -> None:
        self._apply(alloc, -1, self._trials == 0)

    def _apply(self, alloc: Allocation, sign: int, shares: bool, undo: bool = False) -> None:
        name = alloc.pool
        (self._pools.get(name) or self._writable(name)).move(alloc.hosts, -sign)
        if alloc.reservation is None:
            self._charge(self.used, self.excess, alloc.queue, name, sign * alloc.chips)
        if not undo:
            self._journal.append((sign, alloc, shares))
        if shares:  # trials never read shares, and restore everything they change
            self._share_moved(alloc, sign)

    def _share_moved(self, alloc: Allocation, sign: int) -> None:
        tenant = alloc.request.tenant
        held = self._held_by(tenant)
        held[alloc.pool] = chips = held.get(alloc.pool, 0.0) + sign * alloc.chips
        share = self._shares.get(tenant)
        if sign > 0 and share is not None:
            self._shares[tenant] = max(share, chips / self._capacity(alloc.pool))
        else:
            self._shares.pop(tenant, None)

    def mark(self) -> int:
        """Start a trial; `restore(mark)` ends it and undoes every change made since."""
        self._trials += 1
        return len(self._journal)

    def keep(self) -> None:
        """End the current trial and keep its changes."""
        self._trials -= 1

    def restore(self, mark: int) -> None:
        journal = self._journal
        for sign, alloc, shares in reversed(journal[mark:]):
            self._apply(alloc, -sign, shares, undo=True)
        del journal[mark:]
        self._trials -= 1

    def commit(self) -> None:
        """The cache takes this snapshot's pools and usage (the cycle indexes its new allocations itself)."""
        self.cache.pools.update(self._pools)
        self.cache.used = self.used
        self.cache.excess = self.excess
