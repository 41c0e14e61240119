"""One scheduling cycle, in numbered steps (after Kueue's scheduler):

  1. Time: end reservations whose window is over; preempt backfill still on the hosts of a reservation
     that starts within the grace period; preempt work on drained pools and leaving hosts when the drain
     policy says so.
  2. Heads: set-aside heads come back when capacity freed or their time came; take each queue's head.
  3. Snapshot: a copy of the cache this cycle may change; trial preemptions restore it.
     Budgets: each budgeted team's spend this period, running work counted up to now; a budget crossed
     for the first time this period is announced (`budget_exceeded`).
  4. Admit: a head whose team is over a budget that holds (`hold: true`) is set aside until the period
     ends, whatever its queue's queueing (the hold is the team's, not the queue's). The others, in order
     (runs waiting for their victims first, then the policy's class (default: priority class), then the
     tenant's dominant share, then the policy's order (default: time queued)): rank the pools the head
     may use now, fit the largest gang it accepts on the first pool with room; else choose the fewest
     victims that make room; else block it. Runs this cycle admitted before it are victims by the same
     rules: not started yet, they are taken back and queued again, and when they alone make room the head
     is admitted at once (so the cycle never starts a run its next pass would preempt).
  5. Requeue: an admitted head leaves its queue and the next run competes; a strict FIFO queue stops at a
     blocked head, a best-effort one sets it aside and tries the next (a few per cycle).
  6. Commit: the snapshot's pools and usage become the cache's; admissions are assumed running.
  7. Grow: on a throwaway snapshot, offer free chips of pools no blocked head wanted to elastic runs.

Work per cycle grows with the number of queues, pools and admissions, never with the number pending
(budgets add one pass over the running allocations, and only when the fleet has budgets).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace

from crossrail.core.attempts import StopReason
from crossrail.scheduling.admission import GangFit, fit, why_not
from crossrail.scheduling.budget import BudgetBook
from crossrail.scheduling.cache import Cache
from crossrail.scheduling.pipeline import fit_parts
from crossrail.scheduling.placement import Placement, Ranked
from crossrail.scheduling.preemption import Candidates, Victim, could_reclaim, victims
from crossrail.scheduling.queue import QueueSet
from crossrail.scheduling.snapshot import Snapshot
from crossrail.scheduling.types import Admission, Allocation, CycleResult, Growth, Preemption, Request

MEMO_S = 60.0
"""How long a blocked head's reason is reused while nothing it depends on changes."""


@dataclass(frozen=True)
class Memo:
    """Why a head was blocked, and the versions of what that depended on."""

    version: int
    pools: tuple[int, ...]
    until: float
    reason: str


HeadKey = tuple[int, float, float, float, float, str, str]
"""(not waiting for victims, policy class, dominant share, policy primary and secondary, run, queue): smaller
goes first. With the default `priority` policy: class = priority rank, primary = time queued. The queue comes
last so the heap holds the keys themselves (no tuple in a tuple to compare twice); runs are unique, so it never
decides the order."""


