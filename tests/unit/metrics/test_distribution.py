"""Percentiles agree with numpy's default (linear) method; distributions summarise durations."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossrail.metrics import Distribution, percentile
from crossrail.metrics.distribution import LARGE, Distributions

# Expected values are what numpy.percentile returns for the same input, bit for bit.
KNOWN = [
    pytest.param([15, 20, 35, 40, 50], 40, 29.0, id="the-textbook-example"),
    pytest.param([1, 2, 3, 4], 50, 2.5, id="median-of-an-even-count-is-the-midpoint"),
    pytest.param([1, 2, 3, 4], 95, 3.8499999999999996, id="p95-interpolates-between-the-top-two"),
    pytest.param([100, 200, 400], 95, 380.0, id="p95-of-three-waits"),
    pytest.param([10, 0, 5], 25, 2.5, id="unsorted-input-is-sorted-first"),
    pytest.param([3.0], 95, 3.0, id="one-value-is-every-percentile"),
    pytest.param([1, 2, 3, 4], 0, 1.0, id="p0-is-the-minimum"),
    pytest.param([1, 2, 3, 4], 100, 4.0, id="p100-is-the-maximum"),
    pytest.param([0.1, 0.7, 0.2], 33.3, 0.1666, id="a-fractional-q"),
]


@pytest.mark.parametrize(("values", "q", "expected"), KNOWN)
def test_percentile_matches_numpy_linear_interpolation(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


@pytest.mark.parametrize(
    ("values", "q", "message"),
    [
        pytest.param([], 50, "at least one value", id="no-values"),
        pytest.param([1.0], 101, "between 0 and 100", id="q-above-100"),
        pytest.param([1.0], -1, "between 0 and 100", id="q-below-0"),
    ],
)
def test_percentile_refuses_what_has_no_answer(values: list[float], q: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        percentile(values, q)


@given(
    st.lists(st.floats(min_value=0, max_value=1e7), min_size=1, max_size=50),
    st.floats(min_value=0, max_value=100),
)
def test_a_percentile_lies_within_the_values_whatever_their_order(values: list[float], q: float) -> None:
    p = percentile(values, q)

    assert min(values) <= p <= max(values)
    assert percentile(values[::-1], q) == p
    assert (percentile(values, 0), percentile(values, 100)) == (min(values), max(values))


def test_a_distribution_summarises_durations() -> None:
    assert Distribution.of([30.0, 90.0, 60.0]) == Distribution(count=3, p50=60.0, p95=87.0, mean=60.0, max=90.0)


def test_an_empty_distribution_has_a_count_and_nothing_else() -> None:
    empty = Distribution.of([])

    assert empty == Distribution(count=0, p50=None, p95=None, mean=None, max=None)
    assert empty.as_dict() == {"count": 0, "p50": None, "p95": None, "mean": None, "max": None}


def _by_sorting(values: list[float]) -> Distribution:
    """The definition, written out: ranks of the sorted values, an exact mean."""
    return Distribution(
        count=len(values),
        p50=percentile(values, 50),
        p95=percentile(values, 95),
        mean=math.fsum(values) / len(values),
        max=float(max(values)),
    )


def _bits(d: Distribution) -> tuple[object, ...]:
    return tuple(v.hex() if isinstance(v, float) else v for v in d.as_dict().values())


@pytest.mark.parametrize(
    "count", [LARGE - 1, LARGE, 3 * LARGE + 7], ids=["python-sort", "numpy-sort", "numpy-sort-odd"]
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_large_distribution_has_the_sorted_figures_bit_for_bit(count: int, seed: int) -> None:
    rng = random.Random(seed)
    # Durations as a simulation makes them: wide magnitudes, many ties, zeros (a swap at its own start).
    values = [rng.choice([0.0, 360.0, rng.expovariate(1e-3), rng.uniform(0, 1e6)]) for _ in range(count)]
    cut = rng.randrange(count)

    whole = Distribution.of(values)

    assert _bits(whole) == _bits(_by_sorting(values))
    assert _bits(Distributions().of([values[cut:], [], values[:cut]])) == _bits(whole)


@pytest.mark.parametrize(
    "odd",
    [
        pytest.param(-0.0, id="a-negative-zero-keeps-the-sign-a-sort-gives"),
        pytest.param(2**60 + 1, id="an-int-beyond-float-precision"),
        pytest.param(7, id="an-int"),
    ],
)
def test_values_numpy_could_rank_differently_are_sorted(odd: float) -> None:
    values = [0.0] * (LARGE // 2) + [float(i) for i in range(LARGE)] + [odd] * (LARGE // 2)

    assert _bits(Distribution.of(values)) == _bits(_by_sorting(values))


def test_one_snapshot_summarises_each_list_and_each_union_as_if_alone() -> None:
    rng = random.Random(3)
    a = [rng.uniform(0, 1e5) for _ in range(LARGE)]
    b = [rng.uniform(0, 10.0) for _ in range(LARGE // 2)]
    c = [float(i) for i in range(LARGE // 2)] + [-0.0]  # sorted in Python, alone or with others
    shared = Distributions()

    for parts in ([a], [b], [a, b], [b, a], [c], [a, c], [c, b, a]):
        assert _bits(shared.of(parts)) == _bits(_by_sorting([v for p in parts for v in p]))
    assert shared.of([b, a]) is shared.of([a, [], b])
