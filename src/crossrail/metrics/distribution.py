"""Summaries of durations: percentiles by linear interpolation and the Distribution they fill."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LARGE = 4096
"""From this many values on, a Distribution's order statistics come from numpy's selection, not a full sort."""


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
    low, high, fraction = _position(len(ordered), q)
    return _between(ordered[low], ordered[high], fraction)


def _position(count: int, q: float) -> tuple[int, int, float]:
    """The ranks (in ascending order) the q-th percentile of `count` values lies between, and how far."""
    position = (count - 1) * (q / 100)
    low = math.floor(position)
    return low, min(low + 1, count - 1), position - low


def _between(a: float, b: float, fraction: float) -> float:
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
        return cls.of_parts([values])

    @classmethod
    def of_parts(cls, parts: Sequence[Sequence[float]]) -> Distribution:
        """The distribution of all the values of `parts` together: `of` their concatenation, without building it.

        The figures do not depend on how the values are split or ordered: the percentiles read ranks of the
        sorted values and the mean is an exact sum (`math.fsum`) divided once."""
        count = sum(len(p) for p in parts)
        if count == 0:
            return EMPTY
        mean = math.fsum(itertools.chain.from_iterable(parts)) / count
        ranked: Sequence[float] | dict[int, float] | None = _ranks(parts, count) if count >= LARGE else None
        if ranked is None:
            ranked = sorted(itertools.chain.from_iterable(parts))
        p50, p95 = (_between(ranked[lo], ranked[hi], f) for lo, hi, f in (_position(count, 50), _position(count, 95)))
        return cls(count=count, p50=p50, p95=p95, mean=mean, max=float(ranked[count - 1]))

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "p50": self.p50, "p95": self.p95, "mean": self.mean, "max": self.max}


EMPTY = Distribution(count=0, p50=None, p95=None, mean=None, max=None)


def _ranks(parts: Sequence[Sequence[float]], count: int) -> dict[int, float] | None:
    """The values at the ranks a Distribution reads (its percentiles' and the maximum's), by numpy's
    selection (O(n), where sorting a million values in Python takes most of a second); None where that could
    differ from a sort's: values that are not all floats (an int beyond 2**53 rounds in float64), a NaN
    (sorted() leaves it where it was) or a negative zero (which of two equal zeros a rank holds shows in
    the sign)."""
    values = itertools.chain.from_iterable(parts)
    if not all(type(v) is float for v in values):
        return None
    import numpy as np  # here, not above: a small summary, and whoever imports metrics, need not load numpy

    array = np.fromiter(itertools.chain.from_iterable(parts), dtype=np.float64, count=count)
    if np.isnan(array).any() or np.signbit(array[array == 0]).any():
        return None
    wanted = sorted({*_position(count, 50)[:2], *_position(count, 95)[:2], count - 1})
    chosen = np.partition(array, wanted)[wanted].tolist()
    return dict(zip(wanted, chosen, strict=True))
