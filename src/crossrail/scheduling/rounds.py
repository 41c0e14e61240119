"""Round-based policies in the agent: time slicing on the pools the fleet marks `time_sliced`.

At each round boundary (every `scheduling.round`), in numbered steps:
  1. Jobs: the runs on time-sliced pools, and the queue heads that could run there (an accelerator they
     allow, a pool their queue can get quota on). Each queue's head only: a queue's own order stands.
  2. Allocate: the policy says which of them run on which time-sliced pool for the next round.
  3. Swap: on each pool the policy gives to waiting heads, the runs it leaves out are preempted so the
     heads fit, unless that cannot make room (then nothing on the pool changes). Runs younger than half a
     round, and runs inside a reservation, are never swapped out.
The heads are nominated for their victims' chips, so they go first once those stop; admission still
checks quotas and fair share as always. These preemptions are not counted against the preemption bound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from crossrail.scheduling.cache import Cache
from crossrail.scheduling.policies import JobView, Policy, PoolView, level_of
from crossrail.scheduling.policies.admission import view_of
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

    def due(self, now: float) -> bool:
        """Whether a round boundary has come (the first cycle opens the first round)."""
        if self.next_at is not None and now < self.next_at:
            return False
        self.next_at = now + self.round_s
        return True

    def swap(self, cache: Cache, heads: Iterable[Request], specs: dict[str, Pool], now: float) -> Swap:
        sliced = [name for name, spec in specs.items() if spec.time_sliced and name in cache.pools]  # 1
        pools = [self._pool(cache, specs[name]) for name in sliced if not cache.pools[name].drained]
        running = [a for name in sliced for a in cache.by_pool.get(name, {}).values() if not a.evicting]
        waiting = [r for r in heads if self._could_run(cache, r, [specs[p.name] for p in pools])]
        if not pools or not waiting:
            return Swap()
        jobs = [self._running(a, specs, now) for a in running] + [self._waiting(r, specs) for r in waiting]
        wanted = self.policy.allocate(jobs, pools, now, self.round_s)  # 2
        swap = Swap()
        for pool in pools:  # 3
            self._swap_pool(cache, pool, running=running, waiting=waiting, wanted=wanted, now=now, swap=swap)
        return swap

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
    def _pool(cache: Cache, spec: Pool) -> PoolView:
        state = cache.pools[spec.name]
        return PoolView(spec.name, spec.chip_type, state.capacity, state.free_chips, time_sliced=True)

    @staticmethod
    def _could_run(cache: Cache, req: Request, pools: list[Pool]) -> bool:
        reach = cache.quota.reachable(req.queue)
        return any(_allows(req, p) and (reach is None or p.name in reach) for p in pools)

    @staticmethod
    def _rates(req: Request, specs: dict[str, Pool]) -> dict[str, float]:
        """1 on chip types the run allows, 0 on the others; empty when it allows them all (no rates known)."""
        rates = {p.chip_type: 1.0 if _allows(req, p) else 0.0 for p in specs.values()}
        return {} if all(rates.values()) else rates

    def _running(self, alloc: Allocation, specs: dict[str, Pool], now: float) -> JobView:
        req = alloc.request
        got = req.attained_s + alloc.chips * max(now - alloc.started_at, 0.0)
        return JobView(
            run=req.run,
            queue=req.queue,
            priority=level_of(req.priority),
            submitted_at=req.queued_at,
            chips=alloc.chips,
            attained_s=got,
            throughput=self._rates(req, specs),
            pool=alloc.pool,
        )

    def _waiting(self, req: Request, specs: dict[str, Pool]) -> JobView:
        return dataclasses.replace(view_of(req), throughput=self._rates(req, specs))


def _allows(req: Request, pool: Pool) -> bool:
    """The run may use `pool`: an accelerator it allows, chips that can run it."""
    return (req.allow is None or pool.accelerator in req.allow) and (req.runs_on is None or pool.name in req.runs_on)
