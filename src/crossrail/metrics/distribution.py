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


class Durations:
    """A tally's durations: values added one at a time (`values`, Python floats) and whole float64 arrays a
    bulk fold hands over (`arrays`, never changed once added), summarised together by `Distributions`
    without turning the arrays into Python floats."""

    __slots__ = ("arrays", "values")

    def __init__(self) -> None:
        self.values: list[float] = []
        self.arrays: list[Any] = []
        """1-d numpy float64 arrays."""

    def append(self, value: float) -> None:
        self.values.append(value)

    def add_array(self, array: Any) -> None:
        """Add every value of a 1-d float64 array (kept as it is: the caller must not change it later)."""
        if array.ndim != 1 or array.dtype.kind != "f" or array.dtype.itemsize != 8:
            raise ValueError(f"durations take a 1-d float64 array (got {array.ndim}-d {array.dtype})")
        if len(array):
            self.arrays.append(array)

    def __len__(self) -> int:
        return len(self.values) + sum(map(len, self.arrays))

    def tolist(self) -> list[float]:
        """Every value as a Python float: the values added one at a time first, then each array's."""
        return [*self.values, *itertools.chain.from_iterable(a.tolist() for a in self.arrays)]


class Distributions:
    """Distributions of the values of several lists and `Durations` together, for one snapshot of values that
    do not change while it lives: each list or array is checked, sorted and summed once, each union of them
    summarised once.

    The figures do not depend on how the values are split or ordered: the percentiles read ranks of the
    sorted values and the mean is an exact sum (as `math.fsum` gives) divided once. Numpy ranks and sums a
    union that holds arrays or `LARGE` values or more (1.5 million values sort in 14 ms there, in half a
    second in Python): each part is sorted alone and a union reads its ranks from its parts' sorted arrays
    without merging them (`_ranked`); each part's exact sum is a Python integer (`exact_sum`), a union's
    the sum of its parts'. That holds for values whose order numpy gives as Python's sort does: all floats (an int
    beyond 2**53 rounds in float64), no NaN (sorted() leaves it where it was), no negative zero (which of
    two equal zeros a rank holds shows in the sign); other values are sorted and summed in Python."""

    def __init__(self) -> None:
        self._parts: dict[int, _Part | None] = {}
        """id of a list or array -> its values sorted and summed, or None where only Python's sort is exact."""
        self._seen: dict[tuple[int, ...], Distribution] = {}

    def of(self, parts: Sequence[Sequence[float] | Durations]) -> Distribution:
        """The distribution of every value of `parts` (known by identity: the same union, the same object)."""
        lists: list[Sequence[float]] = []
        arrays: list[Any] = []
        for part in parts:
            if isinstance(part, Durations):
                if part.values:
                    lists.append(part.values)
                arrays.extend(part.arrays)
            elif len(part):
                lists.append(part)
        key = tuple(sorted(map(id, [*lists, *arrays])))
        found = self._seen.get(key)
        if found is None:
            found = self._seen[key] = self._summary(lists, arrays)
        return found

    def _summary(self, lists: list[Sequence[float]], arrays: list[Any]) -> Distribution:
        count = sum(map(len, lists)) + sum(map(len, arrays))
        if count == 0:
            return EMPTY
        if arrays or count >= LARGE:
            found = self._by_numpy(lists, arrays, count)
            if found is not None:
                return found
        values = [*itertools.chain.from_iterable(lists), *itertools.chain.from_iterable(a.tolist() for a in arrays)]
        return _read(sorted(values), math.fsum(values) / count, count)

    def _by_numpy(self, lists: list[Sequence[float]], arrays: list[Any], count: int) -> Distribution | None:
        """The distribution from numpy's sort and exact sums; None where numpy's order could differ."""
        import numpy as np  # here, not above: a small summary, and whoever imports metrics, need not load numpy

        parts = [self._part(p, listed=True) for p in lists] + [self._part(a, listed=False) for a in arrays]
        if any(p is None for p in parts):
            return None
        runs = [p.ordered for p in parts if p is not None]
        sums = [p.sum for p in parts if p is not None and p.sum is not None]
        if len(sums) == len(parts):
            # An int divided by an int is correctly rounded (to nearest, ties to even), as fsum's result is.
            mean = sum(sums) / _UNITS / count
        else:  # an infinite or huge value: as fsum says (or raises)
            mean = math.fsum(itertools.chain.from_iterable(r.tolist() for r in runs)) / count
        wanted = sorted({*_position(count, 50)[:2], *_position(count, 95)[:2], count - 1})
        values = runs[0][wanted] if len(runs) == 1 else _ranked(runs, np.array(wanted))
        return _read(dict(zip(wanted, values.tolist(), strict=True)), mean, count)

    def _part(self, values: Any, *, listed: bool) -> _Part | None:
        if id(values) not in self._parts:
            import numpy as np

            part = None
            if not listed or set(map(type, values)) == {float}:
                ordered = np.sort(np.array(values, dtype=np.float64) if listed else values)
                zeros = ordered[np.searchsorted(ordered, 0.0) : np.searchsorted(ordered, 0.0, side="right")]
                if not (np.isnan(ordered[-1]) or np.signbit(zeros).any()):  # a NaN sorts last, zeros together
                    moderate = ordered[0] > -_LIMIT and ordered[-1] < _LIMIT
                    part = _Part(ordered, exact_sum(ordered) if moderate else None)
            self._parts[id(values)] = part
        return self._parts[id(values)]


