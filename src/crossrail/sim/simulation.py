"""A fleet simulation: jobs arrive, the scheduling core admits them, the simulated executor runs them.

    result = Simulation(fleet, jobs, policy="fifo", failures=FailureSpec(...), checkpoint=CheckpointModel(...),
                        seed=1, quantum_s=1.0).run()

`fifo` and `priority` go through `Scheduler.cycle` exactly as the agent's do (quotas, fair share, gangs,
preemption); the other policies of `crossrail.scheduling.policies` decide through their own `order` or
round-based `allocate`, and the scheduler books every allocation (docs/simulator.md). Everything the
simulation measures comes from the events it records, folded by `crossrail.metrics`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from crossrail.core import Event, EventType
from crossrail.metrics import MetricsAccumulator
from crossrail.scheduling import Request, Scheduler, SchedulerConfig
from crossrail.scheduling.decisions import RetryPolicy
from crossrail.scheduling.growth import resized_data
from crossrail.scheduling.pipeline import retry_part
from crossrail.scheduling.policies import ROUND_S, get_policy
from crossrail.scheduling.reconcile import pipeline_state
from crossrail.scheduling.types import PART_SEP, Growth, part_key
from crossrail.sim.capacity import Capacity
from crossrail.sim.checkpointing import CheckpointModel
from crossrail.sim.engine import LATE, Engine, Timer
from crossrail.sim.executor import Attempt, SimExecutor
from crossrail.sim.failures import FailureModel, FailureSpec
from crossrail.sim.fit import check_jobs, hosts_of, queue_names
from crossrail.sim.generated import JobStream
from crossrail.sim.placing import SimPlacing
from crossrail.sim.records import SimResult, SimRunRecord, SimStageStats
from crossrail.sim.retries import SIM_RETRIES, SimRetries
from crossrail.sim.units import scheduling_fleet
from crossrail.sim.workload import SimJob
from crossrail.spec import Fleet, PlacementPolicy

Progress = Callable[[int, int, float], None]
"""(jobs finished, jobs in all, virtual now) -> None; called every few thousand events."""


class Simulation:
    def __init__(  # noqa: PLR0915 (one statement per piece of the simulation's state)
        self,
        fleet: Fleet,
        jobs: Sequence[SimJob] | JobStream,
        *,
        policy: str = "fifo",
        failures: FailureSpec | None = None,
        checkpoint: CheckpointModel | None = None,
        seed: int = 0,
        quantum_s: float = 1.0,
        round_s: float | None = None,
        record_events: bool = False,
        recheck_s: float | None = None,
        fallback_wait_s: float = 60.0,
        retries: RetryPolicy = SIM_RETRIES,
        placement: PlacementPolicy | None = None,
    ) -> None:
        self.fleet, self.policy_name, self.seed = fleet, policy, seed
        self.policy = get_policy(policy)  # an unknown name fails here, before anything runs
        self.stream = jobs if isinstance(jobs, JobStream) else None
        listed = [] if self.stream is not None else sorted(jobs, key=lambda j: (j.submit_s, j.name))
        self.jobs = {j.name: j for j in listed}
        self.measured = self.stream.measured if self.stream is not None else None
        """The jobs whose end ends the simulation and whose figures are reported (None: every job)."""
        shapes = self.stream.shapes() if self.stream is not None else list(self.jobs.values())
        self.queue_of = queue_names(fleet, shapes)
        self._queue_by = {(j.stage, j.team): self.queue_of[j.name] for j in shapes}
        """(stage, team) -> queue, for streamed jobs: each arrival's is one look-up, not a walk of the fleet."""
        self.allow = check_jobs(fleet, shapes)
        self._shape_allow = {_shape(j): self.allow.get(j.name) for j in shapes}
        self.quantum_s = max(quantum_s, 0.0)
        self.recheck_s = recheck_s if recheck_s is not None else fallback_wait_s
        self.engine = Engine()
        config = SchedulerConfig.from_fleet(fleet, fallback_wait_s=fallback_wait_s)
        config = dataclasses.replace(config, policy=policy, round_s=round_s or fleet.spec.scheduling.round_s or ROUND_S)
        self.sched = Scheduler.from_fleet(scheduling_fleet(fleet, shapes), config)  # in allocation units
        model = FailureModel(failures, np.random.default_rng(seed)) if failures is not None else None
        self.failures = model if failures is not None and failures.enabled else None
        self.checkpoint = checkpoint or CheckpointModel()
        self.executor = SimExecutor(self.engine, self.checkpoint, self.failures, ended=self._ended)
        self.retries = SimRetries(retries)
        """Ends and retries decided as the agent decides them (crossrail.scheduling.decisions)."""
        ranked = any(j.priority != "normal" for j in shapes)  # fifo, too, preempts for priority
        self.preempts = ranked or bool(fleet.spec.reservations) or any(p.drained for p in fleet.pools)
        """Whether the scheduler may choose victims, and so must know when each run last checkpointed."""
        self.metrics = MetricsAccumulator()
        self.events: list[Event] | None = [] if record_events else None
        self._seq = itertools.count(1)
        self.pools = {p.name: p for p in fleet.pools}
        self.runs = {j.name: SimRunRecord(j.name, j.stage, j.chips, j.submit_s) for j in self.jobs.values()}
        self.waiting: dict[str, float] = {}
        """Jobs queued now -> when they were queued (insertion order is arrival order)."""
        self.attempts: dict[str, int] = {}
        self.useful_before: dict[str, float] = {}
        self.attained: dict[str, dict[str, float]] = {}
        """Chip-seconds each job's ended attempts held, by chip type (least-attained-service policies order by it)."""
        speeds: dict[str, float] = {}
        for p in fleet.pools:
            speeds[p.chip_type] = max(speeds.get(p.chip_type, 0.0), p.relative_speed)
        self.speeds = speeds if len(set(speeds.values())) > 1 else {}
        """A job without a throughput row runs at each chip type's relative speed; uniform speeds say nothing."""
        self._rates: dict[str, tuple[tuple[str, float], ...]] = {}
        """Each job's `Request.throughput` (see `_throughput`)."""
        self.committed: dict[str, float] = {}
        """Work each job has kept so far (its next attempt restores from here)."""
        self.cycles = 0
        self.done = self.measured_done = 0
        self.last_end = 0.0
        self._cycle: Timer | None = None
        self._recheck: Timer | None = None
        self._budget_wake: float | None = None
        self._round_wake: float | None = None
        self._arrivals: Iterator[SimJob] = iter(self.stream if self.stream is not None else listed)
        self._arrivals_left = True
        self.blocked: dict[str, str] = {}
        """Why the queue heads of the last cycle waited (named in the result when jobs never finish)."""
        self.children: dict[str, list[SimJob]] = {}
        """Parent -> the jobs that arrived and wait for it to end (`spec.parent`, from its `latest` checkpoint)."""
        self.placing = SimPlacing(self, placement) if placement is not None else None
        """With a placement policy, each cycle first places the waiting jobs as the agent does (sim/placing.py)."""
        self.pipeline_of: dict[str, str] = {}
        """A pipeline part's key (`run/part`, under which it is admitted and runs) -> its pipeline's job name."""
        self.part_records: dict[str, SimRunRecord] = {}
        """Each part's own tally (its pipeline's record counts the pipeline as one run)."""
        self.cancelled: list[tuple[float, str, int, str, str]] = []
        """(when, run, attempt, part, pool) of each part stopped because its pipeline ended: the agent records
        that on the attempt and emits no event, and so does the simulation."""

    @functools.cached_property
    def capacity(self) -> Capacity:
        """Spot reclaims, provisioning waits and the estimates' pick where pools are priced by them (sim.capacity)."""
        return Capacity(self.fleet, self.seed, self.checkpoint.interval_s)

    # --- running ---------------------------------------------------------------------------------

    def run(self, until_s: float | None = None, *, progress: Progress | None = None) -> SimResult:
        """Simulate until every job succeeded (or until `until_s`); returns the measured result."""
        t0 = time.perf_counter()
        for pool in self.fleet.pools:
            chips = 0 if pool.drained else pool.chips
            data = {"pool": pool.name, "chips_before": 0, "chips_after": chips, "reason": "simulation start"}
            self._emit(EventType.CAPACITY_CHANGED, None, None, data)
        if self.sched.rounds is not None:  # the first round opens at the start, as the agent's does
            self.demand_changed()
        self._next_arrival()
        limit = math.inf if until_s is None else until_s
        engine, total = self.engine, self._total()
        while self._counted() < total and (at := engine.peek()) < math.inf and at <= limit:
            engine.step()
            if progress is not None and engine.steps % 4096 == 0:
                progress(self._counted(), total, engine.now())
        done = self._counted() == total
        end = self.last_end if done else max(engine.now(), limit if until_s is not None else 0.0)
        if progress is not None:
            progress(self._counted(), total, end)
        return self._result(end, time.perf_counter() - t0)

    @property
    def measuring(self) -> int:
        """How many jobs the simulation waits for (the window of a generated workload, else all)."""
        return self._total()

    def _total(self) -> int:
        return len(self.measured) if self.measured is not None else len(self.jobs)

    def _counted(self) -> int:
        """Jobs finished among those the simulation waits for."""
        return self.measured_done if self.measured is not None else self.done

    def _result(self, end: float, wall_s: float) -> SimResult:
        report, totals = self.metrics.snapshot(end)
        stages = [SimStageStats.of(g) for g in totals]
        chips = sum(p.chips for p in self.fleet.pools)
        notes = []
        if self._counted() < self._total() and not self._holding() and self.engine.peek() == math.inf:
            stuck = self._total() - self._counted()
            why = "; ".join(f"{run}: {reason}" for run, reason in list(self.blocked.items())[:3])
            notes.append(f"{stuck} jobs can never start on this fleet" + (f" ({why})" if why else ""))
        if self.policy.round_based and not any(p.time_sliced for p in self.fleet.pools):
            notes.append(
                f"{self.policy_name} is round-based but the fleet marks no pool time_sliced: its rounds stopped"
                " nothing, as on the live fleet (mark pools `time_sliced: true`, or simulate with --time-sliced)"
            )
        return SimResult(
            self.policy_name, self.seed, report, stages, self.runs, wall_s, self.engine.steps, self.cycles, end,
            fleet=self.fleet.name, chips=chips, notes=notes, measured=self.measured,
        )  # fmt: skip

    def _holding(self) -> bool:
        """Whether any job holds chips now."""
        return bool(self.executor.live)

    def _emit(self, kind: EventType, run: str | None, attempt: int | None, data: dict[str, Any]) -> None:
        now, seq = self.engine.now(), next(self._seq)
        if self.events is None:  # no log kept: the metrics fold the fields, and no Event is built
            self.metrics.fold(kind, now, run, attempt, data)
            return
        event = Event(kind, now, run, attempt, data, seq)
        self.metrics.add(event)
        self.events.append(event)

    # --- demand ----------------------------------------------------------------------------------

    def _next_arrival(self) -> None:
        job = next(self._arrivals, None)
        self._arrivals_left = job is not None
        if job is not None:
            self.engine.schedule(max(job.submit_s, self.engine.now()), lambda: self._arrive(job))

    def _arrive(self, job: SimJob) -> None:
        if self.stream is not None:
            self._register(job)
        data = {"stage": job.stage, "chips": job.chips, "queue": self.queue_of[job.name], "team": job.team}
        if job.target is not None:
            data["target"] = dict(job.target)
        self._emit(EventType.SUBMITTED, job.name, None, {**data, "priority": job.priority})
        parent = self.runs.get(job.parent) if job.parent is not None else None
        if job.parent is not None and parent is not None and parent.end_s is None:  # in this workload, not ended
            self.children.setdefault(job.parent, []).append(job)
        else:
            self._enqueue(job)
        self._next_arrival()

    def _release_children(self, parent: str) -> None:
        """`parent` ended: its waiting children queue now, or fail as the agent fails them when it kept no work."""
        for child in self.children.pop(parent, []):
            if self.committed.get(parent, 0.0) > 0 or self.runs[parent].outcome == "succeeded":
                self._enqueue(child)
                continue
            reason = f"its parent {parent} ended with no checkpoint to start from"
            self._emit(EventType.FAILED, child.name, None, {"reason": reason, "retryable": False, "final": True})
            self._ended_for_good(child.name, "failed")

    def _register(self, job: SimJob) -> None:
        """A streamed job arrives: it is known from now on, judged by the shape checked before the start."""
        self.jobs[job.name] = job
        queue = self._queue_by.get((job.stage, job.team))
        self.queue_of[job.name] = queue if queue is not None else queue_names(self.fleet, [job])[job.name]
        where = self._shape_allow.get(_shape(job))
        if where is not None:
            self.allow[job.name] = where
        self.runs[job.name] = SimRunRecord(job.name, job.stage, job.chips, job.submit_s)

    def _enqueue(self, job: SimJob) -> None:
        now = self.engine.now()
        queue = self.queue_of[job.name]
        data = {"queue": queue, "stage": job.stage, "team": job.team, "priority": job.priority}
        self._emit(EventType.QUEUED, job.name, None, data)
        self.waiting[job.name] = now
        self.sched.submitted(self.request(job, now))
        self.demand_changed()

    def request(self, job: SimJob, now: float) -> Request:
        allow = self.allow[job.name][0] if job.name in self.allow else None
        picked = self.capacity.pick(job, allow) if not job.parts else None  # parts are placed by the cycle
        return Request(
            run=job.name,
            queue=self.queue_of[job.name],
            chips=job.chips,
            parts=job.parts,
            priority=job.priority,
            queued_at=now,
            team=job.team,
            min_chips=job.min_chips if job.elastic else None,
            max_chips=job.max_chips,
            duration_s=job.declared_s,
            attained_s=sum(self.attained.get(job.name, {}).values()),
            attained_by_type=tuple(self.attained.get(job.name, {}).items()),
            throughput=self._throughput(job),
            remaining=max(self._known_work(job) - self.committed.get(job.name, 0.0), 0.0),
            allow=allow,
            runs_on=self.allow[job.name][1] if job.name in self.allow else None,
            prefer=job.prefer,
            avoid_pool=self.retries.avoid_pool(job.name),
            workers=job.workers,
            pool=picked[0] if picked is not None else None,
            pool_reason=picked[1] if picked is not None else "",
        )

    def _throughput(self, job: SimJob) -> tuple[tuple[str, float], ...]:
        """The job's rates per chip type as its requests carry them: one tuple per job, built once (a run is
        requested again after every round that stops it, and rounds compare its rates with the last ones)."""
        known = self._rates.get(job.name)
        if known is None:
            known = self._rates[job.name] = tuple((job.throughput or self.speeds).items())
        return known

    @staticmethod
    def _known_work(job: SimJob) -> float:
        """The job's size as a scheduler knows it: a traced job's declared steps (its throughput row's units),
        else its declared run time (`estimate_s`, which may differ from the work it really takes)."""
        return job.work_s if job.throughput else job.declared_s

    def demand_changed(self) -> None:
        """Capacity or demand changed: a scheduling cycle runs at the end of this quantum."""
        if self._cycle is None:
            now, q = self.engine.now(), self.quantum_s
            at = math.ceil(now / q) * q if q > 0 else now
            self._cycle = self.engine.schedule(max(at, now), self._run_cycle, LATE)

    def _run_cycle(self) -> None:
        self._cycle = None
        self.cycles += 1
        now = self.engine.now()
        if self.preempts:
            self._tell_checkpoints(now)
        if self.placing is not None:
            self.placing.place(now)
        result = self.sched.cycle(now)
        for p in result.preempted:
            self.retries.stop(p.run, p.stop)
            self.executor.preempt(p.run, p.grace_s)
        for a in result.admitted:
            if a.part is not None:
                self.launch_part(a.run, a.part, a.pool, a.chips)
            else:
                self.launch(a.run, a.pool, a.chips)
        for growth in result.grown:
            self.grow(growth)
        for crossing in result.budget_exceeded:
            self._emit(EventType.BUDGET_EXCEEDED, None, None, crossing.as_dict())
        rounds = self.sched.rounds  # the next boundary while anything waits or runs, as the agent passes there
        at = rounds.next_at if rounds is not None and (self.waiting or self.executor.live) else None
        if at is not None and at != self._round_wake:
            self._round_wake = at
            self.engine.schedule(max(at, now), self.demand_changed, LATE)
        held = result.held_until
        if held is not None and held > now and held != self._budget_wake:  # a budget holds heads until then
            self._budget_wake = held
            self.engine.schedule(held, self.demand_changed, LATE)
        self.blocked = result.blocked
        stuck = not (result.admitted or result.preempted or self.executor.live or self._arrivals_left)
        if result.blocked and self._recheck is None and self.recheck_s > 0 and not stuck:
            self._recheck = self.engine.after(self.recheck_s, self._rechecked, LATE)

    def _rechecked(self) -> None:
        """Blocked heads can open up with time alone (fallback pools, reservations ending): look again."""
        self._recheck = None
        if self.waiting:
            self.demand_changed()

    # --- attempts --------------------------------------------------------------------------------

    def launch(self, run: str, pool_name: str, chips: int) -> None:
        """Start `run` on `chips` of `pool_name` now (admitted by the cycle)."""
        now, job, rec = self.engine.now(), self.jobs[run], self.runs[run]
        pool = self.pools[pool_name]
        self.sched.started(run, pool_name, chips, now)
        del self.waiting[run]
        number = self.attempts[run] = self.attempts.get(run, 0) + 1
        price = pool.cost_per_chip_hour
        self._emit(EventType.STARTED, run, number, {"pool": pool_name, "chips": chips, "cost_per_chip_hour": price})
        if rec.first_start_s is None:
            rec.first_start_s, rec.queue_s = now, now - rec.submit_s
        rec.attempts, rec.pool, rec.outcome = number, pool_name, "running"
        self.useful_before[run] = rec.useful_chip_s
        hosts = hosts_of(chips, pool.chips_per_host)
        rate = job.gang_rate(pool.chip_type, pool.relative_speed, chips)
        mtbf = self.failures.run_mtbf_s(chips, hosts) if self.failures is not None else math.inf
        min_hosts = hosts_of(job.min_chips, pool.chips_per_host) if job.min_chips else 1
        committed = self.committed.get(run, 0.0)
        att = Attempt(job, rec, pool_name, chips, hosts, rate, number, now, mtbf, committed, min_hosts=min_hosts)
        att.provisioning_s = self.capacity.wait_s(pool_name)
        self.executor.start(att)
        reclaim_s = self.capacity.reclaim_in_s(pool_name, chips)
        if math.isfinite(reclaim_s):  # a spot pool takes its nodes back, counted from when they arrived
            self.engine.after(att.provisioning_s + reclaim_s, lambda: self._reclaimed(att))

    def launch_part(self, key: str, part: str, pool_name: str, chips: int) -> None:
        """Start part `part` of a pipeline (admitted under `key`, `run/part`) on `chips` of `pool_name` now: an
        attempt of the pipeline run, as the agent's are; the pipeline leaves the queue with its first parts."""
        now = self.engine.now()
        run = key.split(PART_SEP, 1)[0]
        job, rec = self.jobs[run], self.runs[run]
        self.pipeline_of[key] = run
        self.sched.started(key, pool_name, chips, now)
        self.waiting.pop(run, None)
        self.waiting.pop(key, None)  # a part offered again alone
        number = self.attempts[run] = self.attempts.get(run, 0) + 1
        pool = self.pools[pool_name]
        price = pool.cost_per_chip_hour
        data = {"pool": pool_name, "chips": chips, "cost_per_chip_hour": price, "part": part}
        self._emit(EventType.STARTED, run, number, data)
        if rec.first_start_s is None:
            rec.first_start_s, rec.queue_s = now, now - rec.submit_s
        rec.attempts, rec.pool, rec.outcome = number, pool_name, "running"
        part_job = job.part(part)
        part_rec = self.part_records.setdefault(key, SimRunRecord(key, job.stage, chips, job.submit_s))
        self.useful_before[key] = part_rec.useful_chip_s
        hosts = hosts_of(chips, pool.chips_per_host)
        rate = part_job.gang_rate(pool.chip_type, pool.relative_speed, chips)
        mtbf = self.failures.run_mtbf_s(chips, hosts) if self.failures is not None else math.inf
        committed = self.committed.get(key, 0.0)
        att = Attempt(part_job, part_rec, pool_name, chips, hosts, rate, number, now, mtbf, committed)
        self.executor.start(att)

    def grow(self, growth: Growth) -> None:
        """Take the cycle's proposal (step 7) as the agent does through an executor that resizes in place: the
        attempt holds `chips_to` chips from now on, its remaining work goes at that size's rate, and the
        scheduler and a `resized` event say so (crossrail.scheduling.growth)."""
        att = self.executor.live.get(growth.run)
        if att is None or growth.run in self.pipeline_of:
            return
        pool, chips = self.pools[att.pool], growth.chips_to
        hosts = hosts_of(chips, pool.chips_per_host)
        rate = att.job.gang_rate(pool.chip_type, pool.relative_speed, chips)
        mtbf = self.failures.run_mtbf_s(chips, hosts) if self.failures is not None else math.inf
        if not self.executor.resize(att, chips, hosts, rate, mtbf):
            return
        self.sched.resized(growth.run, chips, self.engine.now())
        self._emit(EventType.RESIZED, growth.run, att.number, resized_data(growth))

    def _reclaimed(self, att: Attempt) -> None:
        """The pool reclaimed `att`'s nodes (a spot preemption): it loses its work since its last checkpoint."""
        if self.executor.live.get(att.job.name) is att:
            self.executor.interrupt(att.job.name)

    def _tell_checkpoints(self, now: float) -> None:
        """Before a cycle that may preempt: each running attempt's last checkpoint, for the victims' lost work."""
        for run, att in self.executor.live.items():
            at = self.executor.last_checkpoint_at(att, now)
            if at is not None:
                self.sched.checkpointed(run, at)

    def _ended(self, att: Attempt, how: str, lost_s: float) -> None:
        now, run, rec = self.engine.now(), att.job.name, att.record
        self.sched.finished(run, now)
        if run in self.pipeline_of:
            self._part_ended(att, how)
            return
        by_type = self.attained.setdefault(run, {})
        chip_type = self.pools[att.pool].chip_type
        by_type[chip_type] = by_type.get(chip_type, 0.0) + att.chip_s(now)
        self.committed[run] = att.committed
        useful = rec.useful_chip_s - self.useful_before.pop(run, 0.0)
        data: dict[str, Any] = {"pool": att.pool, "useful_chip_s": useful}
        if how == "succeeded":
            self.succeeded(run, att.number, att.pool, useful)
            return
        self._retry(att, how, data)
        self.demand_changed()

    def _part_ended(self, att: Attempt, how: str) -> None:
        """A part's attempt ended: the pipeline's rules (scheduling.reconcile) say what that means for the run,
        the shared end decision whether and when the part alone goes again."""
        now, key = self.engine.now(), att.job.name
        run = self.pipeline_of[key]
        job, rec, part = self.jobs[run], self.runs[run], key.split(PART_SEP, 1)[1]
        self.committed[key] = att.committed
        useful = att.record.useful_chip_s - self.useful_before.pop(key, 0.0)
        data: dict[str, Any] = {"pool": att.pool, "part": part, "useful_chip_s": useful}
        if how == "cancelled":  # its pipeline ended: the agent records the stop on the attempt, with no event
            self.cancelled.append((now, run, att.number, part, att.pool))
            return
        names = [p.name for p in job.parts]
        if how == "succeeded":
            ends = pipeline_state(names, part, "succeeded") == "succeeded"
            self._emit(EventType.SUCCEEDED, run, att.number, data if ends else {**data, "final": False})
            if ends:
                self._pipeline_ended(run, "succeeded")
            return
        decision = self.retries.ended(key, att.number, att.pool, how, now, policy=job.retries)
        assert decision.event is not None  # the simulator neither cancels nor suspends a part by itself
        self._emit(decision.event, run, att.number, {**data, **decision.data(att.pool)})
        if how == "preempted":
            rec.preemptions += 1
        if not decision.retry:
            if pipeline_state(names, part, "failed") == "failed":
                self._pipeline_ended(run, "failed")
            return
        again = {"part": part, "next_attempt": att.number + 1, "reason": decision.detail, "cause": str(decision.reason)}
        self._emit(EventType.RETRIED, run, None, again)
        delay = decision.backoff_s
        if how == "interrupted":
            delay += self.checkpoint.detect_s + self.checkpoint.reschedule_s
        self.engine.after(delay, lambda: self._offer_part(run, part))

    def _offer_part(self, run: str, part: str) -> None:
        """Offer only `part` of `run` again, away from the pool it was lost on (the other parts keep running)."""
        if self.runs[run].end_s is not None:  # the pipeline ended meanwhile
            return
        now, key = self.engine.now(), part_key(run, part)
        self.waiting[key] = now
        pipeline = self.request(self.jobs[run], now)
        self.sched.submitted(retry_part(pipeline, part, queued_at=now, avoid_pool=self.retries.avoid_pool(key)))
        self.demand_changed()

    def _pipeline_ended(self, run: str, outcome: str) -> None:
        """The pipeline `run` ended with `outcome`: its other parts are cancelled, as the agent halts them."""
        for key in [k for k, r in self.pipeline_of.items() if r == run and k in self.executor.live]:
            self.executor.cancel(key)
        for key in [k for k, r in self.pipeline_of.items() if r == run and k in self.waiting]:
            self.sched.withdrawn(key)
            del self.waiting[key]
        self._ended_for_good(run, outcome)
        self.last_end = max(self.last_end, self.engine.now())
        self.demand_changed()

    def succeeded(self, run: str, number: int, pool: str, useful_chip_s: float) -> None:
        """Attempt `number` of `run` on `pool` succeeded now, having kept `useful_chip_s` of work."""
        now = self.engine.now()
        self._emit(EventType.SUCCEEDED, run, number, {"pool": pool, "useful_chip_s": useful_chip_s})
        self._ended_for_good(run, "succeeded")
        self.last_end = max(self.last_end, now)
        self.demand_changed()

    def _ended_for_good(self, run: str, outcome: str) -> None:
        """`run` has ended with `outcome` and will not run again: counted, and its children may go."""
        rec = self.runs[run]
        rec.outcome, rec.end_s = outcome, self.engine.now()
        self.done += 1
        if self.measured is not None and run in self.measured:
            self.measured_done += 1
        if run in self.children:
            self._release_children(run)

    def _retry(self, att: Attempt, how: str, data: dict[str, Any]) -> None:
        """An interrupted or preempted attempt: the shared decision says whether and when the run goes again."""
        now, run, rec = self.engine.now(), att.job.name, att.record
        decision = self.retries.ended(run, att.number, att.pool, how, now, policy=att.job.retries)
        assert decision.event is not None  # the simulator neither cancels nor suspends
        self._emit(decision.event, run, att.number, {**data, **decision.data(att.pool)})
        if how == "preempted":
            rec.preemptions += 1
        if not decision.retry:  # out of retries (a policy with a finite spec.retries.max): the job has ended
            self._ended_for_good(run, "failed")
            return
        next_try = {"next_attempt": att.number + 1, "reason": decision.detail, "cause": str(decision.reason)}
        self._emit(EventType.RETRIED, run, None, next_try)
        rec.outcome = "pending"
        delay = decision.backoff_s  # detection and rescheduling come first, as modelled, after an interruption
        if how == "interrupted":
            delay += self.checkpoint.detect_s + self.checkpoint.reschedule_s
        if delay > 0:
            self.engine.after(delay, lambda: self._enqueue(att.job))
        else:
            self._enqueue(att.job)


def _shape(job: SimJob) -> tuple[object, ...]:
    """What placement checks depend on: jobs alike in these are placed alike."""
    return (job.chips, job.stage, job.team, job.accelerators, tuple(sorted(job.throughput.items())))
