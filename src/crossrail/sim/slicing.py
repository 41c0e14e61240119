"""Time-sliced rounds in bulk: each round's swaps applied as one step, not as stops and starts through events.

Under Gavel's round-based policies most chips change hands every round; through the simulated executor each
change is an attempt's end, a retry decision, requeueing, a launch and four events. Where a swap costs
nothing (no failure model, free checkpoints and restores, every pool time-sliced, quotas that cover every
pool, a preempted run requeued at once by the shared retry decision: `why_not_bulk`), it changes only the
run's kept work and its bookkeeping, so `SlicedRounds` applies a round as one step over its running stints:
the runs the plan moves or leaves out give back their chips with the work done so far, the runs it places
start with theirs, and only arrivals and completions stay events. A round is a few numpy steps over the
runs it swaps: each run's record is kept as columns until it finishes or the simulation settles, and the
metrics fold the swaps through a `SwapBook` (`metrics/swaps.py`). The run records and the metrics get
exactly what the stops and starts would have given them, every sum taken in the same order
(tests/unit/sim/test_slicing.py compares every figure); the plan is the same `ledger.plan`.
"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from crossrail.core.attempts import EndReason
from crossrail.scheduling.decisions import decide_end
from crossrail.scheduling.policies import PoolView
from crossrail.sim.engine import Timer
from crossrail.sim.fit import hosts_of
from crossrail.sim.records import RunRecord
from crossrail.sim.workload import SimJob

if TYPE_CHECKING:
    from crossrail.sim.policy_driver import PolicyDriver
    from crossrail.sim.simulation import Simulation


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
    """The running stints of a time-sliced simulation, as columns, and the round boundary applied to all of them.

    Each job the rounds ever start gets a row; a row's columns hold what its run record, the simulation's
    per-run tallies (work kept, attempts), the driver's service by chip type and its running stint would hold,
    and only go back to those records at a finish or when the simulation settles (`settle`). `live` is the
    rows with a stint, in the order the stints started: the order the executor's attempts would be credited
    and stopped in, and so the order every sum over them is taken in.
    """

    def __init__(self, sim: Simulation, driver: PolicyDriver) -> None:
        self.sim = sim
        self.driver = driver
        pools = list(sim.fleet.pools)
        self.pools = pools
        self.pool_index = {p.name: i for i, p in enumerate(pools)}
        self.types = sorted({p.chip_type for p in pools})
        self.type_of = np.array([self.types.index(p.chip_type) for p in pools], dtype=np.int64)
        self.capacity = np.array([p.chips for p in pools], dtype=np.int64)
        self.book = sim.metrics.swap_book([(p.name, p.cost_per_chip_hour) for p in pools])
        self.names: list[str] = []
        self.row_of: dict[str, int] = {}
        self.jobs: list[SimJob] = []
        self.records: list[RunRecord] = []
        n, n_pools, n_types = 0, len(pools), len(self.types)
        self.chips = np.zeros(n, dtype=np.int64)
        self.work_s = np.zeros(n)
        self.full_rate = np.zeros((n, n_pools))
        self.rate = np.zeros((n, n_pools))
        """Row x pool -> the run's rate there with all its hosts (as the executor's attempt would run)."""
        self.committed = np.zeros(n)
        self.attempts = np.zeros(n, dtype=np.int64)
        self.useful_before = np.zeros(n)
        self.checkpoints = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.allocated_chip_s = np.zeros(n)
        self.useful_s = np.zeros(n)
        self.useful_chip_s = np.zeros(n)
        self.attained = np.zeros((n, n_types))
        self.ran_on = np.zeros((n, n_types), dtype=bool)
        self.credited = np.zeros(n)
        """Row -> until when the ledger has been told of its running stint (NaN: not since it started)."""
        self.pool = np.zeros(n, dtype=np.int64)
        self.started_at = np.zeros(n)
        self.start_work = np.zeros(n)
        self.finish_at = np.zeros(n)
        self.live = np.zeros(0, dtype=np.int64)
        self.timers: dict[int, Timer] = {}
        """Row -> the timer of its stint's finish, set once the finish falls by the next boundary."""
        self.planned = np.zeros(n, dtype=np.int64)

    # --- the round --------------------------------------------------------------------------------

    def used(self) -> np.ndarray:
        """Pool -> chips its stints hold."""
        live = self.live
        return np.bincount(self.pool[live], weights=self.chips[live], minlength=len(self.pools)).astype(np.int64)

    def round(self, now: float, next_s: float) -> None:
        """The round at `now`: the ledger is told of the time every stint ran since it was last told, plans the
        round, and the plan is applied (next boundary at `next_s`)."""
        ledger = self.driver.ledger
        assert ledger is not None
        live = self.live
        if len(live):
            credited, started = self.credited[live], self.started_at[live]
            since = np.where(np.isnan(credited), started, np.maximum(started, credited))
            names = self.names
            runs = [names[r] for r in live.tolist()]
            kinds = [self.types[t] for t in self.type_of[self.pool[live]].tolist()]
            ledger.ran_each(runs, kinds, (now - since).tolist())
            self.credited[live] = now
        free = self.capacity - self.used()
        views = [PoolView(p.name, p.chip_type, p.chips, int(free[i])) for i, p in enumerate(self.pools)]
        pool_names = [p.name for p in self.pools]
        names = self.names
        running = {names[r]: pool_names[i] for r, i in zip(live.tolist(), self.pool[live].tolist(), strict=True)}
        plan = ledger.plan(now, views, running)
        self.boundary(now, plan, next_s)

    def boundary(self, now: float, plan: dict[str, str], next_s: float) -> None:
        """Apply the round's plan: runs it moves or leaves out give back their chips, then runs it places start.

        Most stints end at a boundary, not by finishing, so a stint's finish becomes a timer only once it falls
        by the next boundary (`next_s`), at the instant the executor's timer would have fired.
        """
        known = self.row_of.get
        rows = [known(run) for run in plan]
        if None in rows:
            rows = [self._new_row(run) if row is None else row for run, row in zip(plan, rows, strict=True)]
        where = [self.pool_index[pool] for pool in plan.values()]
        rows_a, where_a = np.array(rows, dtype=np.int64), np.array(where, dtype=np.int64)
        planned = self.planned
        planned[rows_a] = where_a
        live = self.live
        stays = planned[live] == self.pool[live]
        planned[rows_a] = -1
        if not stays.all():
            self._swap_out(live[~stays], now)
            live = self.live = live[stays]
        staying = np.zeros(len(self.names), dtype=bool)
        staying[live] = True
        begin = ~staying[rows_a]
        self._start(rows_a[begin], where_a[begin], now)
        engine, timers = self.sim.engine, self.timers
        live = self.live
        due = live[self.finish_at[live] <= next_s]
        for row in due.tolist():
            if row not in timers:
                timers[row] = engine.schedule(float(self.finish_at[row]), partial(self._finish, row))

    def _start(self, rows: np.ndarray, pools: np.ndarray, now: float) -> None:
        """Each row in turn takes its gang of its pool now (its chips are free: the plan fits every pool)."""
        if not len(rows):
            return
        sim, names = self.sim, self.names
        waiting = sim.waiting
        for row in rows.tolist():
            del waiting[names[row]]
        fresh = rows[self.attempts[rows] == 0]
        for row in fresh.tolist():
            rec = self.records[row]
            if rec.first_start_s is None:
                rec.first_start_s, rec.queue_s = now, now - rec.submit_s
        self.attempts[rows] += 1
        self.book.began(rows, pools, now)
        self.useful_before[rows] = self.useful_chip_s[rows]
        rate = self.rate[rows, pools]
        work = self.committed[rows]
        left = self.work_s[rows] - work
        with np.errstate(divide="ignore", invalid="ignore"):
            finish = np.where(left <= 0, 0.0, np.where(rate <= 0, np.inf, left / rate))
        self.pool[rows] = pools
        self.started_at[rows] = now
        self.start_work[rows] = work
        self.finish_at[rows] = now + finish
        self.credited[rows] = np.nan
        self.live = np.concatenate([self.live, rows])

    def _swap_out(self, rows: np.ndarray, now: float) -> None:
        """The rows' runs leave their chips at the boundary, checkpointing (freely) all they did, and wait:
        as a preemption's bookkeeping, each sum taken in the order the stints started."""
        for row in rows.tolist():
            timer = self.timers.pop(row, None)
            if timer is not None:
                timer.cancel()
        self.checkpoints[rows] += 1  # the final checkpoint, as a preempted attempt writes one
        done = self.start_work[rows] + (now - self.started_at[rows]) * self.rate[rows, self.pool[rows]]
        self._close(rows, now, np.minimum(done, self.work_s[rows]))
        self.preemptions[rows] += 1
        useful = self.useful_chip_s[rows] - self.useful_before[rows]
        self.book.left(rows, now, useful)
        names = self.names
        self.sim.waiting.update(dict.fromkeys([names[r] for r in rows.tolist()], now))

    def _close(self, rows: np.ndarray, now: float, kept: np.ndarray) -> None:
        """The rows' stints give back their chips with `kept` work kept (the run records' and the driver's
        tallies, as the executor's attempt's end)."""
        pools, chips = self.pool[rows], self.chips[rows]
        ran = now - self.started_at[rows]
        self.allocated_chip_s[rows] += chips * ran
        useful_s = np.maximum(kept - self.start_work[rows], 0.0) / self.full_rate[rows, pools]
        self.useful_s[rows] += useful_s
        self.useful_chip_s[rows] += useful_s * chips
        self.committed[rows] = kept
        types = self.type_of[pools]
        self.attained[rows, types] += chips * ran
        self.ran_on[rows, types] = True
        self.credited[rows] = np.nan

    def _finish(self, row: int) -> None:
        """The row's stint did all its work: it ends, and the run succeeds."""
        sim, now = self.sim, self.sim.engine.now()
        del self.timers[row]
        run, job, rows = self.names[row], self.jobs[row], np.array([row])
        credited = float(self.credited[row])
        since = float(self.started_at[row]) if math.isnan(credited) else max(float(self.started_at[row]), credited)
        ledger = self.driver.ledger
        if ledger is not None:
            if since != now:  # else credited at this instant already (a round boundary)
                ledger.ran(run, self.types[int(self.type_of[self.pool[row]])], now - since)
            ledger.leave(run)
        self._close(rows, now, np.array([job.work_s]))
        self.live = self.live[self.live != row]
        self._write(row)
        useful = float(self.useful_chip_s[row] - self.useful_before[row])
        sim.succeeded(run, int(self.attempts[row]), self.pools[int(self.pool[row])].name, useful)

    # --- rows -------------------------------------------------------------------------------------

    def _new_row(self, run: str) -> int:
        sim = self.sim
        job, rec = sim.jobs[run], sim.runs[run]
        row = self.row_of[run] = len(self.names)
        if row >= len(self.chips):
            self._grow(max(64, 2 * len(self.chips)))
        self.names.append(run)
        self.jobs.append(job)
        self.records.append(rec)
        self.chips[row], self.work_s[row] = job.chips, job.work_s
        for i, pool in enumerate(self.pools):
            hosts = hosts_of(job.chips, pool.chips_per_host)
            full_rate = job.rate(pool.chip_type, pool.relative_speed) * job.chips / job.chips
            self.full_rate[row, i], self.rate[row, i] = full_rate, full_rate * hosts / hosts  # as Attempt.rate
        self.committed[row] = sim.committed.get(run, 0.0)
        self.attempts[row] = sim.attempts.get(run, 0)
        self.checkpoints[row], self.preemptions[row] = rec.checkpoints, rec.preemptions
        self.allocated_chip_s[row] = rec.allocated_chip_s
        self.useful_s[row], self.useful_chip_s[row] = rec.useful_s, rec.useful_chip_s
        self.credited[row] = np.nan
        self.book.hold([row], [run])
        return row

    def _write(self, row: int) -> None:
        """The row's columns back into its run record and the simulation's per-run tallies."""
        rec, run, sim = self.records[row], self.names[row], self.sim
        rec.attempts = int(self.attempts[row])
        rec.checkpoints, rec.preemptions = int(self.checkpoints[row]), int(self.preemptions[row])
        rec.allocated_chip_s = float(self.allocated_chip_s[row])
        rec.useful_s, rec.useful_chip_s = float(self.useful_s[row]), float(self.useful_chip_s[row])
        if rec.attempts:
            rec.pool = self.pools[int(self.pool[row])].name
        sim.committed[run] = float(self.committed[row])
        sim.attempts[run] = rec.attempts
        attained = self.driver.attained.setdefault(run, {})
        for t in np.flatnonzero(self.ran_on[row]).tolist():
            attained[self.types[t]] = float(self.attained[row, t])

    def settle(self) -> None:
        """Every row's columns back into the records (run records, tallies, the driver's, the metrics')."""
        live = set(self.live.tolist())
        sim, driver = self.sim, self.driver
        for row in range(len(self.names)):
            self._write(row)
            rec, run = self.records[row], self.names[row]
            if row in live:
                rec.outcome = "running"
                sim.useful_before[run] = float(self.useful_before[row])
                credited = float(self.credited[row])
                if not math.isnan(credited):
                    driver.credited[run] = credited
            elif rec.outcome != "succeeded":
                rec.outcome = "pending"
        self.book.release_all()

    def _grow(self, extra: int) -> None:
        for name in (
            "chips", "work_s", "committed", "attempts", "useful_before", "checkpoints", "preemptions",
            "allocated_chip_s", "useful_s", "useful_chip_s", "credited", "pool", "started_at", "start_work",
            "finish_at",
        ):  # fmt: skip
            column = getattr(self, name)
            setattr(self, name, np.concatenate([column, np.zeros(extra, dtype=column.dtype)]))
        for name in ("full_rate", "rate", "attained", "ran_on"):
            table = getattr(self, name)
            setattr(self, name, np.vstack([table, np.zeros((extra, table.shape[1]), dtype=table.dtype)]))
        self.planned = np.concatenate([self.planned, np.full(extra, -1, dtype=np.int64)])