@dataclass(frozen=True, slots=True)
class _Part:
    ordered: Any
    """The values as a sorted float64 array."""
    sum: int | None
    """Their exact sum in units of 2**-1074 (`exact_sum`); None where one is beyond `_LIMIT` (infinite, or
    large enough that fsum's partial sums could overflow, where fsum raises)."""


def _ranked(runs: list[Any], ranks: Any) -> Any:
    """The values at `ranks` (0-based, ascending) of the union of sorted float64 arrays (no NaN, no negative
    zero), without merging them: for each rank, the least float with more than that many values at or below
    it, found by bisecting the floats in their order (as unsigned integers, `_order`); each step counts the
    values at or below by a binary search of each array."""
    import numpy as np

    low = np.full(len(ranks), _order(np.array([min(r[0] for r in runs)]))[0])
    high = np.full(len(ranks), _order(np.array([max(r[-1] for r in runs)]))[0])
    need = ranks + 1
    while (low < high).any():
        middle = low + (high - low) // 2
        values = _float(middle)
        enough = sum(np.searchsorted(r, values, side="right") for r in runs) >= need
        high = np.where(enough, middle, high)
        low = np.where(enough, low, middle + 1)
    values = _float(high)
    values[values == 0] = 0.0  # -0.0 counts as 0.0 and comes first in the order; the arrays hold only 0.0
    return values


_SIGN = 1 << 63


def _order(values: Any) -> Any:
    """float64 -> uint64 in the same order (-0.0 just below 0.0): positives gain the sign bit, negatives flip."""
    import numpy as np

    bits = values.view(np.uint64)
    return np.where(bits >= _SIGN, ~bits, bits | np.uint64(_SIGN))


def _float(order: Any) -> Any:
    """The inverse of `_order`."""
    import numpy as np

    return np.where(order >= _SIGN, order ^ np.uint64(_SIGN), ~order).view(np.float64)


def _read(ranked: Sequence[float] | dict[int, float], mean: float, count: int) -> Distribution:
    """The Distribution of `count` values from their values at the ranks it reads (ascending) and their mean."""
    (lo50, hi50, f50), (lo95, hi95, f95) = _position(count, 50), _position(count, 95)
    return Distribution(
        count=count,
        p50=_between(ranked[lo50], ranked[hi50], f50),
        p95=_between(ranked[lo95], ranked[hi95], f95),
        mean=mean,
        max=float(ranked[count - 1]),
    )


_UNITS = 1 << 1074
_LIMIT = 2.0**960
"""Below this magnitude no sum of fewer than 2**63 values overflows float64."""


def exact_sum(array: Any) -> int:
    """The exact sum of a finite float64 array, as an integer count of 2**-1074 (the smallest float64 step):
    `exact_sum(a) / 2**1074` is `math.fsum(a.tolist())` to the bit, three times faster on a sorted array.

    A value is its integer significand times 2 to the power of its exponent. Each run of values of one sign
    and exponent (a sorted array has one run per sign and exponent) sums its significands in int64, split
    into 26-bit halves so that no sum overflows below 2**36 values; the run sums are shifted into place as
    Python integers. Correct for any order, but an unsorted array has many runs, each a Python step.
    """
    import numpy as np

    bits = np.ascontiguousarray(array, dtype=np.float64).view(np.int64)
    if not len(bits):
        return 0
    key = bits >> 52  # the sign and the biased exponent
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    significand = (bits & ((1 << 52) - 1)) | (1 << 52)  # with the leading bit, taken back below where none is
    high = np.add.reduceat(significand >> 26, starts).tolist()
    low = np.add.reduceat(significand & ((1 << 26) - 1), starts).tolist()
    sizes = np.diff(starts, append=len(bits)).tolist()
    total = 0
    for k, h, lo, n in zip(key[starts].tolist(), high, low, sizes, strict=True):
        e = k & 0x7FF  # the biased exponent: 0 for zeros and subnormals, which have no leading bit
        run = ((h << 26) + lo - (0 if e else n << 52)) << max(e - 1, 0)  # significand * 2**(max(e, 1) - 1075)
        total += -run if k < 0 else run
    return total
