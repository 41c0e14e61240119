"""Round-based policies, live and simulated: time slicing on the pools the fleet marks `time_sliced`.

At each round boundary (every `scheduling.round`, on whole multiples of it), in numbered steps:
  1. Jobs: the runs on time-sliced pools, and the waiting runs that could run there (an accelerator they
     allow, a pool their queue can get quota on): every waiting run, in every queue (the policy's order
     stands in for the queues' own, strict FIFO included). Each carries its rates per chip type where
     measured or traced (`Request.throughput`), so the heterogeneity-aware policies see them.
  2. Allocate: the policy says which of them run on which time-sliced pool for the next round.
  3. Swap: on each pool the policy gives to waiting runs, the runs it leaves out are preempted so the
     waiting ones fit, unless that cannot make room (then nothing on the pool changes). Runs younger than
     half a round, and runs inside a reservation, are never swapped out.
  4. Plan: each waiting run the policy placed keeps that pool as its first choice (`Request.pool`) until it
     starts or the next round plans again; those it made room for are nominated for their victims' chips,
     so they go first once those stop. Admission still checks quotas, budgets and fair share as always.
These preemptions are not counted against the preemption bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from crossrail.scheduling.cache import Cache
from crossrail.scheduling.policies import JobView, Policy, PoolView, level_of
from crossrail.scheduling.scoring import PlacementWork, PoolInfo, run_time_s
from crossrail.scheduling.types import Allocation, Request
from crossrail.spec import Pool


@dataclass(frozen=True)
class Swap:
    """Round-boundary decisions: who stops (with why) and which head waits for whose chips."""

    stop: list[tuple[Allocation, str, str]] = field(default_factory=list)
    """(run to stop, why, the first head it makes room for)."""
    nominate: dict[str, set[str]] = field(default_factory=dict)


@dataclass
class Rounds:
    policy: Policy
    round_s: float
    next_at: float | None = None
    plan: dict[str, str] = field(default_factory=dict)
    """Waiting run -> the pool this round's allocation gave it (its first choice until it starts)."""
    _rates_fleet: tuple[tuple[str, str, str], ...] = field(default=(), init=False, repr=False)
    _rates_by: dict[str, tuple[object, Mapping[str, float]]] = field(default_factory=dict, init=False, repr=False)
    """Run -> (its throughput, allow and runs_on, its rates on `_rates_fleet`'s pools) as of the last boundary."""
    _rates_now: dict[str, tuple[object, Mapping[str, float]]] = field(default_factory=dict, init=False, repr=False)
    """`_rates_by` of the runs viewed at this boundary (only they are kept for the next)."""

    def due(self, now: float) -> bool:
        """Whether a round boundary has come (the first cycle opens the first round).

        Boundaries fall on whole multiples of `round_s` of the clock, whoever drives it: the agent after a
        restart or a failover, and the simulator from its own start, keep the same phase.
        """
        if self.next_at is not None and now < self.next_at:
            return False
        self.next_at = (math.floor(now / self.round_s) + 1) * self.round_s if self.round_s > 0 else now
        return True

    def swap(self, cache: Cache, waiting: Iterable[Request], specs: dict[str, Pool], now: float) -> Swap:
        sliced = sliced_pools(specs, cache)  # 1
        pools = [pool_view(cache, specs[name]) for name in sliced if not cache.pools[name].drained]
        running = sorted(
            (a for name in sliced for a in cache.by_pool.get(name, {}).values() if not a.evicting), key=lambda a: a.run
        )
        usable = [specs[p.name] for p in pools]
        waiting = sorted(
            (r for r in waiting if self._could_run(cache, r, usable)), key=lambda r: r.run
        )  # in a canonical order: a policy's ties fall alike whichever driver listed them
        self.plan = {}
        fleet = tuple((p.name, p.chip_type, p.accelerator) for p in specs.values())
        kept = self._rates_now if fleet == self._rates_fleet else {}  # rates on another fleet are stale
        self._rates_fleet, self._rates_by, self._rates_now = fleet, kept, {}
        if not pools or not (waiting or (self.policy.hetero and len(pools) > 1 and running)):
            return Swap()
        chip_types = {name: spec.chip_type for name, spec in specs.items()}
        remaining = self.policy.uses_remaining
        jobs = [self._running(a, specs, chip_types, now, remaining=remaining) for a in running]
        jobs += [self._waiting(r, specs, remaining=remaining) for r in waiting]
        wanted = self.policy.allocate(jobs, pools, now, self.round_s)  # 2
        swap = Swap()
        for pool in pools:  # 3
            self._swap_pool(cache, pool, running=running, waiting=waiting, wanted=wanted, now=now, swap=swap)
        self.plan = {r.run: wanted[r.run] for r in waiting if r.run in wanted}  # 4
        self._move(running, wanted, {p.name for p in pools}, now, swap)
        return swap

    def _move(self, running: list[Allocation], wanted: dict[str, str], pools: set[str], now: float, swap: Swap) -> None:
        """A heterogeneity-aware policy moves runs to the chip type that serves them better: each running run
        it gives another time-sliced pool stops at the boundary and is planned there (a checkpoint, then a
        restore on the new chips), under the same age and reservation rules as a swap."""
        if not self.policy.hetero:
            return
        stopping = {a.run for a, _, _ in swap.stop}
        for alloc in running:
            to = wanted.get(alloc.run)
            if to is None or to == alloc.pool or to not in pools or alloc.run in stopping:
                continue
            if alloc.reservation is not None or now - alloc.started_at < self.round_s / 2:
                continue
            why = f"round boundary: policy {self.policy.name} moves it from {alloc.pool} to {to}"
            swap.stop.append((alloc, why, alloc.run))
            self.plan[alloc.run] = to

    def _swap_pool(
        self,
        cache: Cache,
        pool: PoolView,
        *,
        running: list[Allocation],
        waiting: list[Request],
        wanted: dict[str, str],
        now: float,
        swap: Swap,
    ) -> None:
        heads = [r for r in waiting if wanted.get(r.run) == pool.name]
        if not heads:
            return
        here = [a for a in running if a.pool == pool.name]
        out = [
            a
            for a in here
            if wanted.get(a.run) != pool.name and a.reservation is None and now - a.started_at >= self.round_s / 2
        ]
        needed = sum(r.chips for r in heads) - cache.pools[pool.name].free_chips
        if needed <= 0 or sum(a.chips for a in out) < needed:
            return
        out.sort(key=lambda a: (a.started_at, a.run))  # longest-running first
        victims, freed = [], 0
        for alloc in out:
            if freed >= needed:
                break
            victims.append(alloc)
            freed += alloc.chips
        names = ", ".join(r.run for r in heads)
        why = f"round boundary on time-sliced {pool.name}: policy {self.policy.name} gives the next round to {names}"
        swap.stop.extend((a, why, heads[0].run) for a in victims)
        for req in heads:
            swap.nominate[req.run] = {a.run for a in victims}

    @staticmethod
    def _could_run(cache: Cache, req: Request, pools: list[Pool]) -> bool:
        reach = cache.quota.reachable(req.queue)
        return any(_allows(req, p) and (reach is None or p.name in reach) for p in pools)

    def _running(
        self, alloc: Allocation, specs: dict[str, Pool], chip_types: dict[str, str], now: float, *, remaining: bool
    ) -> JobView:
        """A running run as the policy sees it: its service and work left counted up to `now` (the work left
        only where the policy reads it, `remaining`)."""
        req = alloc.request
        held_s = max(now - alloc.started_at, 0.0)
        by_type = dict(req.attained_by_type)
        chip_type = chip_types.get(alloc.pool)
        if by_type and chip_type is not None:
            by_type[chip_type] = by_type.get(chip_type, 0.0) + alloc.chips * held_s
        left = None
        if req.remaining is not None and remaining:
            rate = dict(req.throughput).get(chip_type or "", 1.0) if req.throughput else 1.0
            left = max(req.remaining - rate * held_s, 0.0)
        got = req.attained_s + alloc.chips * held_s
        return self._view(req, specs, chips=alloc.chips, got=got, by_type=by_type, remaining=left, pool=alloc.pool)

    def _waiting(self, req: Request, specs: dict[str, Pool], *, remaining: bool) -> JobView:
        left = req.remaining if remaining else None
        by_type = dict(req.attained_by_type)
        return self._view(req, specs, chips=req.chips, got=req.attained_s, by_type=by_type, remaining=left, pool=None)

    def _view(
        self,
        req: Request,
        specs: dict[str, Pool],
        *,
        chips: int,
        got: float,
        by_type: dict[str, float],
        remaining: float | None,
        pool: str | None,
    ) -> JobView:
        return JobView(
            run=req.run,
            queue=req.queue,
            priority=level_of(req.priority),
            submitted_at=req.queued_at,
            chips=chips,
            attained_s=got,
            throughput=self._rates(req, specs),
            remaining=remaining,
            pool=pool,
            attained_by_type=by_type,
        )

    def _rates(self, req: Request, specs: dict[str, Pool]) -> Mapping[str, float]:
        """`rates(req, specs)`, worked out once per run while its rates, its pools and the fleet stay the same:
        every run is viewed at every boundary. The mapping is shared between views; policies only read it."""
        key = (req.throughput, req.allow, req.runs_on)
        known = self._rates_by.get(req.run)
        if known is None or known[0] != key:
            known = (key, rates(req, specs))
        self._rates_now[req.run] = known
        return known[1]


