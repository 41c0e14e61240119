"""Checks before a simulation starts: every job has a stage queue and a pool that can ever run it."""

from __future__ import annotations

from collections.abc import Iterable

from crossrail.errors import PlacementError, Problem, SpecError
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
        problems = [Problem(fleet.name, "spec.queues", f"no queue for stage {s!r}", fix=fix) for s in sorted(missing)]
        raise SpecError(problems)
    return out


def check_jobs(fleet: Fleet, jobs: Iterable[SimJob], *, native: bool) -> dict[str, tuple[str, ...] | None]:
    """Job -> accelerators the scheduler may place it on (None: any); PlacementError for jobs no pool can run.

    Through the scheduling core (`native`), pools are told apart by accelerator only, so a job with a
    throughput row must run on every pool of each accelerator it is allowed on.
    """
    states = {p.name: PoolState(p) for p in fleet.pools}
    reach = quota_reach(fleet) if native else None
    kinds = sorted({str(p.accelerator) for p in fleet.pools})
    allow: dict[str, tuple[str, ...] | None] = {}
    never, split = [], []
    seen: dict[tuple[object, ...], tuple[str, ...] | None] = {}
    for job in jobs:
        # Jobs without a throughput row that ask alike get alike answers: decide each shape once.
        key = (job.chips, job.stage, job.team, job.accelerators) if not job.throughput else None
        if key is not None and key in seen:
            allow[job.name] = seen[key]
            continue
        holds = [
            p
            for p in fleet.pools
            if p.chips >= job.chips and states[p.name].allows(job.chips) and job.runs_on(str(p.accelerator))
        ]
        if reach is not None:
            queue = fleet.queue_for(job.stage, job.team)
            holds = [p for p in holds if queue is None or reach.get((queue.name, p.name), 0) >= job.chips]
        runs = {p.name for p in holds if job.rate(p.chip_type, p.relative_speed) > 0}
        if not runs:
            never.append(job)
            continue
        ok = [k for k in kinds if all(p.name in runs for p in holds if str(p.accelerator) == k)]
        ok = [k for k in ok if any(str(p.accelerator) == k for p in holds)]
        if native and not ok:
            split.append(job)
            continue
        allow[job.name] = None if len(ok) == len(kinds) or not native else tuple(ok)
        if key is not None:
            seen[key] = allow[job.name]
    if never:
        raise PlacementError(_jobs_text(never, "no pool of the fleet can ever run") + _NEVER_FIX)
    if split:
        fix = (
            "; give its chip types separate accelerators, or use a policy that places by throughput (e.g. fifo_hetero)"
        )
        raise PlacementError(_jobs_text(split, "the scheduling core cannot keep off pools that cannot run") + fix)
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
