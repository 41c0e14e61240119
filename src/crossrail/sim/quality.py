"""A simulated job's quality curve: the eval loss it reports as it trains, so targets are met in simulation too.

    L(n) = l_inf + a * n ** -alpha        n: samples processed (work-seconds x samples_per_s)

The job evaluates every `eval_every` samples, as the reference trainers do every `eval_every` steps, and
reports `metric` at each: a sample the live runtime would send, at the simulated time its work reaches that
point. Where a job runs faster (its throughput on that chip type, its chips) it reaches the same loss
sooner; what that costs follows from the pool's price (docs/simulator.md#quality-curves-and-targets).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FIELDS = ("metric", "l_inf", "a", "alpha", "samples_per_s", "eval_every")


@dataclass(frozen=True)
class QualityCurve:
    """Loss as a power law of samples processed, evaluated every `eval_every` samples."""

    l_inf: float
    """The loss the job tends to with unlimited data."""
    a: float
    alpha: float
    samples_per_s: float
    """Samples processed per work-second (one second of the job on a reference chip at speed 1)."""
    eval_every: float
    """Samples between two evaluations."""
    metric: str = "eval_loss"

    def __post_init__(self) -> None:
        numbers = (self.l_inf, self.a, self.alpha, self.samples_per_s, self.eval_every)
        if not all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in numbers):
            raise ValueError("quality: l_inf, a, alpha, samples_per_s and eval_every must be finite numbers")
        if self.a < 0 or self.alpha <= 0 or self.samples_per_s <= 0 or self.eval_every <= 0:
            raise ValueError("quality: a must be >= 0, and alpha, samples_per_s and eval_every > 0")
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError("quality: metric must name the reported metric (eval_loss)")

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> QualityCurve:
        """From a job file's `quality:` mapping; a ValueError names what is wrong and the fields allowed."""
        unknown = sorted(set(data) - set(FIELDS))
        missing = [k for k in FIELDS[1:] if k not in data]
        if unknown or missing:
            what = f"unknown fields {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
            raise ValueError(f"quality: {what}; write {{l_inf, a, alpha, samples_per_s, eval_every[, metric]}}")
        return cls(**data)

    def loss(self, samples: float) -> float:
        """L(n); at n = 0 the curve is unbounded, so no evaluation happens there."""
        return float(self.l_inf + self.a * samples**-self.alpha)

    def samples_to(self, value: float) -> float:
        """Samples after which the loss is at or below `value` (inf when `value` <= l_inf)."""
        return math.inf if value <= self.l_inf else (self.a / (value - self.l_inf)) ** (1 / self.alpha)

    def evals(self, from_work_s: float, to_work_s: float) -> list[tuple[float, int, float]]:
        """Each evaluation after `from_work_s` up to `to_work_s` work-seconds: (work-seconds, samples, loss)."""
        first = math.floor(from_work_s * self.samples_per_s / self.eval_every + 1e-9) + 1
        last = math.floor(to_work_s * self.samples_per_s / self.eval_every + 1e-9)
        out = []
        for k in range(first, last + 1):
            n = k * self.eval_every
            out.append((n / self.samples_per_s, round(n), self.loss(n)))
        return out
