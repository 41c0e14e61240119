"""Could any pool of the fleet ever hold a request? Decided at submit, before a run is created."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from crossrail.errors import PlacementError
from crossrail.spec import Experiment, Fleet, Pool


@dataclass(frozen=True)
class PoolFit:
    pool: str
    fits: bool
    reason: str


def gang_problem(gangs: Sequence[int], capacity: int, sizes: Collection[int] | None = None) -> str | None:
    """Why a pool of `capacity` chips (allocating `sizes`, when it only has some) can never hold a run whose
    gangs are `gangs`, or None when it can. A run is one gang; a pipeline's gangs are its parts, each placed
    as its own allocation (the cycle links them), so a pipeline of 4 + 1 + 4 chips fits pools of 8.

    The one feasibility rule submit, validate, place, queue and the agent's estimates share."""
    part = len(gangs) > 1
    for chips in gangs:
        if chips > capacity:
            return f"needs {chips} chips{' for one part' if part else ''}; the pool has {capacity}"
        if sizes is not None and chips not in sizes:
            return f"no slice of the pool has {chips} chips"
    return None


def held_chips(chips: int, gangs: Sequence[int], capacity: int) -> int:
    """The chips a run holds at once on a pool of `capacity`: all of them, or, for a pipeline whose parts do
    not fit together, the whole pool (its parts take turns or spread to other pools)."""
    return chips if len(gangs) <= 1 else min(chips, capacity)


def feasible_pools(exp: Experiment, fleet: Fleet) -> list[PoolFit]:
    """For every pool, whether it could ever hold `exp` and, if not, why."""
    return [_fit(exp, fleet, pool) for pool in fleet.spec.pools]


def require_feasible(exp: Experiment, fleet: Fleet) -> list[PoolFit]:
    """The pools that could hold `exp`; a PlacementError naming every pool's reason when none can.

    A pipeline (`spec.parts`) is held part by part: each part needs a pool that could hold it alone."""
    if exp.spec.parts:
        return _require_parts(exp, fleet)
    fits = feasible_pools(exp, fleet)
    if not any(f.fits for f in fits):
        res = exp.spec.resources
        want = f"{res.chips} chips" if res.min_chips is None else f"{res.min_chips}..{res.max_chips or res.chips} chips"
        lines = [f"  {f.pool}: {f.reason}" for f in fits] or ["  the fleet has no pools"]
        raise PlacementError(
            f"no pool of fleet {fleet.metadata.name!r} could ever hold {exp.metadata.name} ({want}):\n"
            + "\n".join(lines)
            + "\nchange spec.resources or spec.accelerators, or add a pool to the fleet"
        )
    return [f for f in fits if f.fits]


def _require_parts(exp: Experiment, fleet: Fleet) -> list[PoolFit]:
    """Each part fits some pool on its own (the cycle places the parts as linked allocations)."""
    held: dict[str, PoolFit] = {}
    for name, part in exp.spec.parts.items():
        alone = exp.spec.model_copy(
            update={
                "resources": exp.spec.resources.model_copy(
                    update={"chips": part.total_chips, "min_chips": None, "max_chips": None}
                ),
                "parallelism": part.parallelism.model_copy(update={"data": part.replicas * part.parallelism.data}),
                "parts": {},
            }
        )
        try:
            fits = require_feasible(exp.model_copy(update={"spec": alone}), fleet)
        except PlacementError as exc:
            said = str(exc).replace(f"hold {exp.metadata.name} (", f"hold part {name} of {exp.metadata.name} (", 1)
            raise PlacementError(said.replace("spec.resources", f"spec.parts.{name}", 1)) from None
        held |= {f.pool: f for f in fits}
    return list(held.values())


def _fit(exp: Experiment, fleet: Fleet, pool: Pool) -> PoolFit:
    res = exp.spec.resources
    low, high = res.min_chips or res.chips, max(res.max_chips or res.chips, res.chips)
    allow = exp.spec.accelerators.allow if exp.spec.accelerators and exp.spec.accelerators.allow else None
    if allow is not None and pool.accelerator not in allow:
        kinds = ", ".join(str(a) for a in allow)
        return PoolFit(pool.name, False, f"{pool.accelerator} is not in spec.accelerators.allow [{kinds}]")
    too_big = gang_problem([low], pool.chips)
    if too_big is not None:
        return PoolFit(pool.name, False, too_big)
    data = exp.spec.parallelism.data
    unit = res.chips // data if data > 1 and res.chips % data == 0 else None
    sizes = allocatable_sizes(pool, low, min(high, pool.chips), unit)
    if not sizes:
        return PoolFit(pool.name, False, _shape_reason(pool, low, high))
    quota = _quota(exp, fleet, pool.name)
    if quota is not None and quota < min(sizes):
        return PoolFit(pool.name, False, f"the {exp.spec.stage} queue may use at most {quota} chips of this pool")
    return PoolFit(pool.name, True, f"fits as {min(sizes)} chips")


def allocatable_sizes(pool: Pool, low: int, high: int, unit: int | None = None) -> list[int]:
    """Chip counts in [low, high] the pool can allocate as one gang (of workers of `unit` chips, when given)."""
    shapes = pool.topology_shapes
    if pool.accelerator == "tpu" and shapes:
        per_host = pool.chips_per_host
        # A slice above one host spans whole hosts, as the admission allocator places it.
        return sorted(
            {n for s in shapes if low <= (n := math.prod(s)) <= high and (n <= per_host or n % per_host == 0)}
        )
    per_host = pool.chips_per_host
    if unit is not None and unit <= per_host:  # workers spread over hosts in whole workers (pool.py)
        return [n for n in range(low, high + 1) if n % unit == 0]
    return [n for n in range(low, high + 1) if n <= per_host or n % per_host == 0]


def _shape_reason(pool: Pool, low: int, high: int) -> str:
    want = str(low) if low == high else f"{low}..{high}"
    if pool.accelerator == "tpu" and pool.topology_shapes:
        shapes = ", ".join(f"{'x'.join(map(str, s))}={math.prod(s)}" for s in pool.topology_shapes)
        return f"no allowed slice shape has {want} chips (shapes: {shapes})"
    return f"{want} chips span hosts of {pool.chips_per_host} chips; above one host request whole hosts"


def _quota(exp: Experiment, fleet: Fleet, pool: str) -> int | None:
    """Chips of `pool` the experiment's queue could ever use: its own quota plus its cohort's."""
    queue = fleet.queue_for(exp.spec.stage, exp.metadata.team)
    if queue is None:
        return None
    total = queue.quota.get(pool, 0)
    if queue.cohort:
        total += sum(
            q.quota.get(pool, 0) for q in fleet.spec.queues if q.cohort == queue.cohort and q.name != queue.name
        )
    return total
