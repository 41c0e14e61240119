"""Checks before a simulation starts: every job has a stage queue and a pool that can ever run it."""

from __future__ import annotations

from collections.abc import Iterable

from crossrail.errors import PlacementError, Problem, ProblemCode, SpecError
from crossrail.scheduling.pool import PoolState
from crossrail.sim.workload import SimJob
from crossrail.spec import Fleet

SHOWN = 5
"""Jobs named in one error; the rest are counted."""


def hosts_of(chips: int, per_host: int) -> int:
    return max(-(-chips // per_host), 1)


def queue_names(fleet: Fleet, jobs: Iterable[SimJob]) -> dict[str, str]:
    """Job -> the fleet queue of its stage (its team's own when there is one); SpecError for a missing stage."""
    out, missing = {}, set()
    for job in jobs:
        queue = fleet.queue_for(job.stage, job.team)
        if queue is None:
            missing.add(job.stage)
        else:
            out[job.name] = queue.name
    if missing:
        fix = "add a queue for each stage to the fleet, or use --pools, which makes one queue per stage"
        problems = [
            Problem(fleet.name, "spec.queues", f"no queue for stage {s!r}", fix=fix, code=ProblemCode.INFEASIBLE)
            for s in sorted(missing)
        ]
        raise SpecError(problems)
    return out


Where = tuple[tuple[str, ...] | None, tuple[str, ...] | None]
"""(accelerators the scheduler may place a job on, the only pools that can run it); None: no limit."""


def check_jobs(fleet: Fleet, jobs: Iterable[SimJob]) -> dict[str, Where]:
    """Job -> where the scheduler may place it; PlacementError for jobs no pool can ever run.

    A job with a throughput row that is zero on some pool's chip type is kept off that pool (every
    policy, FIFO included), never refused for it: only a job no pool can run at all is an error.
    """
    states = {p.name: PoolState(p) for p in fleet.pools}
    reach = quota_reach(fleet)
    kinds = sorted({str(p.accelerator) for p in fleet.pools})
    allow: dict[str, Where] = {}
    never: list[SimJob] = []

    def check_one(job: SimJob) -> Where | None:
        """Where `job` may run; None when no pool can ever run it."""
        holds = [
            p
            for p in fleet.pools
            if p.chips >= job.chips and states[p.name].allows(job.chips) and job.runs_on(str(p.accelerator))
        ]
        queue = fleet.queue_for(job.stage, job.team)
        holds = [p for p in holds if queue is None or reach.get((queue.name, p.name), 0) >= job.chips]
        runs = {p.name for p in holds if job.rate(p.chip_type, p.relative_speed) > 0}
        if not runs:
            return None
        ok = sorted({str(p.accelerator) for p in holds if p.name in runs})
        kinds_ok = None if len(ok) == len(kinds) else tuple(ok)
        pools_ok = None if len(runs) == len(holds) else tuple(sorted(runs))
        return kinds_ok, pools_ok

    seen: dict[tuple[object, ...], Where] = {}
    for job in jobs:
        if job.parts:  # a pipeline: each part must fit a pool of its own; the cycle places them together
            stuck = [part for p in job.parts if check_one(part := job.part(p.name)) is None]
            never.extend(stuck)
            if not stuck:
                allow[job.name] = (None, None)
            continue
        # Jobs without a throughput row that ask alike get alike answers: decide each shape once.
        key = (job.chips, job.stage, job.team, job.accelerators) if not job.throughput else None
        if key is not None and key in seen:
            allow[job.name] = seen[key]
            continue
        where = check_one(job)
        if where is None:
            never.append(job)
            continue
        allow[job.name] = where
        if key is not None:
            seen[key] = where
    if never:
        raise PlacementError(_jobs_text(never, "no pool of the fleet can ever run") + _NEVER_FIX)
    return allow


def quota_reach(fleet: Fleet) -> dict[tuple[str, str], int]:
    """(queue, pool) -> chips the queue could ever use there: its quota plus its cohort's (as at submit)."""
    out = {}
    for q in fleet.spec.queues:
        for p in fleet.pools:
            cohort = [o for o in fleet.spec.queues if q.cohort and o.cohort == q.cohort and o.name != q.name]
            out[(q.name, p.name)] = q.quota.get(p.name, 0) + sum(o.quota.get(p.name, 0) for o in cohort)
    return out


_NEVER_FIX = (
    ": each needs a pool with at least its chips, in whole hosts above one host (a slice shape on TPU pools), "
    "on a chip type its throughput row names, where its stage queue has (or can borrow) that much quota; "
    "resize the jobs, or add such a pool or quota"
)


def _jobs_text(jobs: list[SimJob], what: str) -> str:
    named = ", ".join(f"{j.name} ({j.chips} chips)" for j in jobs[:SHOWN])
    more = f" and {len(jobs) - SHOWN} more" if len(jobs) > SHOWN else ""
    return f"{what} {named}{more}"
