"""Hypothesis strategies for random fleets and workloads, and the invariants every cycle must keep."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from crossrail.core import parse_topology
from crossrail.scheduling import CycleResult, Request, Scheduler
from crossrail.scheduling.pool import ACTIVE
from crossrail.spec import Fleet

from .builders import T0, fleet

TOPOLOGIES = ["1x1", "1x2", "2x2", "2x2x1", "2x4", "2x2x2", "2x2x4", "4x4", "4x4x2"]
PRIORITIES = ["low", "normal", "high", "critical"]


@st.composite
def pools(draw: st.DrawFn, index: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(["tpu", "gpu"]))
    per_host = draw(st.sampled_from([1, 2, 4, 8]))
    chips = per_host * draw(st.integers(1, 6))
    pool: dict[str, Any] = {
        "name": f"p{index}",
        "accelerator": kind,
        "chip_type": kind,
        "chips": chips,
        "chips_per_host": per_host,
        "cost_per_chip_hour": float(draw(st.integers(0, 4))),
    }
    if kind == "tpu":
        fitting = [t for t in TOPOLOGIES if math.prod(parse_topology(t)) <= chips]
        pool["topologies"] = draw(st.lists(st.sampled_from(fitting), min_size=1, max_size=4, unique=True))
    return pool


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    pool_list = [draw(pools(i)) for i in range(draw(st.integers(1, 3)))]
    names = [p["name"] for p in pool_list]
    queues = []
    for i in range(draw(st.integers(1, 4))):
        cohort = draw(st.sampled_from([None, "c0", "c1"]))
        q: dict[str, Any] = {
            "name": f"q{i}",
            "stage": "experiment",
            "team": f"q{i}",
            "quota": {n: draw(st.integers(0, 24)) for n in names if draw(st.booleans())},
            "cohort": cohort,
            "queueing": draw(st.sampled_from(["strict_fifo", "best_effort_fifo"])),
        }
        if cohort is not None:
            q["borrowing_limit"] = {n: draw(st.integers(0, 8)) for n in names if draw(st.booleans())}
            q["lending_limit"] = {n: draw(st.integers(0, 8)) for n in names if draw(st.booleans())}
        queues.append(q)
    return fleet(pool_list, queues)


@st.composite
def requests(
    draw: st.DrawFn, fleet: Fleet, run: str, queued_at: float, sizes: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)
) -> Request:
    chips = draw(st.sampled_from(sizes))
    elastic = draw(st.booleans())
    return Request(
        run=run,
        queue=draw(st.sampled_from([q.name for q in fleet.queues])),
        chips=chips,
        min_chips=draw(st.integers(1, chips)) if elastic else None,
        max_chips=draw(st.integers(chips, 24)) if elastic else None,
        priority=draw(st.sampled_from(PRIORITIES)),
        queued_at=queued_at,
        team=draw(st.sampled_from(["t0", "t1", "t2"])),
        duration_s=float(draw(st.sampled_from([60, 600, 3600]))),
        prefer=draw(st.sampled_from(["any", "tpu", "gpu"])),
    )


def check_invariants(sched: Scheduler, fleet: Fleet) -> None:
    """Chips per host, gangs, slice shapes and quotas, recomputed from the allocations themselves."""
    cache = sched.cache
    for pool in cache.pools.values():
        free = [pool.per_host] * len(pool.free)
        for alloc in cache.by_pool[pool.name].values():
            assert sum(c for _, c in alloc.hosts) == alloc.chips, alloc
            assert alloc.overflow == 0
            for h, c in alloc.hosts:
                free[h] -= c
        assert free == pool.free
        assert all(0 <= f <= pool.per_host for f in free)
        assert sum(pool.free[h] for h, s in enumerate(pool.state) if s == ACTIVE) == pool.free_chips
        for alloc in cache.by_pool[pool.name].values():
            check_shape(alloc.chips, alloc.hosts, pool.per_host, pool.shapes)
    used: dict[tuple[str, str], int] = {}
    for alloc in cache.allocs.values():
        if alloc.reservation is None:
            used[(alloc.queue, alloc.pool)] = used.get((alloc.queue, alloc.pool), 0) + alloc.chips
    assert {k: v for k, v in cache.used.items() if v} == used
    check_quota(sched, fleet, used)


def check_shape(chips: int, hosts: Any, per_host: int, shapes: list[int] | None) -> None:
    if chips <= per_host:
        assert len(hosts) == 1
    else:
        assert chips % per_host == 0
        assert len({h for h, _ in hosts}) == len(hosts) == chips // per_host
        assert all(c == per_host for _, c in hosts)
    assert shapes is None or chips in shapes


def check_quota(sched: Scheduler, fleet: Fleet, used: dict[tuple[str, str], int]) -> None:
    book = sched.cache.quota
    excess: dict[tuple[str, str], int] = {}
    for q in fleet.queues:
        for pool in fleet.pool_names:
            have, nominal = used.get((q.name, pool), 0), q.quota.get(pool, 0)
            if q.cohort is None:
                assert have <= nominal, (q.name, pool, have)
                continue
            limit = q.borrowing_limit.get(pool)
            assert limit is None or have <= nominal + limit, (q.name, pool, have)
            key = (q.cohort, pool)
            excess[key] = excess.get(key, 0) + book.excess(q.name, pool, have)
    for (cohort, pool), total in excess.items():
        assert total <= book.lendable(cohort, pool), (cohort, pool, total)


def check_admissions(result: CycleResult, asked: dict[str, Request], sched: Scheduler) -> None:
    """Every admission is one whole gang of an allowed size, on active hosts of an undrained pool."""
    for a in result.admitted:
        req = asked[a.run]
        assert req.low <= a.chips <= req.high
        if req.min_chips is None and req.max_chips is None:
            assert a.chips == req.chips
        pool = sched.cache.pools[a.pool]
        check_shape(a.chips, a.hosts, pool.per_host, pool.shapes)
        assert not pool.drained
        assert all(pool.state[h] == ACTIVE for h, _ in a.hosts)
        assert a.reason


def at(minutes: float) -> float:
    return T0 + 60 * minutes
