"""Capacity that arrives, in the simulator: spot reclaims at a pool's interruption rate, the provisioning wait
of flex-start and autoscaled pools, and the pool placement's estimates pick when pools are priced with them.

A pool with `interruptions_per_chip_hour` reclaims a running attempt of `chips` chips after an exponential
time of rate `interruptions_per_chip_hour x chips` per hour (drawn from a generator of its own, so a fleet
without such pools draws exactly what it drew before); the attempt loses its work since the last checkpoint
and is retried, as a run the agent sees reclaimed. A pool with `provisioning` holds an admitted attempt's
chips for its `provisioning_wait` before the attempt restores and runs (Kueue reserves the quota while the
ProvisioningRequest is pending). In a fleet where any pool has either term, each job is placed as the agent
places it (`scheduling.estimate.estimate_placements`, under the default placement policy's objective for its
stage): tried first on the pool the estimates pick, the others after the fleet's fallback wait.
"""

from __future__ import annotations

import math

import numpy as np

from crossrail.scheduling.estimate import PlacementWork, PoolInfo, estimate_placements
from crossrail.sim.workload import SimJob
from crossrail.spec import Fleet, default_policy


class Capacity:
    """The pools' capacity terms for one simulation, with the generator its spot reclaims draw from."""

    def __init__(self, fleet: Fleet, seed: int, checkpoint_every_s: float | None = None) -> None:
        self.pools = {p.name: PoolInfo.from_spec(p, fleet.spec.currency) for p in fleet.pools}
        self.priced = any(p.interruptions_per_chip_hour > 0 or p.provisioning is not None for p in fleet.pools)
        """Whether placement's estimates differ between pools by these terms, so the simulation asks them."""
        self.checkpoint_every_s = checkpoint_every_s
        self.rng = np.random.default_rng([seed, 0x5907])
        self.policy = default_policy()

    def wait_s(self, pool: str) -> float:
        """How long an attempt admitted to `pool` waits for its nodes (0 unless provisioned on demand)."""
        info = self.pools[pool]
        return info.provisioning_wait_s if info.provisioning is not None else 0.0

    def reclaim_in_s(self, pool: str, chips: int) -> float:
        """When the pool reclaims an attempt of `chips` chips, from when it starts running (inf: never)."""
        per_hour = self.pools[pool].interruptions_per_chip_hour * chips
        return float(self.rng.exponential(3600.0 / per_hour)) if per_hour > 0 else math.inf

    def pick(self, job: SimJob, allowed: tuple[str, ...] | None) -> tuple[str, str] | None:
        """The pool placement's estimates pick for `job`, with why; None where no pool is priced differently."""
        if not self.priced:
            return None
        every = job.checkpoint_every_s if job.checkpoint_every_s is not None else self.checkpoint_every_s
        work = PlacementWork(
            run=job.name,
            chips=job.chips,
            stage=job.stage,
            reference_s=job.declared_s,
            prefer=job.prefer,
            allow=allowed,
            objective=str(self.policy.objective_for(job.stage)),
            checkpoint_every_s=every,
        )
        waits = {name: 0.0 for name, info in self.pools.items() if info.capacity >= job.chips}
        choice = estimate_placements(work, list(self.pools.values()), waits)
        return (choice.pool, choice.reason) if choice.pool is not None else None