def pool_view(cache: Cache, spec: Pool) -> PoolView:
    """What a policy sees of a pool: its chips and those free now."""
    state = cache.pools[spec.name]
    return PoolView(spec.name, spec.chip_type, state.capacity, state.free_chips, time_sliced=True)


def rates(req: Request, specs: dict[str, Pool]) -> dict[str, float]:
    """The run's rate per chip type: its own (`Request.throughput`) where known, else 1; 0 on chip types no
    pool it may use has. Empty when it allows every chip type and its rates are unknown."""
    known = dict(req.throughput)
    out: dict[str, float] = {}
    for p in specs.values():
        if _allows(req, p):
            out[p.chip_type] = known.get(p.chip_type, 0.0) if known else 1.0
        else:
            out.setdefault(p.chip_type, 0.0)
    return {} if not known and all(out.values()) else out


def sliced_pools(specs: dict[str, Pool], cache: Cache) -> list[str]:
    """The pools a round may stop runs on: those the fleet marks `time_sliced`."""
    return [name for name in specs if name in cache.pools and specs[name].time_sliced]


def _allows(req: Request, pool: Pool) -> bool:
    """The run may use `pool`: an accelerator it allows, chips that can run it."""
    return (req.allow is None or pool.accelerator in req.allow) and (req.runs_on is None or pool.name in req.runs_on)


