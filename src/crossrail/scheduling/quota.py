"""Nominal quotas per queue and pool, and cohorts whose queues borrow each other's idle quota.

For a queue q in a cohort, on one pool: nominal N, lending limit L (absent: all of N may be lent) and
borrowing limit B (absent: unlimited). G = N - min(N, L) is guaranteed to q alone; the cohort shares the
lendable rest, sum of min(N, L). Each member's excess E = max(0, used - G) draws on that shared part, so
the cohort stays within it while sum(E) <= sum(min(N, L)). A queue may take n more chips when

    n <= max(0, G - used) + (lendable - sum(E))        and, with B set,   used + n <= N + B.

Without a cohort a queue has its nominal quota only. A queue the fleet does not list has no quota limit
(only the pools' chips bound it), as in scheduling v0.
"""

from __future__ import annotations

from dataclasses import dataclass

from crossrail.spec import Queue

UNLIMITED = 1 << 40

Usage = dict[tuple[str, str], int]
"""Chips in use per (queue, pool), or per (cohort, pool) for the cohort's summed excess."""


@dataclass(frozen=True)
class QueueQuota:
    name: str
    cohort: str | None
    nominal: dict[str, int]
    borrowing_limit: dict[str, int]
    lending_limit: dict[str, int]

    def guaranteed(self, pool: str) -> int:
        """The part of the nominal quota no other queue may borrow."""
        nominal = self.nominal.get(pool, 0)
        lend = self.lending_limit.get(pool)
        return 0 if lend is None else nominal - min(nominal, lend)

    def lendable(self, pool: str) -> int:
        return self.nominal.get(pool, 0) - self.guaranteed(pool)


class QuotaBook:
    """The fleet's quotas; usage lives in plain dicts so a cycle's snapshot can copy them."""

    def __init__(self, queues: list[Queue]) -> None:
        self.queues = {
            q.name: QueueQuota(q.name, q.cohort, dict(q.quota), dict(q.borrowing_limit), dict(q.lending_limit))
            for q in queues
        }
        self.members: dict[str, list[str]] = {}
        for q in self.queues.values():
            if q.cohort is not None:
                self.members.setdefault(q.cohort, []).append(q.name)
        self._guaranteed = {(q.name, pool): q.guaranteed(pool) for q in self.queues.values() for pool in q.nominal}
        self._cohort = {q.name: q.cohort for q in self.queues.values() if q.cohort is not None}
        self._shared: dict[tuple[str, str], tuple[tuple[str, str], int]] = {}
        """(queue, pool) -> ((cohort, pool), the queue's guaranteed chips there), for queues in a cohort."""
        self._lendable: dict[tuple[str, str], int] = {}
        for q in self.queues.values():
            if q.cohort is not None:
                for pool in q.nominal:
                    key = (q.cohort, pool)
                    self._lendable[key] = self._lendable.get(key, 0) + q.lendable(pool)
        lent: dict[str, set[str]] = {}
        for (cohort, pool), chips in self._lendable.items():
            if chips > 0:
                lent.setdefault(cohort, set()).add(pool)
        self._reachable = {
            q.name: frozenset({p for p, n in q.nominal.items() if n > 0} | lent.get(q.cohort or "", set()))
            for q in self.queues.values()
        }

    def reachable(self, queue: str) -> frozenset[str] | None:
        """Pools where the queue could ever get quota (its own, or lent in its cohort); None for all pools."""
        return self._reachable.get(queue)

    def cohort_of(self, queue: str) -> str | None:
        q = self.queues.get(queue)
        return q.cohort if q else None

    def nominal(self, queue: str, pool: str) -> int:
        q = self.queues.get(queue)
        return UNLIMITED if q is None else q.nominal.get(pool, 0)

    def lendable(self, cohort: str, pool: str) -> int:
        return self._lendable.get((cohort, pool), 0)

    def excess(self, queue: str, pool: str, used: int) -> int:
        """What `used` chips of `queue` draw on its cohort's lendable quota."""
        return max(0, used - self._guaranteed.get((queue, pool), 0))

    def charge(self, used: Usage, excess: Usage, queue: str, pool: str, chips: int) -> None:
        """Add `chips` (negative to release) to the queue's usage and its cohort's excess."""
        key = (queue, pool)
        before = used.get(key, 0)
        after = used[key] = before + chips
        shared = self._shared.get(key)
        if shared is None and queue in self._cohort:
            shared = self._shared[key] = ((self._cohort[queue], pool), self._guaranteed.get(key, 0))
        if shared is not None:  # a cycle's trials charge thousands of times: written out, without max()
            cohort_key, guaranteed = shared
            drawn = after - guaranteed if after > guaranteed else 0
            drawn -= before - guaranteed if before > guaranteed else 0
            excess[cohort_key] = excess.get(cohort_key, 0) + drawn

    def headroom(self, used: Usage, excess: Usage, queue: str, pool: str) -> int:
        """How many more chips of `pool` the queue may take now."""
        q = self.queues.get(queue)
        if q is None:
            return UNLIMITED
        have = used.get((queue, pool), 0)
        nominal = q.nominal.get(pool, 0)
        if q.cohort is None:
            return nominal - have if nominal > have else 0
        # Called for every fit a cycle tries: comparisons instead of max() and min(), same values.
        cohort_key = (q.cohort, pool)
        shared = self._lendable.get(cohort_key, 0) - excess.get(cohort_key, 0)
        own = self._guaranteed.get((queue, pool), 0) - have
        room = (own if own > 0 else 0) + (shared if shared > 0 else 0)
        limit = q.borrowing_limit.get(pool)
        if limit is not None and nominal + limit - have < room:
            room = nominal + limit - have
        return room if room > 0 else 0

    def borrowed(self, used: Usage, queue: str, pool: str) -> int:
        """Chips the queue uses beyond its nominal quota."""
        q = self.queues.get(queue)
        if q is None:
            return 0
        over = used.get((queue, pool), 0) - q.nominal.get(pool, 0)
        return over if over > 0 else 0

    def describe(self, used: Usage, excess: Usage, queue: str, pool: str, need: int) -> str:
        """Why `need` chips do not fit the queue's quota on `pool`."""
        q = self.queues[queue]
        have, nominal = used.get((queue, pool), 0), q.nominal.get(pool, 0)
        if q.cohort is None:
            return f"queue {queue} uses {have} of its {nominal}-chip quota on {pool}; needs {need} more"
        room = self.headroom(used, excess, queue, pool)
        text = f"queue {queue} uses {have} of its {nominal}-chip quota on {pool}"
        text += f" and may take {room} more in cohort {q.cohort}"
        limit = q.borrowing_limit.get(pool)
        if limit is not None and have + need > nominal + limit:
            text += f" (borrowing limit {limit})"
        return f"{text}; needs {need}"
