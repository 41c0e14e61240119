"""Time-sliced rounds in bulk: each round's swaps applied as one step, not as stops and starts through events.

Under Gavel's round-based policies most chips change hands every round; through the simulated executor each
change is an attempt's end, a retry decision, requeueing, a launch and four events. Where a swap costs
nothing (no failure model, free checkpoints and restores, every pool time-sliced, quotas that cover every
pool, a preempted run requeued at once by the shared retry decision: `why_not_bulk`), it changes only the
run's kept work and its bookkeeping, so `SlicedRounds` applies a round as one step over its running stints:
the runs the plan moves or leaves out give back their chips with the work done so far, the runs it places
start with theirs, and only arrivals and completions stay events. The run records and the metrics get
exactly what the stops and starts would have given them (`MetricsAccumulator.swapped_out` / `swapped_in`;
tests/unit/sim/test_slicing.py compares every figure); the plan is the same `ledger.plan`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from crossrail.core.attempts import EndReason
from crossrail.scheduling.decisions import decide_end
from crossrail.sim.engine import Timer
from crossrail.sim.fit import hosts_of
from crossrail.sim.records import RunRecord
from crossrail.sim.workload import SimJob

if TYPE_CHECKING:
    from crossrail.sim.policy_driver import PolicyDriver
    from crossrail.sim.simulation import Simulation


@dataclass(slots=True)
class Stint:
    """A run holding chips of one pool since `started_at`, from `start_work` of work at `rate` work/s."""

    job: SimJob
    record: RunRecord
    pool: str
    chip_type: str
    chips: int
    number: int
    started_at: float
    start_work: float
    full_rate: float
    rate: float
    finish_at: float
    timer: Timer | None = None


def why_not_bulk(sim: Simulation, driver: PolicyDriver) -> str | None:
    """Why the rounds of this simulation must go through the executor one stop and start at a time (None:
    they may go in bulk)."""
    retry = decide_end(EndReason.PREEMPTED, "", pool="", retries=sim.retries.policy, history=[], now=0.0)
    jobs = sim.stream.shapes() if sim.stream is not None else list(sim.jobs.values())
    reasons = {
        "the policy keeps no round ledger": driver.ledger is None,
        "the event log is recorded": sim.events is not None,
        "failures are modelled": sim.failures is not None,
        "checkpoints or restores cost time": sim.checkpoint.delta_s > 0 or sim.checkpoint.restore_s > 0,
        "some pools are not time-sliced": driver.sliced != set(sim.pools),
        "some pools are drained or reserved": any(p.drained for p in sim.fleet.pools)
        or bool(sim.fleet.spec.reservations),
        "a queue's quota could keep a planned run waiting": any(
            q.cohort is not None or any(q.nominal.get(p.name, 0) < p.chips for p in sim.fleet.pools)
            for q in sim.sched.cache.quota.queues.values()
        ),
        "a preempted run does not go again at once": not retry.retry or retry.backoff_s > 0,
        "jobs report quality curves": any(j.quality is not None for j in jobs),
    }
    return next((why for why, holds in reasons.items() if holds), None)


class SlicedRounds:
    """The running stints of a time-sliced simulation and the round boundary applied to all of them at once."""

    def __init__(self, sim: Simulation, driver: PolicyDriver) -> None:
        self.sim = sim
        self.driver = driver
        self.live: dict[str, Stint] = {}
        """Run -> its stint, in the order they started (the order the ledger is credited in, as the executor's)."""
        self.speed: dict[tuple[str, str], tuple[float, float]] = {}
        """(run, pool) -> (full rate, rate with every host up), as the executor's attempt there would run."""

    def used(self) -> dict[str, int]:
        """Pool -> chips its stints hold."""
        out: dict[str, int] = {}
        for st in self.live.values():
            out[st.pool] = out.get(st.pool, 0) + st.chips
        return out

    def boundary(self, now: float, plan: dict[str, str], next_s: float) -> None:
        """Apply the round's plan: runs it moves or leaves out give back their chips, then runs it places start.

        Most stints end at a boundary, not by finishing, so a stint's finish becomes a timer only once it falls
        by the next boundary (`next_s`), at the instant the executor's timer would have fired.
        """
        leaving = [st for run, st in self.live.items() if plan.get(run) != st.pool]
        if leaving:
            self._swap_out(leaving, now)
        waiting = self.sim.waiting
        self.start([(run, pool) for run, pool in plan.items() if run in waiting], now)
        engine = self.sim.engine
        for st in self.live.values():
            if st.timer is None and st.finish_at <= next_s:
                st.timer = engine.schedule(st.finish_at, partial(self._finish, st))

    def start(self, starting: list[tuple[str, str]], now: float) -> None:
        """Each (run, pool) of `starting` in turn takes its gang of the pool now (its chips are free: the plan
        fits every pool's capacity); one loop over them, as most of a long run's time goes to these swaps."""
        sim, live, speeds = self.sim, self.live, self.speed
        jobs, runs, pools, waiting, attempts = sim.jobs, sim.runs, sim.pools, sim.waiting, sim.attempts
        useful_before, committed = sim.useful_before, sim.committed
        swapped_in = sim.metrics.swapped_in
        for run, pool_name in starting:
            job, rec, pool = jobs[run], runs[run], pools[pool_name]
            del waiting[run]
            number = attempts[run] = attempts.get(run, 0) + 1
            chips = job.chips
            swapped_in(run, now, number, pool=pool_name, chips=chips, price=pool.cost_per_chip_hour)
            if rec.first_start_s is None:
                rec.first_start_s, rec.queue_s = now, now - rec.submit_s
            rec.attempts, rec.pool, rec.outcome = number, pool_name, "running"
            useful_before[run] = rec.useful_chip_s
            speed = speeds.get((run, pool_name))
            if speed is None:
                hosts = hosts_of(chips, pool.chips_per_host)
                full_rate = job.rate(pool.chip_type, pool.relative_speed) * chips / job.chips
                speed = speeds[run, pool_name] = (full_rate, full_rate * hosts / hosts)  # as Attempt.rate
            full_rate, rate = speed
            work = committed.get(run, 0.0)
            left = job.work_s - work
            finish = 0.0 if left <= 0 else (math.inf if rate <= 0 else left / rate)
            st = Stint(job, rec, pool_name, pool.chip_type, chips, number, now, work, full_rate, rate, now + finish)
            live[run] = st

    def _close(self, st: Stint, now: float, kept: float, *, finished: bool) -> float:
        """Give back the stint's chips with `kept` work kept; returns the useful chip-seconds it added."""
        if st.timer is not None:
            st.timer.cancel()
        rec, run = st.record, st.job.name
        rec.allocated_chip_s += st.chips * (now - st.started_at)
        useful_s = max(kept - st.start_work, 0.0) / st.full_rate
        rec.useful_s += useful_s
        rec.useful_chip_s += useful_s * st.chips
        del self.live[run]
        sim = self.sim
        sim.committed[run] = kept
        self.driver.ended(run, st.chip_type, st.chips, st.started_at, now, finished=finished)
        return rec.useful_chip_s - sim.useful_before.pop(run, 0.0)

    def _swap_out(self, leaving: list[Stint], now: float) -> None:
        """The stints' runs leave their chips at the boundary, checkpointing (freely) all they did, and wait.

        Each as `_close` then the preemption's bookkeeping, written out in one loop (most of a long run's
        time goes to these swaps): the same sums, taken in the same order."""
        sim, live, driver = self.sim, self.live, self.driver
        committed, useful_before, waiting = sim.committed, sim.useful_before, sim.waiting
        swapped_out = sim.metrics.swapped_out
        for st in leaving:
            if st.timer is not None:
                st.timer.cancel()
            rec, run, job = st.record, st.job.name, st.job
            kept = min(st.start_work + (now - st.started_at) * st.rate, job.work_s)
            rec.checkpoints += 1  # the final checkpoint, as a preempted attempt writes one
            rec.allocated_chip_s += st.chips * (now - st.started_at)
            useful_s = max(kept - st.start_work, 0.0) / st.full_rate
            rec.useful_s += useful_s
            rec.useful_chip_s += useful_s * st.chips
            del live[run]
            committed[run] = kept
            driver.ended(run, st.chip_type, st.chips, st.started_at, now, finished=False)
            rec.preemptions += 1
            rec.outcome = "pending"
            swapped_out(run, now, st.number, rec.useful_chip_s - useful_before.pop(run, 0.0))
            waiting[run] = now

    def settle(self) -> None:
        """Write what the bulk rounds keep to themselves into the run records and the metrics (nothing yet)."""

    def _finish(self, st: Stint) -> None:
        now = self.sim.engine.now()
        st.timer = None
        useful = self._close(st, now, st.job.work_s, finished=True)
        self.sim.succeeded(st.job.name, st.number, st.pool, useful)
