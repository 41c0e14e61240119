"""The victim search against a brute-force reading of its rule, on random small fleets.

The search keeps each (queue, pool)'s candidates sorted once per cycle and filters them per ask; the
reference below lists, keys and sorts every candidate afresh for each ask, tries every single victim and
every pruning by a full fit. Both must choose the same victims, of the same kind, in the same order.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from crossrail.scheduling import Request, Scheduler
from crossrail.scheduling.admission import fit
from crossrail.scheduling.cache import Cache
from crossrail.scheduling.preemption import Candidates, _Hosts, could_reclaim, victims
from crossrail.scheduling.snapshot import Snapshot
from crossrail.scheduling.types import Allocation

from .builders import HOUR, T0, gpu, queue, req, scheduler, tpu

QUEUES = ("a", "b", "c")
PRIORITIES = ("low", "normal", "high", "critical")


def _random_scheduler(rng: random.Random) -> Scheduler:
    """Two pools 3/4 to full of running work of three queues in a cohort, some of it borrowed, checkpointed,
    already stopping or preempted before."""
    pools = [gpu("gpu", chips=32, per_host=rng.choice((4, 8))), tpu("tpu", chips=32, per_host=4)]
    quota = {"gpu": 8, "tpu": 8}
    sched = scheduler(
        pools, [queue(q, quota, cohort="lab") for q in QUEUES], max_preemptions=rng.choice((1, 2)), grace_s=300.0
    )
    k = 0
    for pool, per_host in (("gpu", pools[0]["chips_per_host"]), ("tpu", 4)):
        for _ in range(rng.randrange(5, 12)):
            chips = rng.choice((1, 2, per_host, 2 * per_host))
            run = f"r{k}"
            k += 1
            request = req(run, rng.choice(QUEUES), chips, priority=rng.choice(PRIORITIES), queued_at=T0 - 2 * HOUR)
            if sched.cache.pools[pool].free_chips < chips:
                continue
            sched.started(request, pool, chips, T0 - rng.uniform(60, 2 * HOUR))
            if rng.random() < 0.4:
                sched.checkpointed(run, T0 - rng.uniform(0, 60))
            if rng.random() < 0.15:
                sched.cache.preempting(sched.cache.allocs[run], T0 - rng.uniform(0, HOUR))
                if rng.random() < 0.5:
                    sched.cache.allocs[run].evicting = False  # preempted before, running again: maybe protected
    return sched


def _reference(snap: Snapshot, cache: Cache, head: Request, pool: str, grace_s: float) -> list[tuple[str, str]] | None:
    """The rule of preemption.py, read literally: list, key and sort every candidate; try every fit."""
    now = snap.now

    def protected(a: Allocation) -> bool:
        return a.evicting or cache.protected(a.run, now)

    kinds: dict[str, str] = {}
    for a in cache.by_pool[pool].values():
        if protected(a):
            continue
        if a.queue == head.queue and a.request.rank > head.rank:
            kinds[a.run] = "priority"
    cohort = snap.quota.cohort_of(head.queue)
    within = snap.used.get((head.queue, pool), 0) + head.low <= snap.quota.nominal(head.queue, pool)
    if cohort is not None and within:
        for a in cache.by_pool[pool].values():
            lender = a.queue != head.queue and snap.quota.cohort_of(a.queue) == cohort
            if lender and snap.borrowed(a.queue, pool) > 0 and a.reservation is None and not protected(a):
                kinds[a.run] = "reclaim"
    order = sorted(
        (cache.allocs[run] for run in kinds),
        key=lambda a: (-a.request.rank, a.lost_work_s(now), -a.started_at, a.run),
    )

    def fits() -> bool:
        return fit(snap, head, snap.pool(pool), grace_s) is not None

    def trial(chosen: list[Allocation]) -> bool:
        mark = snap.mark()
        for a in chosen:
            snap.release(a)
        ok = fits()
        snap.restore(mark)
        return ok

    if not order or not snap.pool(pool).sizes_of(head.low, head.high, head.unit):
        return None  # no candidate, or no gang of the head's size ever fits the pool
    for a in order:
        if trial([a]):
            return [(a.run, kinds[a.run])]
    chosen = _prefix(snap, head, pool, order, kinds, fits)
    if chosen is None:
        return None
    for a in sorted(chosen[:-1], key=lambda a: -a.lost_work_s(now)):
        rest = [c for c in chosen if c is not a]
        if trial(rest):
            chosen = rest
    return [(a.run, kinds[a.run]) for a in chosen]


def _prefix(
    snap: Snapshot, head: Request, pool: str, order: list[Allocation], kinds: dict[str, str], fits: Callable[[], bool]
) -> list[Allocation] | None:
    """The shortest prefix of `order` after which the head fits, skipping a lender's run once its queue no
    longer borrows. As in the search, the prefix's runs are released on the snapshot only where the hosts
    could hold the gang. A lender's borrowing is what its queue used when the search began, less the chips
    of its runs already chosen, less its nominal quota: each chosen run counts once, whether or not it is
    released on the snapshot yet."""
    hosts = _Hosts.of(snap.pool(pool), head.unit)
    gang = snap.pool(pool).sizes_of(head.low, head.high, head.unit)[-1]
    used = dict(snap.used)  # before any victim is released
    chosen: list[Allocation] = []
    freed: dict[int, int] = {}
    applied = 0
    mark = snap.mark()
    try:
        for a in order:
            left = used.get((a.queue, pool), 0) - sum(c.chips for c in chosen if c.queue == a.queue)
            if kinds[a.run] == "reclaim" and left - snap.quota.nominal(a.queue, pool) <= 0:
                continue
            chosen.append(a)
            for h, c in a.hosts:
                freed[h] = freed.get(h, 0) + c
            if hosts.room(gang, freed):
                for c in chosen[applied:]:
                    snap.release(c)
                applied = len(chosen)
                if fits():
                    return chosen
        return None
    finally:
        snap.restore(mark)


@pytest.mark.parametrize("seed", range(40), ids=lambda s: f"random-fleet-{s}")
def test_the_victim_search_chooses_what_a_brute_force_search_chooses(seed: int) -> None:
    rng = random.Random(seed)
    sched = _random_scheduler(rng)
    cache, grace = sched.cache, sched.config.grace_s
    snap = Snapshot(cache, T0)
    book = Candidates(cache, T0)  # one book for every ask, as in a cycle
    for i in range(12):
        pool = rng.choice(("gpu", "tpu"))
        chips = rng.choice((1, 2, 4, 8, 16))
        head = req(f"head-{i}", rng.choice(QUEUES), chips, priority=rng.choice(PRIORITIES[1:]))
        expected = _reference(snap, cache, head, pool, grace)

        def fits(head: Request = head, pool: str = pool) -> bool:
            return fit(snap, head, snap.pool(pool), grace) is not None

        chosen = victims(snap, book, head, snap.pool(pool), fits, lenders=could_reclaim(snap, head, pool))
        got = None if chosen is None else [(v.alloc.run, v.kind) for v in chosen]
        if fits():
            continue  # the cycle would admit it without preempting; the search is not asked then
        assert got == expected, f"{head} on {pool}"


def test_a_lender_reclaims_a_second_run_of_a_queue_that_still_borrows() -> None:
    # Queue b's nominal quota is 4 chips and it runs three 4-chip runs: it borrows 8 of a's chips. a's 8-chip
    # head fits the pool's free chips but not the cohort's quota (12 lendable, all drawn by b). Reclaiming b-1
    # leaves b borrowing 4 and a room for 4 only, so a needs b-2 as well. The search used to subtract b-1's
    # chips twice (released on the snapshot, and again from its own tally), saw b borrowing nothing after
    # b-1 and preempted nobody.
    queues = [queue("a", {"gpu": 8}, cohort="lab"), queue("b", {"gpu": 4}, cohort="lab")]
    sched = scheduler([gpu(chips=32, per_host=4)], queues)
    for i, started in enumerate((T0 + 30, T0 + 20, T0 + 10), start=1):  # b-1 loses least work, then b-2
        sched.started(req(f"b-{i}", "b", 4, queued_at=T0 + i), "gpu", 4, started)
    sched.submitted(req("a-1", "a", 8, queued_at=T0 + 40))

    result = sched.cycle(T0 + 60)

    assert [(p.run, p.for_run) for p in result.preempted] == [("b-1", "a-1"), ("b-2", "a-1")]
    assert all(p.reason.startswith("reclaimed for a-1: queue b borrows gpu chips") for p in result.preempted)
    assert result.blocked["a-1"].startswith("preempting b-1, b-2 to make room")
