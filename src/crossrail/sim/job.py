"""The simulated job: what it asks for, how much work it is, when it arrives, and how fast it runs where.

A job's `work_s` is its run time on a reference chip at speed 1. On a pool it progresses at
`throughput[pool.chip_type]` work units per second when `throughput` is given (a Gavel-style matrix row:
a type absent or at 0 cannot run the job), else at the pool's `relative_speed`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from crossrail.scheduling.decisions import RetryPolicy
from crossrail.scheduling.types import PartRequest, part_key
from crossrail.sim.quality import QualityCurve


@dataclass(frozen=True)
class SimJob:
    """One job to simulate: what it asks for, how much work it is, and when it arrives (seconds from 0)."""

    name: str
    stage: str
    chips: int
    work_s: float
    submit_s: float = 0.0
    team: str | None = None
    priority: str = "normal"
    throughput: Mapping[str, float] = field(default_factory=dict)
    elastic: bool = False
    min_chips: int | None = None
    max_chips: int | None = None
    """`resources.max_chips`: above `chips`, the most it can use; the scheduling cycle may grow it to that."""
    prefer: str = "any"
    estimate_s: float | None = None
    """The run time a user would declare (`resources.duration`); None: `work_s` at speed 1."""
    accelerators: tuple[str, ...] | None = None
    """Accelerator kinds (`tpu`, `gpu`) it may run on; None: any."""
    workers: int = 1
    """Data-parallel workers: one gang the scheduling core admits whole, spread over hosts in whole workers."""
    quality: QualityCurve | None = None
    """The eval loss it reports as it trains (crossrail.sim.quality); None: it reports none."""
    target: Mapping[str, Any] | None = None
    """`spec.target` ({metric, op, value}): its `submitted` event carries it, and metrics find when it is met."""
    retries: RetryPolicy | None = None
    """`spec.retries` (how often an interrupted attempt retries, its back-off); None: the simulation's policy."""
    checkpoint_every_s: float | None = None
    """`spec.checkpoint.every`: its checkpoint interval; None: the simulation's interval chooser decides."""
    parent: str | None = None
    """`spec.parent.run` (from its `latest` checkpoint): queued only once that job of the workload has ended."""
    parts: tuple[PartRequest, ...] = ()
    """`spec.parts`: a pipeline, its parts admitted together, each an attempt of its own (docs/simulator.md)."""
    part_work_s: Mapping[str, float] = field(default_factory=dict)
    """Each part's work at speed 1; a part not named runs until its pipeline ends (a sampler beside a learner)."""

    def part(self, name: str) -> SimJob:
        """Part `name` of this pipeline as a job of its own: its chips, workers and work, under its part key."""
        declared = next(p for p in self.parts if p.name == name)
        return replace(
            self,
            name=part_key(self.name, name),
            chips=declared.chips,
            work_s=self.part_work_s.get(name, math.inf),
            workers=declared.workers,
            prefer=declared.prefer or self.prefer,
            elastic=False,
            min_chips=None,
            max_chips=None,
            parts=(),
            part_work_s={},
        )

    def runs_on(self, accelerator: str) -> bool:
        return self.accelerators is None or accelerator in self.accelerators

    def rate(self, chip_type: str, relative_speed: float) -> float:
        """Work units per second on a pool of `chip_type`; 0 when the job cannot run there."""
        if self.throughput:
            return max(float(self.throughput.get(chip_type, 0.0)), 0.0)
        return relative_speed

    def gang_rate(self, chip_type: str, relative_speed: float, chips: int) -> float:
        """Work units per second of a gang of `chips` on a pool of `chip_type` (the job's rate scaled to it)."""
        return self.rate(chip_type, relative_speed) * chips / self.chips

    @property
    def grows(self) -> bool:
        """Whether the scheduling cycle may grow it past its chips (`max_chips` above `chips`)."""
        return self.max_chips is not None and self.max_chips > self.chips

    @property
    def declared_s(self) -> float:
        return self.estimate_s if self.estimate_s is not None else self.work_s
