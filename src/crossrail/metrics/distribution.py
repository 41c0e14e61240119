"""Summaries of durations: percentiles by linear interpolation and the Distribution they fill."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile of `values` (q in [0, 100]), interpolated linearly as numpy's default does.

    Raises ValueError for an empty sequence or a q outside [0, 100].
    """
    if not values:
        raise ValueError("the percentile of no values is undefined; pass at least one value")
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile must be between 0 and 100 (got {q})")
    return _percentile_of_sorted(sorted(values), q)


def _percentile_of_sorted(ordered: Sequence[float], q: float) -> float:
    position = (len(ordered) - 1) * (q / 100)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    fraction = position - low
    a, b = ordered[low], ordered[high]
    # The same two-sided form as numpy's lerp, so results agree to the last bit.
    if fraction >= 0.5:
        return b - (b - a) * (1 - fraction)
    return a + (b - a) * fraction


@dataclass(frozen=True)
class Distribution:
    """Count, median, 95th percentile, mean and maximum of durations in seconds; None when count is 0."""

    count: int
    p50: float | None
    p95: float | None
    mean: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        if not values:
            return EMPTY
        ordered = sorted(values)
        return cls(
            count=len(ordered),
            p50=_percentile_of_sorted(ordered, 50),
            p95=_percentile_of_sorted(ordered, 95),
            mean=math.fsum(ordered) / len(ordered),
            max=float(ordered[-1]),
        )

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "p50": self.p50, "p95": self.p95, "mean": self.mean, "max": self.max}


EMPTY = Distribution(count=0, p50=None, p95=None, mean=None, max=None)
