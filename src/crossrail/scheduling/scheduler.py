"""The scheduling core: queues and a cache fed incrementally by events, and `cycle(now)` that decides.

    sched = Scheduler.from_fleet(fleet, SchedulerConfig.from_fleet(fleet, fallback_wait_s=60))
    sched.submitted(request)          # a run is queued            sched.finished(run, at)      # it ended
    sched.started(request, pool, chips, at)                        sched.checkpointed(run, at)
    result = sched.cycle(now)         # admitted, preempted, blocked (with reasons), grown

Or, level-triggered, once per pass: `sched.sync(pending, running, now)` then `sched.cycle(now)`.
Pure: no clock, files, database or processes; every time is passed in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from crossrail.errors import PlacementError
from crossrail.scheduling.budget import BudgetBook
from crossrail.scheduling.cache import Cache
from crossrail.scheduling.cycle import Cycle, Memo
from crossrail.scheduling.fleet_change import FleetChange, fleet_changes
from crossrail.scheduling.policies import Policy, get_policy
from crossrail.scheduling.policies.admission import admission_order, view_of
from crossrail.scheduling.pool import PoolState
from crossrail.scheduling.queue import QueueSet
from crossrail.scheduling.quota import QuotaBook
from crossrail.scheduling.reservation import Hold
from crossrail.scheduling.rounds import Rounds, pool_view, rates
from crossrail.scheduling.types import Allocation, CycleResult, Preemption, Request, Running, SchedulerConfig
from crossrail.spec import Fleet, Pool


@dataclass(frozen=True)
class PoolStatus:
    name: str
    capacity: int
    free: int
    drained: bool
    leaving_hosts: int
    reserved: dict[str, int]


@dataclass(frozen=True)
class ReservationStatus:
    name: str
    pool: str
    chips: int
    start: float
    end: float
    team: str | None
    state: str
    """`upcoming`, `active`, or `short` when lost hosts left it fewer chips than it holds."""
    pinned_chips: int
    in_use_chips: int


@dataclass(frozen=True)
class QuotaStatus:
    """One queue's quota on one pool: its nominal chips and the chips its admitted runs hold there now."""

    queue: str
    pool: str
    nominal: int
    used: int
    borrowed: int
    """Chips used beyond the nominal quota (lent by its cohort)."""