class Cycle:
    def __init__(
        self,
        cache: Cache,
        queues: QueueSet,
        nominated: dict[str, set[str]],
        memo: dict[str, Memo],
        now: float,
        *,
        budgets: BudgetBook | None = None,
    ) -> None:
        self.cache = cache
        self.budgets = budgets or BudgetBook()
        self.spent: dict[str, float] = {}
        self.queues = queues
        self.nominated = nominated
        self.memo = memo
        self.now = now
        self.config = cache.config
        self.result = CycleResult()
        self.placement = Placement(cache.by_cost(), now, self.config.fallback_wait_s)
        self.contended: set[str] = set()
        self.held_pools = {h.pool for h in cache.holds.values()}
        self._usable: dict[tuple[int, frozenset[str] | None], Ranked] = {}
        self._admitted: list[Allocation] = []
        self._returned: list[str] = []
        """Queues of runs taken back this cycle, to try again."""
        self.candidates = Candidates(cache, now)

    def run(self) -> CycleResult:
        self.cache.tick(self.now)
        self.expire_and_claim()  # 1
        heads = self.take_heads()  # 2
        snap = Snapshot(self.cache, self.now)  # 3
        self.tally_budgets()
        self.admit(snap, heads)  # 4 and 5
        snap.commit()  # 6
        for alloc in self._admitted:
            self.cache.index(alloc, self.now)
        self.grow()  # 7
        return self.result

    # --- 1. time -------------------------------------------------------------------------------

    def expire_and_claim(self) -> None:
        cache, now, grace = self.cache, self.now, self.config.grace_s
        for hold in list(cache.holds.values()):
            if now >= hold.end:
                cache.release_hold(hold.name)
                self.queues.freed = True
                continue
            if hold.active(now) and not hold.opened:
                hold.opened = True
                self.queues.freed = True
            if now >= hold.start - grace and not hold.claimed:
                for alloc in list(cache.on_hosts(hold.pool, set(hold.hosts))):
                    if alloc.reservation != hold.name:
                        why = f"reservation {hold.name} starts on its hosts; backfill there has to leave by then"
                        self.preempt(alloc, why, None)
                hold.claimed = True
        for pool in cache.pools.values():
            if pool.drained and pool.preempt_drained:
                why = f"{pool.name} is drained and its policy preempts running work"
                for alloc in list(cache.by_pool[pool.name].values()):
                    self.preempt(alloc, why, None, drain=True)
            if self.config.preempt_on_drain and pool.active_hosts < len(pool.state):
                leaving = pool.leaving()
                if leaving:
                    for alloc in list(cache.on_hosts(pool.name, leaving)):
                        why = f"{pool.name} lost capacity and its policy preempts work there"
                        self.preempt(alloc, why, None, drain=True)

    def preempt(self, alloc: Allocation, reason: str, for_run: str | None, *, drain: bool = False) -> None:
        if alloc.evicting:
            return
        self.cache.preempting(alloc, self.now)
        stop: StopReason = "drained" if drain else "preempted"
        self.result.preempted.append(
            Preemption(alloc.run, alloc.pool, alloc.chips, self.config.grace_s, reason, for_run, stop=stop)
        )

    # --- 2. heads ------------------------------------------------------------------------------

    def take_heads(self) -> list[Request]:
        self.queues.wake(self.now)
        heads = []
        for queue in self.queues.queues.values():
            run = queue.head()
            if run is not None:
                heads.append(self.queues.requests[run])
        return heads

    def key(self, req: Request, snap: Snapshot) -> HeadKey:
        waiting = 0 if req.run in self.nominated else 1
        cls, primary, secondary = self.queues.order(req)
        return (waiting, cls, snap.share(req.tenant), primary, secondary, req.run, req.queue)

    # --- 3. budgets ----------------------------------------------------------------------------

    def tally_budgets(self) -> None:
        if self.budgets:
            self.spent = self.budgets.spend(self.cache.allocs.values(), self.now)
            self.result.budget_exceeded = self.budgets.crossings(self.spent, self.now)

    def held(self, req: Request) -> bool:
        """Set the head aside when its team's budget holds it, saying why and until when."""
        held = self.budgets.hold(req.team, self.spent, self.now) if self.spent else None
        if held is None:
            return False
        self.result.blocked[req.run], until = held
        self.queues.park(req, until)
        self.nominated.pop(req.run, None)
        first = self.result.held_until
        self.result.held_until = until if first is None else min(first, until)
        return True

    # --- 4 and 5. admit and requeue ------------------------------------------------------------

    def admit(self, snap: Snapshot, heads: list[Request]) -> None:
        key, queues, requests = self.key, self.queues, self.queues.requests
        heap = [key(req, snap) for req in heads]
        heapq.heapify(heap)
        heappop, heappush = heapq.heappop, heapq.heappush
        tries: dict[str, int] = {}
        while heap:
            popped = heappop(heap)
            name = popped[-1]
            queue = queues.queue(name)
            run = queue.head()
            if run is None:
                continue
            req = requests[run]
            fresh = key(req, snap)
            if fresh > popped and heap and fresh > heap[0]:
                heappush(heap, fresh)  # its tenant's share grew this cycle
                continue
            if self.spent and self.held(req):  # without budgets nothing is spent, and nothing held
                pass
            elif self.try_admit(req, snap):
                queues.admitted(req)
                self.nominated.pop(run, None)
                self.memo.pop(run, None)
            elif queue.strict:
                continue
            else:
                tries[name] = tries.get(name, 0) + 1
                retry = self.placement.fallback_at(req)
                queues.park(req, retry if retry is not None and retry > self.now else None)
                if tries[name] >= self.config.best_effort_tries:
                    continue
            nxt = queue.head()
            if nxt is not None:
                heappush(heap, key(requests[nxt], snap))
            while self._returned:  # runs taken back in another queue compete again
                other = queues.queue(self._returned.pop())
                if other is not queue and (back := other.head()) is not None:
                    heappush(heap, key(requests[back], snap))

    def usable(self, req: Request) -> Ranked:
        """The ranked pools where the request's queue could get quota, or a reservation could take it."""
        ranked = self.placement.ranked(req)
        reach = self.cache.quota.reachable(req.queue)
        key = (id(ranked), reach)
        usable = self._usable.get(key)
        if usable is None:
            if reach is None:
                usable = ranked
            else:
                order = self.placement.positions(ranked)
                wanted = [order[name] for name in reach | self.held_pools if name in order]
                usable = [ranked[i] for i in sorted(wanted)] or ranked  # none: try all, so reasons say why
            self._usable[key] = usable
        return usable

    def try_admit(self, req: Request, snap: Snapshot) -> bool:
        if req.parts:
            return self.try_admit_parts(req, snap)
        ranked = self.usable(req)
        memo = self.memo.get(req.run)
        if memo and (memo.version, memo.pools) == (self.cache.version, self.versions(ranked)) and self.now < memo.until:
            self.result.blocked[req.run] = memo.reason  # nothing it waits on changed: skip the search
            self.contended.update(p.name for p, _ in ranked)
            return False
        if not ranked:
            allow = ", ".join(req.allow or ())
            self.result.blocked[req.run] = f"no pool of the fleet has an accelerator the run allows ({allow})"
            return False
        grace, low = self.config.grace_s, req.low
        for pool_state, kind in ranked:
            pool = snap.pool(pool_state.name)
            if pool.free_chips < low or pool.drained:
                continue  # what `fit` checks first, without the call: most pools of a busy fleet stop here
            got = fit(snap, req, pool, grace)
            if got is not None:
                self.take(req, got, self.placement.reason(req, kind), snap)
                return True
        self.contended.update(p.name for p, _ in ranked)
        preempting = self.preempt_for(req, snap, ranked)
        if isinstance(preempting, str):
            self.result.blocked[req.run] = preempting
        if preempting is not None:
            return preempting is True
        reason = self.result.blocked[req.run] = self.why_blocked(req, snap, ranked)
        fallback = self.placement.fallback_at(req)
        until = min(self.now + MEMO_S, fallback if fallback is not None and fallback > self.now else math.inf)
        self.memo[req.run] = Memo(self.cache.version, self.versions(ranked), until, reason)
        return False

    def versions(self, ranked: Ranked) -> tuple[int, ...]:
        """The versions of the pools a blocked head depends on (no decision within a cycle bumps them)."""
        pool_version = self.cache.pool_version
        return tuple(pool_version.get(p.name, 0) for p, _ in ranked)

    def try_admit_parts(self, req: Request, snap: Snapshot) -> bool:
        """A pipeline: all its parts fit (each on its own pool when it prefers `mixed`) or none is admitted.

        It does not preempt: choosing victims for several linked gangs at once is not done yet.
        """
        fits, why = fit_parts(snap, req, self.usable, self.config.grace_s)
        if not fits:
            self.result.blocked[req.run] = why
            self.contended.update(p.name for p, _ in self.usable(req))
            return False
        for part in fits:
            placed = self.placement.reason(part.request, part.kind)
            reason = f"part {part.part} of {req.run}, its parts admitted together; {placed}"
            self.take(part.request, part.fit, reason, snap)
        return True

    def why_blocked(self, req: Request, snap: Snapshot, ranked: Ranked) -> str:
        reasons = [why_not(snap, req, snap.pool(p.name), self.config.grace_s) for p, _ in ranked[:3]]
        shown = "; ".join(reasons)
        return shown if len(ranked) <= 3 else f"{shown}; and {len(ranked) - 3} more pools"

    def take(self, req: Request, got: GangFit, why: str, snap: Snapshot) -> None:
        alloc = Allocation(req, got.pool, got.chips, got.hosts, self.now, reservation=got.reservation)
        snap.take(alloc)
        self._admitted.append(alloc)
        self.candidates.admitted(alloc)
        reason = f"{why}; {got.pool} had {got.free} free chips, took {got.chips}"
        borrowed = 0
        if got.reservation is not None:
            reason += f" inside reservation {got.reservation}"
        else:
            borrowed = min(snap.borrowed(req.queue, got.pool), got.chips)
            if borrowed:
                cohort = snap.quota.cohort_of(req.queue)
                reason += f", borrowing {borrowed} beyond queue {req.queue}'s quota from cohort {cohort}"
        admission = Admission(req.run, got.pool, got.chips, reason, got.hosts, borrowed, got.reservation, req.part)
        self.result.admitted.append(admission)

    def preempt_for(self, req: Request, snap: Snapshot, ranked: Ranked) -> str | bool | None:
        """Preempt for `req` if some victims make room; the reason it stays blocked meanwhile, or True when
        taking back runs this cycle admitted was enough and `req` was admitted in their place."""
        waiting = [r for r in self.nominated.get(req.run, ()) if r in self.cache.allocs]
        if waiting:
            return f"waiting for {len(waiting)} preempted run(s) to stop: {', '.join(sorted(waiting))}"
        grace, cache = self.config.grace_s, self.cache
        for pool_state, kind in ranked:
            name = pool_state.name
            pool = snap.pool(name)
            if pool.drained:
                continue
            lenders = could_reclaim(snap, req, name)
            if not (lenders or cache.has_lower(req.queue, name, req.rank) or self.candidates.lower(req, name)):
                continue

            def fits(name: str = name) -> bool:
                return fit(snap, req, snap.pool(name), grace) is not None

            chosen = victims(snap, self.candidates, req, pool, fits, lenders=lenders)
            if chosen:
                for victim in chosen:
                    if victim.fresh:
                        self.take_back(victim.alloc, req, snap)
                running = [v for v in chosen if not v.fresh]
                if running:
                    return self.evict(req, running)
                got = fit(snap, req, snap.pool(name), grace)
                if got is not None:
                    self.take(req, got, self.placement.reason(req, kind), snap)
                    return True
        return None

    def take_back(self, alloc: Allocation, req: Request, snap: Snapshot) -> None:
        """Undo this cycle's admission of `alloc` so `req` can have its chips: it has not started, so it queues
        again (and competes again in this cycle) instead of starting now and being preempted at the next pass."""
        snap.release(alloc)
        self._admitted.remove(alloc)
        self.candidates.taken_back(alloc)
        run = alloc.run
        self.result.admitted = [a for a in self.result.admitted if a.run != run]
        self.queues.submit(alloc.request)
        self._returned.append(alloc.queue)
        why = "outranks it in queue " + alloc.queue if alloc.queue == req.queue else "reclaims its queue's quota"
        self.result.blocked[run] = f"gave way on {alloc.pool} to {req.run}, which {why}"

    def evict(self, req: Request, chosen: list[Victim]) -> str:
        cohort = self.cache.quota.cohort_of(req.queue)
        for victim in chosen:
            self.preempt(victim.alloc, victim.reason(req, self.now, cohort), req.run)
        self.nominated[req.run] = {v.alloc.run for v in chosen}
        runs = ", ".join(v.alloc.run for v in chosen)
        return f"preempting {runs} to make room; admitted once they stop (grace {self.config.grace_s:.0f}s)"

    # --- 7. grow -------------------------------------------------------------------------------

    def grow(self) -> None:
        snap = Snapshot(self.cache, self.now)
        grace = self.config.grace_s
        for name, runs in self.cache.elastic.items():
            pool = snap.pool(name)
            if name in self.contended or pool.drained or not runs or pool.free_chips == 0:
                continue
            for run in sorted(runs):
                alloc = self.cache.allocs[run]
                if alloc.evicting or alloc.chips >= alloc.request.high:
                    continue
                mark = snap.mark()
                snap.release(alloc)
                bigger = replace(alloc.request, chips=alloc.request.high, min_chips=alloc.chips + 1)
                got = fit(snap, bigger, snap.pool(name), grace)
                if got is not None:
                    snap.take(Allocation(bigger, name, got.chips, got.hosts, self.now, reservation=got.reservation))
                    snap.keep()
                    why = f"{name} has {got.free} free chips and no run waiting for them"
                    self.result.grown.append(Growth(run, name, alloc.chips, got.chips, why))
                else:
                    snap.restore(mark)
