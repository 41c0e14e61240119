"""Policies other than the scheduling core's own order: admission by `order`, or Gavel-style rounds.

An ordering policy (`round_based` false) is asked, whenever capacity or demand changes, for the pending
jobs in order with the pool each wants; each job starts on that pool (or the cheapest per unit of work
that can run it) when its gang fits now, else the next is tried. A round-based policy is asked every
`round_s` for the allocation of the next round: running jobs it moves or drops stop at the boundary
(checkpointing first, so a move costs a checkpoint and a restore), and the jobs it picks start as soon as
their chips are free. Either way the scheduler books every allocation (`Scheduler.started`/`finished`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from crossrail.scheduling.policies import ROUND_S, JobView, Policy, PoolView, level_of
from crossrail.scheduling.policies.ledger import Ledgered, RoundLedger
from crossrail.scheduling.pool import NO_PINS
from crossrail.sim.engine import LATE, Timer
from crossrail.sim.slicing import SlicedRounds, why_not_bulk

if TYPE_CHECKING:
    from crossrail.sim.simulation import Simulation


class PolicyDriver:
    def __init__(self, sim: Simulation, policy: Policy, round_s: float | None) -> None:
        self.sim = sim
        self.policy = policy
        self.round_based = policy.round_based
        self.round_s = round_s or sim.fleet.spec.scheduling.round_s or ROUND_S
        marked = {p.name for p in sim.fleet.pools if p.time_sliced}
        self.sliced = marked or {p.name for p in sim.fleet.pools}
        """Pools whose runs a round may stop: those the fleet marks time-sliced, or every pool when it marks none."""
        self.plan: dict[str, str] = {}
        self.attained: dict[str, dict[str, float]] = {}
        self._round: Timer | None = None
        self._began = 0.0
        """When the current round began."""
        self._woken: Timer | None = None
        pools = sim.fleet.pools
        self.by_cost = sorted(pools, key=lambda p: (p.cost_per_chip_hour / p.relative_speed, p.name))
        self.speeds: dict[str, float] = {}
        for p in pools:
            self.speeds[p.chip_type] = max(self.speeds.get(p.chip_type, 0.0), p.relative_speed)
        self.ledger: RoundLedger | None = policy.ledger(self.round_s) if isinstance(policy, Ledgered) else None
        """Gavel's round state, told of arrivals, ends and time run as they happen (no views per round)."""
        self.credited: dict[str, float] = {}
        """Run -> until when its running attempt's time has been credited to the ledger."""
        self.slices = SlicedRounds(sim, self) if why_not_bulk(sim, self) is None else None
        """The rounds' swaps applied in bulk, where a swap costs nothing but bookkeeping (None: through the
        executor, one stop and start at a time)."""

    # --- views -----------------------------------------------------------------------------------

    def views(self, *, running: bool) -> list[JobView]:
        sim, now = self.sim, self.sim.engine.now()
        out = [self._view(run, None, now) for run in sim.waiting]
        if running:
            out += [self._view(run, att.pool, now) for run, att in sim.executor.live.items()]
        return out

    def _view(self, run: str, pool: str | None, now: float) -> JobView:
        sim = self.sim
        job, rec = sim.jobs[run], sim.runs[run]
        by_type = dict(self.attained.get(run, {}))
        att = sim.executor.live.get(run)
        done = sim.committed.get(run, 0.0)
        if att is not None:
            chip_type = sim.pools[att.pool].chip_type
            by_type[chip_type] = by_type.get(chip_type, 0.0) + att.chips * (now - att.started_at)
            if self.policy.uses_remaining:
                done = sim.executor.progress(att, now)
        throughput = job.throughput or self._speeds()
        return JobView(
            run=run,
            queue=sim.queue_of[run],
            priority=level_of(job.priority),
            submitted_at=rec.submit_s,
            chips=job.chips,
            attained_s=sum(by_type.values()),
            throughput=throughput,
            remaining=max(job.work_s - done, 0.0) if self.policy.uses_remaining else None,
            pool=pool,
            attained_by_type=by_type,
        )

    def _speeds(self) -> dict[str, float]:
        """A job without a throughput row runs at each pool's relative speed; uniform speeds say nothing."""
        return self.speeds if len(set(self.speeds.values())) > 1 else {}

    def pool_views(self) -> list[PoolView]:
        sched = self.sim.sched
        return [
            PoolView(p.name, p.chip_type, 0 if p.drained else p.chips, sched.cache.pools[p.name].free_chips)
            for p in self.sim.fleet.pools
        ]

    def joined(self, run: str) -> None:
        """A job arrived (a retry of one already known is not an arrival)."""
        if self.ledger is not None:
            self.ledger.join(self._view(run, None, self.sim.engine.now()))

    def ended(self, run: str, chip_type: str, chips: int, started_at: float, now: float, *, finished: bool) -> None:
        """`run`'s attempt on `chips` of `chip_type` since `started_at` ended at `now` (`finished`: it succeeded)."""
        mine = self.attained.setdefault(run, {})
        mine[chip_type] = mine.get(chip_type, 0.0) + chips * (now - started_at)
        if self.ledger is not None:
            if self.credited.get(run) != now:  # else credited at this instant already (a round boundary)
                self._credit(run, chip_type, started_at, now)
            del self.credited[run]
            if finished:
                self.ledger.leave(run)

    def _credit(self, run: str, chip_type: str, started_at: float, now: float) -> None:
        """The ledger learns the time `run`'s attempt ran since it was last told."""
        assert self.ledger is not None
        since = max(started_at, self.credited.get(run, started_at))
        self.ledger.ran(run, chip_type, now - since)
        self.credited[run] = now

    # --- ordering policies -----------------------------------------------------------------------

    def order_cycle(self) -> None:
        sim = self.sim
        if not sim.waiting:
            return
        ordered = self.policy.order(self.views(running=False), self.pool_views(), sim.engine.now())
        for view, wanted in ordered:
            job = sim.jobs[view.run]
            choices = [sim.pools[wanted]] if wanted in sim.pools else self.by_cost
            for pool in choices:
                runs = job.runs_on(str(pool.accelerator)) and job.rate(pool.chip_type, pool.relative_speed) > 0
                if runs and self.fits(pool.name, job.chips, view.queue):
                    sim.launch(job.name, pool.name, job.chips)
                    break

    def fits(self, pool: str, chips: int, queue: str) -> bool:
        """Whether the gang fits whole hosts of `pool` now and its queue's quota (with borrowing) allows it.

        Policies only order and allocate; quotas are never overridden, so a job its queue cannot afford
        waits, as it would in the live agent.
        """
        cache = self.sim.sched.cache
        state = cache.pools[pool]
        if state.drained or chips > state.capacity or state.find(chips, NO_PINS) is None:
            return False
        return cache.quota.headroom(cache.used, cache.excess, queue, pool) >= chips

    # --- round-based policies --------------------------------------------------------------------

    def wake(self) -> None:
        """Demand or capacity changed: once this instant's events are done, start planned jobs whose chips
        are free and begin rounds if idle (one look per instant, however many jobs stopped in it).

        As in Gavel, chips a job leaves mid-round wait for the next boundary: the round's plan stands.
        """
        if self._woken is None:
            self._woken = self.sim.engine.after(0.0, self._look, LATE)

    def _bulk(self) -> SlicedRounds | None:
        """The bulk rounds, while the ledger they plan with is there (a caller may take it away to plan from
        views every round, as the agent does)."""
        return self.slices if self.ledger is not None else None

    def waiting(self) -> bool:
        """Whether any run waits to run: in the simulation's queue, or stopped by the bulk rounds."""
        return bool(self.sim.waiting) or (self.slices is not None and self.slices.waiting() > 0)

    def running(self) -> bool:
        """Whether any run holds chips now."""
        return bool(self.sim.executor.live) or (self.slices is not None and len(self.slices.live) > 0)

    def _look(self) -> None:
        self._woken = None
        if self._bulk() is None:
            self.start_planned()
        sim = self.sim
        if self._round is not None and not self.running() and not self.plan and sim.engine.now() > self._began:
            # As in Gavel's simulator, a round ends when the last job running in it ends its time slice.
            self._round.cancel()
            self._round = None
        if self._round is None and (self.waiting() or self.running()):
            self._round = sim.engine.after(0.0, self.next_round, LATE)

    def next_round(self) -> None:
        sim = self.sim
        self._round = None
        sim.cycles += 1
        now = self._began = sim.engine.now()
        slices = self._bulk()
        if slices is not None:
            self._bulk_round(slices, now)
            return
        if self.ledger is not None:
            for att in sim.executor.live.values():
                self._credit(att.job.name, sim.pools[att.pool].chip_type, att.started_at, now)
            running = {run: att.pool for run, att in sim.executor.live.items()}
            plan = self.ledger.plan(now, self.pool_views(), running)
        else:
            plan = self.policy.allocate(self.views(running=True), self.pool_views(), now, self.round_s)
        for run, att in list(sim.executor.live.items()):
            if plan.get(run) != att.pool and att.pool in self.sliced:
                sim.executor.preempt(run, math.inf)
        live = sim.executor.live
        self.plan = {run: pool for run, pool in plan.items() if run not in live or live[run].pool != pool}
        self.start_planned()
        if sim.waiting or sim.executor.live:
            self._round = sim.engine.after(self.round_s, self.next_round, LATE)

    def _bulk_round(self, slices: SlicedRounds, now: float) -> None:
        """The round as one step (`sim/slicing.py`): the same credit and plan, the swaps applied together."""
        next_s = now + max(self.round_s, 0.0)
        slices.round(now, next_s)
        if self.waiting() or len(slices.live):
            self._round = self.sim.engine.schedule(next_s, self.next_round, LATE)

    def settle(self) -> None:
        """Bring the run records and the metrics up to date with the bulk rounds' own state (before a result)."""
        if self.slices is not None:
            self.slices.settle()

    def start_planned(self) -> None:
        sim = self.sim
        for run, pool in list(self.plan.items()):
            if run in sim.executor.live:
                continue  # still stopping where it ran; it starts on its new pool once stopped
            if run not in sim.waiting:
                del self.plan[run]
            elif self.fits(pool, sim.jobs[run].chips, sim.queue_of[run]):
                del self.plan[run]
                sim.launch(run, pool, sim.jobs[run].chips)