class Scheduler:
    def __init__(self, fleet: Fleet, config: SchedulerConfig | None = None) -> None:
        self.fleet = fleet
        self.config = config or SchedulerConfig.from_fleet(fleet)
        self.cache = Cache(fleet, self.config)
        strict = {q.name: q.queueing == "strict_fifo" for q in fleet.spec.queues}
        self.queues = QueueSet(strict, admission_order(self.config.policy))
        self.rounds = _rounds(self.config)
        """Time slicing of time-sliced pools under a round-based policy (None: an ordering policy)."""
        self.ordering = _ordering(self.config)
        """A heterogeneity-aware ordering policy, which names each waiting run's pool (None: any other)."""
        self.nominated: dict[str, set[str]] = {}
        self.memo: dict[str, Memo] = {}
        self.budgets = BudgetBook.from_fleet(fleet)
        """Team budgets: spend this period, crossings announced, holds (budget.py)."""
        for pool in self.cache.pools.values():
            pool.preempt_drained = pool.drained and self.config.preempt_on_drain
        for spec in fleet.spec.reservations:
            self.cache.hold(Hold.from_spec(spec))

    @classmethod
    def from_fleet(cls, fleet: Fleet, config: SchedulerConfig | None = None) -> Scheduler:
        return cls(fleet, config)

    # --- runs ----------------------------------------------------------------------------------

    def submitted(self, req: Request) -> None:
        """`req.run` waits in its queue (again, for a retry: a new request replaces the old one)."""
        if req.run in self.cache.allocs:
            self.finished(req.run, req.queued_at)
        if self.queues.submit(req):
            self.memo.pop(req.run, None)

    def withdrawn(self, run: str) -> None:
        """`run` no longer waits (cancelled, suspended, or failed before it was admitted)."""
        self.queues.withdraw(run)
        self.nominated.pop(run, None)
        self.memo.pop(run, None)

    def started(self, run: str | Request, pool: str, chips: int, at: float) -> None:
        """`run` holds `chips` of `pool` since `at`: confirms an admission, or records work found running."""
        req = run if isinstance(run, Request) else self._request(run)
        alloc = self.cache.allocs.get(req.run)
        if alloc is not None and alloc.pool == pool and alloc.chips == chips:
            alloc.started_at = at
            return
        if alloc is not None:
            self._release(req.run, at)
            self.queues.freed = True
        self.withdrawn(req.run)
        self.cache.place(req, pool, chips, at)

    def _request(self, run: str) -> Request:
        req = self.queues.requests.get(run)
        if req is not None:
            return req
        alloc = self.cache.allocs.get(run)
        if alloc is None:
            raise KeyError(f"run {run!r} is neither queued nor running here; pass its Request to started()")
        return alloc.request

    def finished(self, run: str, at: float) -> None:
        """`run` ended (or was never launched): its chips are free and it waits no more."""
        self.withdrawn(run)
        if self._release(run, at) is not None:
            self.queues.freed = True
        self.budgets.forget(run)

    def _release(self, run: str, at: float) -> Allocation | None:
        """Take `run`'s allocation out of the cache, charging what it cost to its team's budget."""
        alloc = self.cache.remove(run, at)
        if alloc is not None and self.budgets:
            self.budgets.charge(alloc, at)
        return alloc

    def checkpointed(self, run: str, at: float) -> None:
        """`run` committed a checkpoint at `at`: preempting it now loses only the work since."""
        alloc = self.cache.allocs.get(run)
        if alloc is not None:
            alloc.checkpointed_at = max(alloc.checkpointed_at or at, at)

    def resized(self, run: str, chips: int, at: float) -> None:
        """An elastic run now holds `chips` (after taking a growth proposal, or shrinking)."""
        alloc = self.cache.allocs.get(run)
        if alloc is None or alloc.chips == chips:
            return
        self._release(run, at)
        moved = self.cache.place(alloc.request, alloc.pool, chips, at)
        moved.started_at, moved.checkpointed_at = alloc.started_at, alloc.checkpointed_at
        self.queues.freed = True

    def sync(self, pending: Iterable[Request], running: Iterable[Running], now: float) -> None:
        """Make the scheduler hold exactly these queued and running runs (a level-triggered pass).

        Runs it holds but that are in neither list end now; new ones are added; history (fair share,
        preemption counts) is kept. Costs O(pending + running); the cycle that follows does not.
        """
        running = list(running)
        live = {r.request.run for r in running}
        for run in [run for run in self.cache.allocs if run not in live]:
            self.finished(run, now)
        for r in running:
            self.started(r.request, r.pool, r.chips, r.started_at)
            if r.checkpointed_at is not None:
                self.checkpointed(r.request.run, r.checkpointed_at)
        pending = list(pending)
        queued = {req.run for req in pending}
        for run in [run for run in self.queues.requests if run not in queued]:
            self.withdrawn(run)
        for req in pending:
            self.submitted(req)

    # --- the cycle -----------------------------------------------------------------------------

    def cycle(self, now: float) -> CycleResult:
        """Admit what fits, preempt what must make room, and say why the rest waits (see `cycle.py`)."""
        for run in [r for r, victims in self.nominated.items() if not victims & self.cache.allocs.keys()]:
            if run not in self.queues.requests:
                del self.nominated[run]
        swapped = self._round(now)
        self._hint(now)
        result = Cycle(self.cache, self.queues, self.nominated, self.memo, now, budgets=self.budgets).run()
        result.preempted[:0] = swapped
        return result

    def _round(self, now: float) -> list[Preemption]:
        """At a round boundary, stop what the round-based policy swaps out of time-sliced pools (see rounds.py)."""
        if self.rounds is None or not self.rounds.due(now):
            return []
        waiting = [req for req in self._contenders() if req.run not in self.nominated]
        swap = self.rounds.swap(self.cache, waiting, {p.name: p for p in self.fleet.spec.pools}, now)
        stopped = []
        for alloc, why, for_run in swap.stop:
            self.cache.preempting(alloc, now, counted=False)
            stopped.append(Preemption(alloc.run, alloc.pool, alloc.chips, self.config.grace_s, why, for_run))
        self.nominated.update(swap.nominate)
        return stopped

    def _contenders(self) -> list[Request]:
        """The waiting runs a policy picks from: every one, in every queue (a policy that reorders, by rounds
        or by pool, stands in for the queues' own order, strict FIFO included)."""
        return [self.queues.requests[r] for q in self.queues.queues.values() for r in q.runs()]

    @property
    def hetero(self) -> bool:
        """Whether its policy is heterogeneity-aware: it reads each run's rates per chip type (`Request.throughput`)."""
        policy = self.rounds.policy if self.rounds is not None else self.ordering
        return policy is not None and policy.hetero

    def _hint(self, now: float) -> None:
        """The policy's pool for each waiting run it placed, tried first: the round's plan (round-based
        policies), or where a heterogeneity-aware ordering policy sends it now (its fastest chip type with room)."""
        if self.rounds is not None:
            wanted = self.rounds.plan  # until the next round plans again (a moved run waits once it has stopped)
            why = f"policy {self.rounds.policy.name} gave it this round on {{pool}}"
        else:
            policy = self.ordering
            if policy is None or not self.queues.requests:
                return
            specs = {p.name: p for p in self.fleet.spec.pools}
            pools = [pool_view(self.cache, specs[n]) for n in specs if n in self.cache.pools]
            pools = [p for p in pools if not self.cache.pools[p.name].drained]
            views = [dataclasses.replace(view_of(req), throughput=rates(req, specs)) for req in self._contenders()]
            wanted = {job.run: pool for job, pool in policy.order(views, pools, now) if pool is not None}
            why = f"policy {policy.name} sends it to its fastest chip type with room, {{pool}}"
        for run, pool in wanted.items():
            waiting = self.queues.requests.get(run)
            if waiting is not None and pool not in (waiting.pool, waiting.avoid_pool):
                self.submitted(dataclasses.replace(waiting, pool=pool, pool_reason=why.format(pool=pool)))

    # --- the fleet -----------------------------------------------------------------------------

    def capacity_changed(self, pool: str, chips: int) -> None:
        """`pool` now has `chips` (whole hosts): new hosts take work at once; lost ones take none."""
        state = self._pool(pool)
        if chips < 0 or chips % state.per_host:
            raise PlacementError(
                f"{pool} capacity must be whole hosts of {state.per_host} chips (got {chips}); "
                f"use a multiple of {state.per_host}"
            )
        before = state.capacity
        if state.resize(chips):
            self.cache.repin(pool)
        self.cache.changed(pool)
        if state.capacity > before:
            self.queues.freed = True

    def drain(self, pool: str, *, preempt: bool | None = None) -> None:
        """`pool` takes no new work; running work finishes, or is preempted (default: the fleet's policy)."""
        state = self._pool(pool)
        state.drained = True
        state.preempt_drained = self.config.preempt_on_drain if preempt is None else preempt
        self.cache.changed(pool)

    def undrain(self, pool: str) -> None:
        state = self._pool(pool)
        state.drained = state.preempt_drained = False
        self.cache.changed(pool)
        self.queues.freed = True

    def reserve(
        self, name: str, pool: str, chips: int, start: float, duration_s: float, *, team: str | None = None
    ) -> Hold:
        """Hold `chips` of `pool` from `start` for `duration_s`; PlacementError when the pool cannot."""
        if name in self.cache.holds:
            raise PlacementError(f"reservation {name} exists; unreserve it first or pick another name")
        if chips <= 0 or duration_s <= 0:
            raise PlacementError(f"reservation {name}: chips and duration must be positive")
        self._pool(pool)
        hold = Hold(name, pool, chips, start, start + duration_s, team)
        self.cache.hold(hold)
        return hold

    def unreserve(self, name: str) -> bool:
        """Release reservation `name`; False when there is none."""
        if self.cache.release_hold(name) is None:
            return False
        self.queues.freed = True
        return True

    def apply_fleet(self, fleet: Fleet) -> list[FleetChange]:
        """Move to a new version of the fleet; returns what changed. Checks everything before changing anything."""
        changes = fleet_changes(self.fleet, fleet)
        for pool in fleet.spec.pools:
            known = self.cache.pools.get(pool.name)
            if known is not None and known.per_host != pool.chips_per_host and self._busy(pool.name):
                raise PlacementError(
                    f"{pool.name}: chips_per_host cannot change while work runs there; "
                    "drain the pool, wait for it to empty, then apply again"
                )
        for change in changes:
            self._apply(change, fleet)
        self.budgets.configure(fleet)
        self.fleet = fleet
        self.queues.freed = True
        self.cache.changed()
        return changes

    def _busy(self, pool: str) -> bool:
        return bool(self.cache.by_pool.get(pool))

    def _replaceable(self, pool: str, per_host: int) -> bool:
        """A pool's state is built afresh when it is new, or idle with a new host size."""
        known = self.cache.pools.get(pool)
        return known is None or (known.per_host != per_host and not self._busy(pool))

    def _apply(self, change: FleetChange, fleet: Fleet) -> None:
        kind, name = change.kind, change.name
        if kind == "queues":
            self._requota(fleet)
        elif kind == "reservation_removed":
            self.unreserve(name)
        elif kind == "reservation_added":
            spec = next(r for r in fleet.spec.reservations if r.name == name)
            self.cache.hold(Hold.from_spec(spec))
        elif kind == "policy":
            self._repolicy(fleet)
        else:
            self._apply_pool(change, next((p for p in fleet.spec.pools if p.name == name), None))

    def _apply_pool(self, change: FleetChange, pool: Pool | None) -> None:
        kind, name = change.kind, change.name
        if pool is None:  # removed: running work finishes, nothing new starts there
            self.capacity_changed(name, 0)
            self.drain(name, preempt=False)
            self._pool(name).retired = True
        elif kind in ("pool_added", "pool_settings") and self._replaceable(name, pool.chips_per_host):
            self.cache.pools[name] = PoolState(pool)
            self.cache.by_pool.setdefault(name, {})
            self.cache.elastic.setdefault(name, set())
        elif kind == "pool_added":  # back after a removal while its last work still ran
            self._pool(name).retired = False
            self.capacity_changed(name, pool.chips)
            self._apply_pool(FleetChange("drain" if pool.drained else "undrain", name, ""), pool)
        elif kind == "pool_settings":
            fresh, state = PoolState(pool), self._pool(name)
            state.accelerator, state.shapes, state.cost_key = fresh.accelerator, fresh.shapes, fresh.cost_key
        elif kind == "capacity":
            self.capacity_changed(name, pool.chips)
        elif kind == "drain":
            self.drain(name)
        elif kind == "undrain":
            self.undrain(name)

    def _requota(self, fleet: Fleet) -> None:
        cache = self.cache
        cache.quota = QuotaBook(fleet.spec.queues)
        used, cache.used, cache.excess = cache.used, {}, {}
        for (queue, pool), chips in used.items():
            cache.quota.charge(cache.used, cache.excess, queue, pool, chips)
        for q in fleet.spec.queues:
            self.queues.queue(q.name).strict = q.queueing == "strict_fifo"

    def _repolicy(self, fleet: Fleet) -> None:
        fresh = SchedulerConfig.from_fleet(fleet, fallback_wait_s=self.config.fallback_wait_s)
        if fresh.policy != self.config.policy:
            self.queues.reorder(admission_order(fresh.policy))
        if (fresh.policy, fresh.round_s) != (self.config.policy, self.config.round_s):
            self.rounds = _rounds(fresh)
            self.ordering = _ordering(fresh)
        self.config = dataclasses.replace(fresh, best_effort_tries=self.config.best_effort_tries)
        self.cache.config = self.config
        self.cache.usage.set_half_life(self.config.half_life_s)

    def _pool(self, name: str) -> PoolState:
        state = self.cache.pools.get(name)
        if state is None:
            known = ", ".join(self.cache.pools)
            raise PlacementError(f"no pool {name!r} in fleet {self.fleet.name}; pools are {known}")
        return state

    # --- read models ---------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self.queues)

    def pool_status(self) -> list[PoolStatus]:
        out = []
        for pool in self.cache.by_cost():
            reserved = {h.name: h.chips for h in self.cache.holds.values() if h.pool == pool.name}
            leaving = len(pool.leaving())
            out.append(PoolStatus(pool.name, pool.capacity, pool.free_chips, pool.drained, leaving, reserved))
        return out

    def quota_status(self) -> list[QuotaStatus]:
        """Each queue's nominal quota per pool beside the chips it uses there, in the fleet's order; a pool
        where a queue has no quota but uses chips (borrowed) is listed too."""
        quota, used = self.cache.quota, self.cache.used
        out = []
        for q in self.fleet.spec.queues:
            pools = list(q.quota) + sorted(p for (name, p) in used if name == q.name and p not in q.quota)
            for pool in pools:
                have = used.get((q.name, pool), 0)
                out.append(QuotaStatus(q.name, pool, q.quota.get(pool, 0), have, quota.borrowed(used, q.name, pool)))
        return out

    def reservation_status(self, now: float) -> list[ReservationStatus]:
        out = []
        for hold in sorted(self.cache.holds.values(), key=lambda h: (h.start, h.name)):
            per = self.cache.pools[hold.pool].per_host
            pinned = len(hold.hosts) * per
            used = sum(a.chips for a in self.cache.by_pool[hold.pool].values() if a.reservation == hold.name)
            state = "short" if pinned < hold.chips else ("active" if hold.active(now) else "upcoming")
            out.append(
                ReservationStatus(
                    hold.name, hold.pool, hold.chips, hold.start, hold.end, hold.team, state, pinned, used
                )
            )
        return out


def _rounds(config: SchedulerConfig) -> Rounds | None:
    policy = get_policy(config.policy)
    return Rounds(policy, config.round_s) if policy.round_based else None


def _ordering(config: SchedulerConfig) -> Policy | None:
    """The ordering policy that also picks pools (a heterogeneity-aware one), else None."""
    policy = get_policy(config.policy)
    return policy if policy.hetero and not policy.round_based else None
