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
from crossrail.metrics.swaps import SwapBook
from crossrail.scheduling.decisions import decide_end
from crossrail.scheduling.policies import PoolView
from crossrail.sim.engine import Timer
from crossrail.sim.fit import hosts_of
from crossrail.sim.records import RunRecord

if TYPE_CHECKING:
    from crossrail.scheduling.policies.ledger import RoundLedger
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
        "gangs of several chips share hosts with other gangs": any(
            _fragments(p.chips, p.chips_per_host, {j.chips for j in jobs}) for p in sim.fleet.pools
        ),
    }
    return next((why for why, holds in reasons.items() if holds), None)


# The columns of a row's record (`SlicedRounds.runs`): what its run record and the simulation's per-run
# tallies hold, taken and put back whole by the rows a round swaps.
COMMITTED, WORK, CHIPS, ALLOCATED, USEFUL_S, USEFUL_CHIP_S, USEFUL_BEFORE = range(7)
# The columns of a running stint (`SlicedRounds.stints`, one row per stint in the order they started).
STARTED, START_WORK, RATE, FULL_RATE, FINISH, CREDITED, GANG = range(7)


def _fragments(chips: int, per_host: int, gangs: set[int]) -> bool:
    """Whether gangs of these sizes can leave a pool's free chips split over its hosts so that a gang that
    fits its free chips finds no hosts for it. The executor packs gangs onto free hosts, while in bulk a
    pool's free chips are one number: that holds for one host, hosts of one chip, gangs of one chip, or gangs
    of whole hosts."""
    return chips > per_host > 1 and gangs != {1} and any(g % per_host for g in gangs)


