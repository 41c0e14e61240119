"""Scheduling v0: per-queue FIFO admission with quotas per pool and a preferred accelerator.

A pure function of a snapshot: the agent builds the snapshot from the store at `now`, the simulator
from its own state. Later scheduling issues replace it behind the same `cycle()` interface.

The cycle, in steps:
  1. take each queue's pending runs in order (priority, then time queued);
  2. snapshot free chips per pool and quota use per queue (the cycle changes only its copy);
  3. for the head of each queue, rank the pools: on a retry, pools other than the one that failed
     first; otherwise the preferred accelerator's pools, and the others only after `fallback_wait_s`;
  4. admit the head on the first pool with room and quota (elastic requests take the largest size that
     fits), update the snapshot and go on with the next run of that queue;
  5. a head that fits nowhere blocks its queue (strict FIFO) until the next cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from crossrail.scheduling.feasibility import allocatable_sizes
from crossrail.spec import Fleet, Pool, Queue

PRIORITY_RANK = {"critical": 0, "high": 1, "normal": 2, "low": 3}


@dataclass(frozen=True)
class Pending:
    run: str
    queue: str
    priority: str
    queued_at: float
    chips: int
    min_chips: int | None = None
    max_chips: int | None = None
    allow: tuple[str, ...] | None = None
    prefer: str = "any"
    avoid_pool: str | None = None
    prefer_source: str = ""


@dataclass(frozen=True)
class Decision:
    run: str
    pool: str
    chips: int
    reason: str


@dataclass
class Snapshot:
    """Chips in use per pool and per (queue, pool); the cycle mutates its own copy."""

    pool_used: dict[str, int] = field(default_factory=dict)
    queue_used: dict[tuple[str, str], int] = field(default_factory=dict)

    def take(self, queue: str, pool: str, chips: int) -> None:
        self.pool_used[pool] = self.pool_used.get(pool, 0) + chips
        self.queue_used[(queue, pool)] = self.queue_used.get((queue, pool), 0) + chips


def cycle(
    pending: Sequence[Pending], fleet: Fleet, usage: Snapshot, now: float, fallback_wait_s: float
) -> list[Decision]:
    snap = Snapshot(dict(usage.pool_used), dict(usage.queue_used))
    queues: dict[str, list[Pending]] = {}
    for p in sorted(pending, key=lambda p: (PRIORITY_RANK.get(p.priority, 9), p.queued_at, p.run)):
        queues.setdefault(p.queue, []).append(p)
    decisions = []
    for queue_name, runs in queues.items():
        queue = next((q for q in fleet.spec.queues if q.name == queue_name), None)
        for p in runs:
            decision = _place(p, queue, fleet, snap, now=now, fallback_wait_s=fallback_wait_s)
            if decision is None:
                break
            snap.take(queue_name, decision.pool, decision.chips)
            decisions.append(decision)
    return decisions


def _place(
    p: Pending, queue: Queue | None, fleet: Fleet, snap: Snapshot, *, now: float, fallback_wait_s: float
) -> Decision | None:
    for pool, why in _ranked(p, fleet, now, fallback_wait_s):
        room = pool.chips - snap.pool_used.get(pool.name, 0)
        quota = _quota_left(p.queue, queue, fleet, pool.name, snap)
        high = min(room, quota, max(p.max_chips or p.chips, p.chips))
        low = p.min_chips or p.chips
        sizes = allocatable_sizes(pool, low, high) if high >= low else []
        if sizes:
            chips = max(sizes)
            return Decision(p.run, pool.name, chips, f"{why}; {pool.name} had {room} free chips, took {chips}")
    return None


def _ranked(p: Pending, fleet: Fleet, now: float, fallback_wait_s: float) -> list[tuple[Pool, str]]:
    allowed = [pool for pool in fleet.spec.pools if p.allow is None or str(pool.accelerator) in p.allow]
    if p.avoid_pool is not None:
        away = [pool for pool in allowed if pool.name != p.avoid_pool]
        back = [pool for pool in allowed if pool.name == p.avoid_pool]
        why = f"retry moved off {p.avoid_pool}, where the previous attempt ended"
        return [(pool, why) for pool in _by_cost(away)] + [(pool, "retry on the same pool") for pool in back]
    if p.prefer in ("any", "mixed"):
        return [
            (pool, f"no accelerator preference ({p.prefer}); cheapest pool with room") for pool in _by_cost(allowed)
        ]
    preferred = [pool for pool in allowed if str(pool.accelerator) == p.prefer]
    out = [(pool, f"{p.prefer} preferred{p.prefer_source}") for pool in _by_cost(preferred)]
    waited = now - p.queued_at
    if waited >= fallback_wait_s or not preferred:
        reason = (
            f"fell back after waiting {waited:.0f}s for a {p.prefer} pool"
            if preferred
            else f"no {p.prefer} pool is allowed for this run"
        )
        out += [(pool, reason) for pool in _by_cost([q for q in allowed if q not in preferred])]
    return out


def _by_cost(pools: list[Pool]) -> list[Pool]:
    return sorted(pools, key=lambda pool: (pool.cost_per_chip_hour / max(pool.relative_speed, 1e-9), pool.name))


def _quota_left(name: str, queue: Queue | None, fleet: Fleet, pool: str, snap: Snapshot) -> int:
    """Own nominal quota left; in a cohort, what the cohort's quotas together leave (borrowing, no reclaim yet)."""
    if queue is None:
        return 1 << 30
    if not queue.cohort:
        return max(queue.quota.get(pool, 0) - snap.queue_used.get((name, pool), 0), 0)
    members = [q for q in fleet.spec.queues if q.cohort == queue.cohort]
    total = sum(q.quota.get(pool, 0) for q in members)
    return max(total - sum(snap.queue_used.get((q.name, pool), 0) for q in members), 0)


def usage_from(active: Sequence[tuple[str, str, int]]) -> Snapshot:
    """A snapshot from (queue, pool, chips) of every active attempt."""
    snap = Snapshot()
    for queue, pool, chips in active:
        snap.take(queue, pool, chips)
    return snap
