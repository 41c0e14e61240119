"""Summaries of durations: percentiles by linear interpolation and the Distribution they fill."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LARGE = 4096
"""From this many values on, a Distribution's ranks come from numpy's sort, not Python's (`Distributions`)."""


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
        return Distributions().of([values])

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "p50": self.p50, "p95": self.p95, "mean": self.mean, "max": self.max}


EMPTY = Distribution(count=0, p50=None, p95=None, mean=None, max=None)


class Distributions:
    """Distributions of the values of several lists together, for one snapshot of lists that do not change
    while it lives: each list is checked and converted once, each union of lists summarised once.

    The figures do not depend on how the values are split or ordered: the percentiles read ranks of the
    sorted values and the mean is an exact sum (`math.fsum`) divided once. From `LARGE` values on, the
    ranks come from numpy's sort (1.5 million values sort in 14 ms there, in half a second in Python) for
    values whose order numpy gives as Python's sort does: all floats (an int beyond 2**53 rounds in
    float64), no NaN (sorted() leaves it where it was), no negative zero (which of two equal zeros a rank
    holds shows in the sign); other values are sorted in Python."""

    def __init__(self) -> None:
        self._arrays: dict[int, Any] = {}
        """id of a list -> its values as a float64 array, or None where only Python's sort is exact."""
        self._seen: dict[tuple[int, ...], Distribution] = {}

    def of(self, parts: Sequence[Sequence[float]]) -> Distribution:
        """The distribution of every value of `parts` (lists known by identity: the same union, the same object)."""
        parts = [p for p in parts if len(p)]
        key = tuple(sorted(map(id, parts)))
        found = self._seen.get(key)
        if found is None:
            found = self._seen[key] = self._summary(parts)
        return found

    def _summary(self, parts: list[Sequence[float]]) -> Distribution:
        count = sum(map(len, parts))
        if count == 0:
            return EMPTY
        mean = math.fsum(itertools.chain.from_iterable(parts)) / count
        ranked: Sequence[float] | dict[int, float] | None = self._ranks(parts, count) if count >= LARGE else None
        if ranked is None:
            ranked = sorted(itertools.chain.from_iterable(parts))
        (lo50, hi50, f50), (lo95, hi95, f95) = _position(count, 50), _position(count, 95)
        return Distribution(
            count=count,
            p50=_between(ranked[lo50], ranked[hi50], f50),
            p95=_between(ranked[lo95], ranked[hi95], f95),
            mean=mean,
            max=float(ranked[count - 1]),
        )

    def _ranks(self, parts: list[Sequence[float]], count: int) -> dict[int, float] | None:
        """The values at the ranks a Distribution reads, as Python floats; None where numpy's order could differ."""
        import numpy as np  # here, not above: a small summary, and whoever imports metrics, need not load numpy

        arrays = [self._array(p) for p in parts]
        if any(a is None for a in arrays):
            return None
        ordered = np.sort(arrays[0] if len(arrays) == 1 else np.concatenate(arrays))
        wanted = sorted({*_position(count, 50)[:2], *_position(count, 95)[:2], count - 1})
        return dict(zip(wanted, ordered[wanted].tolist(), strict=True))

    def _array(self, values: Sequence[float]) -> Any:
        if id(values) not in self._arrays:
            import numpy as np

            array = None
            if set(map(type, values)) == {float}:
                array = np.array(values, dtype=np.float64)
                if np.isnan(array).any() or np.signbit(array[array == 0]).any():
                    array = None
            self._arrays[id(values)] = array
        return self._arrays[id(values)]
