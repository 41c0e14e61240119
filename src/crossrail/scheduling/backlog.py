"""The backlog controller of an RL pipeline: stage metrics and bounds in, new part sizes and why out.

A pure function over one window of metrics, for the simulator and the live control loop alike:
`control(metrics, sizes, bounds)`. It reads the stage metrics the RL workload reports (samples_per_second
per stage, learner idle seconds, policy lag, time the lag bound held the samplers) and sizes the sampler
and reward parts so the learner has data and the policy lag stays within its bound:

1. Lag over the bound, or the lag bound holding the samplers back most of the window while the learner
   has work: the samplers outrun the learner; shrink them from what they could make (their rate over
   the time they were not held back) to what the learner consumes.
2. The learner idle more than `idle_target` (it idles only waiting for data): the stage feeding it is
   short. The reward stage when it scored fewer samples than the samplers made (its backlog grew),
   else the samplers; grow that
   part to the rate the learner could consume, within its bound and the chips its pool has free. When
   that part cannot grow, shrink the learner to the supply instead (its chips go back to the fleet).
3. Otherwise nothing changes (a dead band of `slack`, so sizes do not flap).

Sizes are replicas of a part (whole workers of `chips_per_replica` chips each). Every change is a
`Resize` with the part, old and new size and a sentence; the caller applies it through the scheduler
(`Scheduler.resized` of the part's allocation) and records a `resized` event with the same fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["LEARNER", "REWARD", "SAMPLER", "Bounds", "Resize", "StageMetrics", "control"]

SAMPLER, REWARD, LEARNER = "sampler", "reward", "learner"


@dataclass(frozen=True)
class StageMetrics:
    """One window of the pipeline's stage metrics (the names the placement policy uses)."""

    window_s: float
    sampler_samples_per_second: float
    """Samples the samplers produced per second (what they could, when never held back by the lag bound)."""
    reward_samples_per_second: float
    learner_samples_per_second: float
    """Samples the learner consumed per second."""
    learner_idle_seconds: float
    policy_lag_steps: float
    """The largest policy lag of a sample the learner used in the window."""
    sampler_held_seconds: float = 0.0
    """Seconds the samplers waited because the lag bound held them back, summed over sampler replicas."""

    @property
    def learner_idle_fraction(self) -> float:
        return min(self.learner_idle_seconds / self.window_s, 1.0) if self.window_s > 0 else 0.0


@dataclass(frozen=True)
class Bounds:
    """What the controller may do: each part's replica range, the lag bound, and the dead band."""

    max_policy_lag_steps: int
    replicas: dict[str, tuple[int, int]] = field(default_factory=dict)
    """part -> (least, most) replicas; a part not named keeps its size."""
    free: dict[str, int] = field(default_factory=dict)
    """part -> replicas its pool could add now (its free chips over chips per replica); absent: no limit."""
    idle_target: float = 0.1
    """The learner idle fraction the controller tolerates."""
    slack: float = 0.1
    """Relative change below which nothing is resized."""


@dataclass(frozen=True)
class Resize:
    part: str
    old: int
    new: int
    reason: str


def control(metrics: StageMetrics, sizes: dict[str, int], bounds: Bounds) -> list[Resize]:
    """The resizes this window calls for (empty: keep every size)."""
    idle = metrics.learner_idle_fraction
    demand = _learner_capacity(metrics)
    held = _held_fraction(metrics, sizes.get(SAMPLER, 1))
    if metrics.policy_lag_steps > bounds.max_policy_lag_steps or (idle <= bounds.idle_target and held > 0.5):
        why = _outrun_reason(metrics, idle, held, bounds)
        return _to_rate(SAMPLER, _sampler_capacity(metrics, held), demand, sizes, bounds, why=why)
    if idle <= bounds.idle_target:
        return []
    scored_less = metrics.reward_samples_per_second < metrics.sampler_samples_per_second * (1 - bounds.slack)
    short = REWARD if scored_less and REWARD in sizes else SAMPLER
    supply = metrics.reward_samples_per_second if short == REWARD else metrics.sampler_samples_per_second
    why = (
        f"learner idle {idle:.0%} of {metrics.window_s:.0f}s waiting for samples; "
        f"{short} supplies {supply:.1f} samples/s, the learner could take {demand:.1f}"
    )
    grown = _to_rate(short, supply, demand, sizes, bounds, why=why)
    if grown or LEARNER not in sizes:
        return grown
    # The short part cannot grow (its bound, or its pool has no chips): move the learner's chips back to
    # the fleet instead, sizing it to the supply it gets.
    return _to_rate(LEARNER, demand, supply, sizes, bounds, why=f"{why}, and {short} cannot grow")


def _learner_capacity(metrics: StageMetrics) -> float:
    """Samples/s the learner would consume if it never waited: its rate over the time it was busy."""
    busy = metrics.window_s - metrics.learner_idle_seconds
    if busy <= 0:
        return math.inf
    return metrics.learner_samples_per_second * metrics.window_s / busy


def _held_fraction(metrics: StageMetrics, replicas: int) -> float:
    """The share of the window the lag bound held the samplers back (their held seconds over replicas)."""
    if metrics.window_s <= 0 or replicas <= 0:
        return 0.0
    return min(metrics.sampler_held_seconds / (metrics.window_s * replicas), 1.0)


def _sampler_capacity(metrics: StageMetrics, held: float) -> float:
    """Samples/s the samplers would make if the lag bound never held them back."""
    if held >= 1.0:
        return math.inf
    return metrics.sampler_samples_per_second / (1.0 - held)


def _outrun_reason(metrics: StageMetrics, idle: float, held: float, bounds: Bounds) -> str:
    if metrics.policy_lag_steps > bounds.max_policy_lag_steps:
        return f"policy lag {metrics.policy_lag_steps:.0f} steps is over the bound {bounds.max_policy_lag_steps}"
    return f"samplers held back by the lag bound {held:.0%} of the window while the learner idled {idle:.0%}"


def _to_rate(
    part: str, supply: float, demand: float, sizes: dict[str, int], bounds: Bounds, *, why: str
) -> list[Resize]:
    """Resize `part` so its rate (`supply` at its current size) meets `demand`, within its bounds."""
    old = sizes.get(part)
    if old is None or part not in bounds.replicas or supply <= 0:
        return []
    least, most = bounds.replicas[part]
    most = min(most, old + bounds.free.get(part, most))
    wanted = old * demand / supply if math.isfinite(demand) else most
    new = max(least, min(most, math.ceil(wanted - 1e-9)))
    if new == old or abs(new - old) < bounds.slack * old:
        return []
    limit = "" if new == math.ceil(wanted - 1e-9) else f" (held to {least}..{most})"
    return [Resize(part, old, new, f"{why}: {part} {old} -> {new}{limit}")]
