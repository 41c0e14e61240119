"""The allocation unit: a pool whose every gang is a whole number of k hosts is scheduled in k-host units.

The scheduling core keeps one slot per host and moves a gang host by host, so a 1,048,576-chip run on
256-chip hosts costs 4,096 steps each time it is admitted or ends, and a snapshot of a 12.5M-chip pool
copies 49,152 slots; in units of 256 hosts it is 16 steps and 192 slots. When every job that can run on a
pool asks for a whole number of k of its hosts (rigid, one gang, no slice shapes, no reservations pinning
hosts) and the pool holds a whole number of k hosts, every host is always wholly free or wholly taken in
groups of k, so a gang fits exactly when it fits on k-host units: the simulation schedules that pool with
`chips_per_host` x k and admits the same runs at the same times. Failures, elastic shrinking and
checkpoints still count the pool's real hosts (`Simulation` reads them from the fleet it was given).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from crossrail.sim.workload import SimJob
from crossrail.spec import Fleet, Pool


def unit_hosts(pool: Pool, jobs: Sequence[SimJob]) -> int:
    """The largest k such that every job that can run on `pool` takes whole multiples of k hosts (1: none)."""
    if pool.topologies:
        return 1
    per = pool.chips_per_host
    k = pool.chips // per
    for job in jobs:
        if job.parts:  # a pipeline's parts are gangs of their own sizes: schedule host by host
            return 1
        if job.chips > pool.chips or not job.runs_on(str(pool.accelerator)):
            continue
        if job.rate(pool.chip_type, pool.relative_speed) <= 0:
            continue
        if job.chips % per or job.workers > 1 or job.grows or (job.min_chips is not None and job.min_chips < job.chips):
            return 1
        k = math.gcd(k, job.chips // per)
        if k == 1:
            return 1
    return k


def scheduling_fleet(fleet: Fleet, jobs: Sequence[SimJob]) -> Fleet:
    """`fleet` as the scheduling core sees it: each pool in its allocation unit (the same fleet when all are 1)."""
    if fleet.spec.reservations:
        return fleet
    pools = []
    for pool in fleet.pools:
        k = unit_hosts(pool, jobs)
        pools.append(pool if k == 1 else pool.model_copy(update={"chips_per_host": pool.chips_per_host * k}))
    if all(a is b for a, b in zip(pools, fleet.pools, strict=True)):
        return fleet
    return fleet.model_copy(update={"spec": fleet.spec.model_copy(update={"pools": pools})})
