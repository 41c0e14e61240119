"""Placement before each simulated cycle, as the agent places before each of its passes (scheduling.reconcile).

The simulator builds what the agent's placer reads from its store out of its own state: each waiting job's
workload (its declared run time, preference, allowed accelerators, the objective the placement policy gives
its stage, the pools its queue reaches, the pool its last attempt ended on), each running attempt's expected
end (its start plus its declared run time on its pool) and the pools (drained ones take nothing); then the
shared step plans the queue and sets each request's pool. Jobs carry no measured throughputs, so run times
come from the declared ones, as on a fleet that has measured nothing yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from crossrail.core import priority_rank
from crossrail.scheduling import Scheduler
from crossrail.scheduling.estimate import Busy, PlacementWork, PoolInfo, run_time_s
from crossrail.scheduling.quota import QuotaBook
from crossrail.scheduling.reconcile import PlacementSettings, Placing
from crossrail.sim.engine import Engine
from crossrail.sim.executor import SimExecutor
from crossrail.sim.fit import Where
from crossrail.sim.job import SimJob
from crossrail.sim.retries import SimRetries
from crossrail.spec import Fleet, PlacementPolicy


class PlacedSimulation(Protocol):
    """What placement reads of the simulation that hands itself in (crossrail.sim.simulation.Simulation)."""

    @property
    def fleet(self) -> Fleet: ...
    @property
    def sched(self) -> Scheduler: ...
    @property
    def executor(self) -> SimExecutor: ...
    @property
    def engine(self) -> Engine: ...
    @property
    def retries(self) -> SimRetries: ...
    @property
    def jobs(self) -> Mapping[str, SimJob]: ...
    @property
    def allow(self) -> Mapping[str, Where]: ...
    @property
    def waiting(self) -> Mapping[str, float]: ...
    @property
    def pipeline_of(self) -> Mapping[str, str]: ...


class SimPlacing:
    def __init__(self, sim: PlacedSimulation, policy: PlacementPolicy) -> None:
        self.sim = sim
        self.policy = policy
        spec = sim.fleet.spec
        settings = spec.placement
        self.placing = Placing(PlacementSettings(settings.hysteresis, settings.min_gain_s, settings.prefer_margin))
        self.infos = {p.name: PoolInfo.from_spec(p, spec.currency) for p in sim.fleet.pools}
        self.quota = QuotaBook(spec.queues)

    def place(self, now: float) -> None:
        """Set the pool the plan picks on every request waiting in the scheduler's queues."""
        sim, queues = self.sim, self.sim.sched.queues
        pending = [req for req in queues.requests.values() if req.run in sim.jobs]  # a part offered alone is not
        if not pending:  # placed (the agent's either)
            return
        pools = self.pools()
        works = [self.workload(req.run, req.queue) for req in pending]
        running = [self.busy(run, att.pool, att.chips, att.started_at) for run, att in sim.executor.live.items()]
        requests, _ = self.placing.place(pending, works, running, pools, now)
        for old, new in zip(pending, requests, strict=True):
            if new != old:
                sim.sched.submitted(new)

    def pools(self) -> list[PoolInfo]:
        cache = self.sim.sched.cache.pools
        return [
            info if not cache[name].drained else PoolInfo(**{**info.__dict__, "drained": True})
            for name, info in self.infos.items()
        ]

    def workload(self, run: str, queue: str) -> PlacementWork:
        sim = self.sim
        job = sim.jobs[run]
        allow = sim.allow[run][0] if run in sim.allow else job.accelerators
        return PlacementWork(
            run=run,
            chips=job.chips,
            parts=tuple(p.chips for p in job.parts),
            stage=job.stage,
            reference_s=job.declared_s,
            prefer=job.prefer,
            allow=tuple(allow) if allow is not None else None,
            objective=str(self.policy.objective_for(job.stage)),
            avoid=sim.retries.avoid_pool(run),
            rank=priority_rank(job.priority),
            queued_at=sim.waiting.get(run, sim.engine.now()),
            pools=self.quota.reachable(queue),
        )

    def busy(self, run: str, pool: str, chips: int, started_at: float) -> Busy:
        """A running attempt, expected to end its declared run time on its pool after it started (a pipeline's
        part: its pipeline's, under the pipeline's name, as the agent counts it)."""
        run = self.sim.pipeline_of.get(run, run)
        job = self.sim.jobs[run]
        work = PlacementWork(run=run, chips=job.chips, stage=job.stage, reference_s=job.declared_s)
        run_s, _ = run_time_s(work, self.infos[pool])
        return Busy(run, pool, chips, started_at + run_s if run_s is not None else None)