class SlicedRounds:
    """The running stints of a time-sliced simulation, as columns, and the round boundary applied to all of them.

    Each job the rounds ever start gets a row of `runs`; its columns hold what its run record and the
    simulation's per-run tallies (work kept, attempts) would hold, and go back to those records only at its
    finish or when the simulation settles (`settle`). `stints` holds the running stints, one row each in the
    order they started (`live` names their rows, `on` their pools): the order the executor's attempts would
    be credited and stopped in, and so the order every sum over them is taken in.
    """

    def __init__(self, sim: Simulation, driver: PolicyDriver) -> None:
        self.sim = sim
        self.driver = driver
        pools = list(sim.fleet.pools)
        self.pools = pools
        self.pool_names = [p.name for p in pools]
        self.pool_index = {p.name: i for i, p in enumerate(pools)}
        self.capacity = np.array([p.chips for p in pools], dtype=np.int64)
        self.book = SwapBook(sim.metrics, [(p.name, p.cost_per_chip_hour) for p in pools])
        self.names: list[str] = []
        self.records: list[RunRecord] = []
        n, n_pools = 0, len(pools)
        self.runs = np.zeros((n, 7))
        self.full_rate = np.zeros((n, n_pools))
        self.rate = np.zeros((n, n_pools))
        """Row x pool -> the run's rate there with all its hosts (as the executor's attempt would run)."""
        self.attempts = np.zeros(n, dtype=np.int64)
        self.swaps = np.zeros(n, dtype=np.int64)
        """Row -> stints the rounds stopped (each a preemption and its final checkpoint)."""
        self.last_pool = np.zeros(n, dtype=np.int64)
        self.stints = np.zeros((0, 7))
        self.live = np.zeros(0, dtype=np.int64)
        self.on = np.zeros(0, dtype=np.int64)
        self.timers: dict[int, Timer] = {}
        """Row -> the timer of its stint's finish, set once the finish falls by the next boundary."""
        self.planned = np.zeros(n, dtype=np.int64)
        self.slots = np.zeros(n, dtype=np.int64)
        """Row -> the run's slot in the round ledger (it keeps one from its arrival to its finish)."""
        self.queued_at = np.zeros(n)
        """Row -> when the rounds last stopped its stint (it waits since, unless it runs again)."""
        self.done = 0
        """Rows whose run has finished."""
        self.settled = False
        """Whether `settle` has written the waiting rows into the simulation's queue."""
        self.row_of_slot = np.zeros(0, dtype=np.int64)
        """Ledger slot -> the row of the run holding it (-1: none yet)."""
        self.columns: np.ndarray | None = None
        """Pool -> its chip type's column in the ledger (-1: a type the ledger has not seen)."""
        self.before = np.zeros((n, 2), dtype=np.int64)
        """Row -> its run record's checkpoints and preemptions before the rounds swapped it."""

    # --- the round --------------------------------------------------------------------------------

    def waiting(self) -> int:
        """Runs the rounds have stopped that wait to run again (not in the simulation's queue until `settle`)."""
        return len(self.names) - len(self.live) - self.done

    def used(self) -> np.ndarray:
        """Pool -> chips its stints hold."""
        used = np.bincount(self.on, weights=self.stints[:, GANG], minlength=len(self.pools))
        return used.astype(np.int64)

    def round(self, now: float, next_s: float) -> None:
        """The round at `now`: the ledger is told of the time every stint ran since it was last told, plans the
        round, and the plan is applied (next boundary at `next_s`)."""
        ledger = self.driver.ledger
        assert ledger is not None
        live, stints, names = self.live, self.stints, self.names
        if len(live):
            credited, started = stints[:, CREDITED], stints[:, STARTED]
            since = np.where(np.isnan(credited), started, np.maximum(started, credited))
            if self.columns is None:
                found = [ledger.column(p.chip_type) for p in self.pools]
                self.columns = np.array([-1 if c is None else c for c in found], dtype=np.int64)
            columns = self.columns[self.on]
            counted = columns >= 0  # time on a chip type the ledger has not seen is not counted, as `ran` does
            if counted.all():
                ledger.ran_slots(self.slots[live], columns, now - since)
            else:
                ledger.ran_slots(self.slots[live][counted], columns[counted], (now - since)[counted])
            stints[:, CREDITED] = now
        free = self.capacity - self.used()
        views = [PoolView(p.name, p.chip_type, p.chips, int(free[i])) for i, p in enumerate(self.pools)]
        pool_names = self.pool_names

        def running() -> dict[str, str]:
            runs = map(names.__getitem__, live.tolist())
            return dict(zip(runs, map(pool_names.__getitem__, self.on.tolist()), strict=True))

        slots, where = ledger.plan_slots(now, views, running)
        self.boundary(now, self._rows(slots, ledger), where, next_s)

    def _rows(self, slots: np.ndarray, ledger: RoundLedger) -> np.ndarray:
        """The rows of the runs in ledger `slots` (a run planned for the first time gets its row now)."""
        if len(self.row_of_slot) < len(ledger.runs):
            grown = np.full(len(ledger.runs), -1, dtype=np.int64)
            grown[: len(self.row_of_slot)] = self.row_of_slot
            self.row_of_slot = grown
        rows: np.ndarray = self.row_of_slot[slots]
        new = rows < 0
        if new.any():
            for i in np.flatnonzero(new).tolist():
                rows[i] = self._new_row(str(ledger.runs[slots[i]]))
        return rows

    def boundary(self, now: float, rows_a: np.ndarray, where_a: np.ndarray, next_s: float) -> None:
        """Apply the round's plan (`rows_a` to the pools `where_a`): runs it moves or leaves out give back
        their chips, then runs it places start.

        Most stints end at a boundary, not by finishing, so a stint's finish becomes a timer only once it falls
        by the next boundary (`next_s`), at the instant the executor's timer would have fired.
        """
        planned = self.planned
        planned[rows_a] = where_a
        stays = planned[self.live] == self.on
        planned[rows_a] = -1
        if not stays.all():
            leaving = ~stays
            self._swap_out(self.live[leaving], self.on[leaving], self.stints[leaving], now)
            self.live, self.on, self.stints = self.live[stays], self.on[stays], self.stints[stays]
        planned[self.live] = 0  # marks the stints that stay
        begin = planned[rows_a] < 0
        planned[self.live] = -1
        if begin.any():
            self._start(rows_a[begin], where_a[begin], now)
        engine, timers, live, finish = self.sim.engine, self.timers, self.live, self.stints[:, FINISH]
        for i in np.flatnonzero(finish <= next_s).tolist():
            row = int(live[i])
            if row not in timers:
                timers[row] = engine.schedule(float(finish[i]), partial(self._finish, row))

    def _start(self, rows: np.ndarray, pools: np.ndarray, now: float) -> None:
        """Each row in turn takes its gang of its pool now (its chips are free: the plan fits every pool)."""
        names, waiting = self.names, self.sim.waiting
        for row in (rows if self.settled else rows[self.attempts[rows] == 0]).tolist():
            waiting.pop(names[row], None)  # a run the rounds have not started yet waits in the simulation's queue
            rec = self.records[row]
            if rec.first_start_s is None:
                rec.first_start_s, rec.queue_s = now, now - rec.submit_s
        self.attempts[rows] += 1
        self.last_pool[rows] = pools
        self.book.began(rows, pools, now)
        record = self.runs[rows]
        self.runs[rows, USEFUL_BEFORE] = record[:, USEFUL_CHIP_S]
        rate = self.rate[rows, pools]
        work = record[:, COMMITTED]
        left = record[:, WORK] - work
        if (rate > 0).all():  # the plan places a run only where it can run
            finish = left / rate
        else:
            finish = np.divide(left, rate, out=np.full(len(rows), np.inf), where=rate > 0)
        finish[left <= 0] = 0.0
        new = np.empty((len(rows), 7))
        new[:, STARTED], new[:, START_WORK], new[:, RATE] = now, work, rate
        new[:, FULL_RATE], new[:, FINISH], new[:, CREDITED] = self.full_rate[rows, pools], now + finish, np.nan
        new[:, GANG] = record[:, CHIPS]
        self.stints = np.concatenate([self.stints, new])
        self.live = np.concatenate([self.live, rows])
        self.on = np.concatenate([self.on, pools])

    def _swap_out(self, rows: np.ndarray, pools: np.ndarray, stints: np.ndarray, now: float) -> None:
        """The rows' runs leave their chips at the boundary, checkpointing (freely) all they did, and wait:
        as a preemption's bookkeeping, each sum taken in the order the stints started."""
        if self.timers:
            for row in rows.tolist():
                timer = self.timers.pop(row, None)
                if timer is not None:
                    timer.cancel()
        done = stints[:, START_WORK] + (now - stints[:, STARTED]) * stints[:, RATE]
        record = self._close(rows, pools, stints, now, np.minimum(done, self.runs[rows, WORK]))
        self.swaps[rows] += 1
        self.book.left(rows, now, record[:, USEFUL_CHIP_S] - record[:, USEFUL_BEFORE])
        self.queued_at[rows] = now

    def _close(
        self, rows: np.ndarray, pools: np.ndarray, stints: np.ndarray, now: float, kept: np.ndarray
    ) -> np.ndarray:
        """The rows' stints give back their chips with `kept` work kept (the run records' tallies, as the
        executor's attempt's end); returns the rows' records as they now stand."""
        record: np.ndarray = self.runs[rows]
        gang = stints[:, GANG]
        ran = now - stints[:, STARTED]
        record[:, ALLOCATED] += gang * ran
        useful_s = np.maximum(kept - stints[:, START_WORK], 0.0) / stints[:, FULL_RATE]
        record[:, USEFUL_S] += useful_s
        record[:, USEFUL_CHIP_S] += useful_s * gang
        record[:, COMMITTED] = kept
        self.runs[rows] = record
        return record

    def _finish(self, row: int) -> None:
        """The row's stint did all its work: it ends, and the run succeeds."""
        sim, now = self.sim, self.sim.engine.now()
        del self.timers[row]
        at = np.flatnonzero(self.live == row)
        stint, pool = self.stints[at], self.on[at]
        run = self.names[row]
        started, credited = float(stint[0, STARTED]), float(stint[0, CREDITED])
        since = started if math.isnan(credited) else max(started, credited)
        ledger = self.driver.ledger
        if ledger is not None:
            if since != now:  # else credited at this instant already (a round boundary)
                ledger.ran(run, self.pools[int(pool[0])].chip_type, now - since)
            ledger.leave(run)
            self.row_of_slot[self.slots[row]] = -1
        record = self._close(np.array([row]), pool, stint, now, self.runs[[row], WORK])
        keep = self.live != row
        self.live, self.on, self.stints = self.live[keep], self.on[keep], self.stints[keep]
        self._write(row)
        useful = float(record[0, USEFUL_CHIP_S] - record[0, USEFUL_BEFORE])
        self.done += 1
        sim.succeeded(run, int(self.attempts[row]), self.pool_names[int(pool[0])], useful)

    # --- rows -------------------------------------------------------------------------------------

    def _new_row(self, run: str) -> int:
        sim = self.sim
        job, rec = sim.jobs[run], sim.runs[run]
        row = len(self.names)
        if row >= len(self.runs):
            self._grow(max(64, 2 * len(self.runs)))
        self.names.append(run)
        self.records.append(rec)
        for i, pool in enumerate(self.pools):
            hosts = hosts_of(job.chips, pool.chips_per_host)
            full_rate = job.gang_rate(pool.chip_type, pool.relative_speed, job.chips)
            self.full_rate[row, i], self.rate[row, i] = full_rate, full_rate * hosts / hosts  # as Attempt.rate
        self.runs[row] = (
            sim.committed.get(run, 0.0), job.work_s, job.chips, rec.allocated_chip_s, rec.useful_s,
            rec.useful_chip_s, 0.0,
        )  # fmt: skip
        self.attempts[row] = sim.attempts.get(run, 0)
        self.swaps[row] = 0
        ledger = self.driver.ledger
        assert ledger is not None
        self.slots[row] = ledger.slot[run]
        self.row_of_slot[self.slots[row]] = row
        self.before[row] = rec.checkpoints, rec.preemptions
        self.book.hold([row], [run])
        return row

    def _write(self, row: int) -> None:
        """The row's columns back into its run record and the simulation's per-run tallies."""
        rec, run, sim = self.records[row], self.names[row], self.sim
        record = self.runs[row].tolist()
        swaps = self.swaps[row]
        rec.attempts = int(self.attempts[row])
        rec.checkpoints, rec.preemptions = (self.before[row] + swaps).tolist()
        rec.allocated_chip_s = record[ALLOCATED]
        rec.useful_s, rec.useful_chip_s = record[USEFUL_S], record[USEFUL_CHIP_S]
        if rec.attempts:
            rec.pool = self.pool_names[int(self.last_pool[row])]
        sim.committed[run] = record[COMMITTED]
        sim.attempts[run] = rec.attempts

    def settle(self) -> None:
        """Every row's columns back into the records (run records, the simulation's tallies, the metrics').

        The driver's service by chip type (`PolicyDriver.attained`) is not kept for these runs: only views
        read it, and the rounds plan from the ledger, which is told of every stretch run."""
        sim, driver = self.sim, self.driver
        waiting = np.ones(len(self.names), dtype=bool)
        waiting[self.live] = False
        for row in range(len(self.names)):
            self._write(row)
            rec = self.records[row]
            if rec.outcome != "succeeded":
                rec.outcome = "pending"
            else:
                waiting[row] = False
        for row in np.flatnonzero(waiting).tolist():
            sim.waiting.setdefault(self.names[row], float(self.queued_at[row]))
        self.settled = True
        for row, credited in zip(self.live.tolist(), self.stints[:, CREDITED].tolist(), strict=True):
            run = self.names[row]
            self.records[row].outcome = "running"
            sim.useful_before[run] = float(self.runs[row, USEFUL_BEFORE])
            if not math.isnan(credited):
                driver.credited[run] = credited
        self.book.release_all()

    def _grow(self, extra: int) -> None:
        for name in ("attempts", "swaps", "last_pool", "slots", "queued_at"):
            column = getattr(self, name)
            setattr(self, name, np.concatenate([column, np.zeros(extra, dtype=column.dtype)]))
        for name in ("runs", "full_rate", "rate", "before"):
            table = getattr(self, name)
            setattr(self, name, np.vstack([table, np.zeros((extra, table.shape[1]), dtype=table.dtype)]))
        self.planned = np.concatenate([self.planned, np.full(extra, -1, dtype=np.int64)])