def estimated_rates(work: PlacementWork, pools: Sequence[PoolInfo]) -> tuple[tuple[str, float], ...]:
    """A run's rate per chip type as the live agent knows it, in the units the simulator's are in (seconds of
    its declared work at speed 1, per second): the declared duration over the run-time estimate on that chip
    type's fastest pool (`estimate.run_time_s`: measured runs of the same work first, then the throughputs
    its attempts reported per chip type, then the pool's `relative_speed`).

    Every chip type of the fleet is rated, as the simulator rates them; `rates` gives the ones the run may not
    use 0. Empty, so heterogeneity-aware policies treat every chip type alike, when the run declares no
    duration, when a chip type has no estimate, or when every chip type runs it at one speed (as the
    simulator's uniform speeds say nothing).
    """
    if work.reference_s is None or work.reference_s <= 0:
        return ()
    best: dict[str, float] = {}
    for pool in pools:
        run_s, _ = run_time_s(work, pool, pools)
        if run_s is None or run_s <= 0:
            return ()
        best[pool.chip_type] = max(best.get(pool.chip_type, 0.0), work.reference_s / run_s)
    if len(set(best.values())) < 2:
        return ()
    return tuple(sorted(best.items()))


def served_by_type(chip_s_by_pool: dict[str, float], specs: dict[str, Pool]) -> tuple[tuple[str, float], ...]:
    """Chip-seconds a run's attempts held, by pool, summed by the pools' chip types (pools no longer in the
    fleet are left out)."""
    out: dict[str, float] = {}
    for pool, chip_s in chip_s_by_pool.items():
        if pool in specs:
            out[specs[pool].chip_type] = out.get(specs[pool].chip_type, 0.0) + chip_s
    return tuple(sorted(out.items()))
