"""Percentiles agree with numpy's default (linear) method; distributions summarise durations."""

from __future__ import annotations

import math
import random
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossrail.metrics import Distribution, percentile
from crossrail.metrics.distribution import LARGE, Distributions, Durations, exact_sum

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


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=40))
@pytest.mark.slow
def test_an_exact_sum_is_the_sum_of_the_values_and_rounds_as_fsum(values: list[float]) -> None:
    array = np.array(values, dtype=np.float64)

    total = exact_sum(array)

    assert Fraction(total, 2**1074) == sum(map(Fraction, values), Fraction(0))
    assert exact_sum(np.sort(array)) == total
    try:
        expected = math.fsum(values)
    except OverflowError:  # the exact sum is there; fsum's partials overflowed
        return
    assert total / 2**1074 == expected  # fsum gives -0.0 for negative zeros only; == takes it as 0.0
    if expected:
        assert (total / 2**1074).hex() == expected.hex()


@pytest.mark.parametrize("seed", range(4))
def test_an_exact_sum_of_a_large_array_of_every_kind_of_float_is_fsums(seed: int) -> None:
    rng = np.random.default_rng(seed)
    kinds = [
        rng.exponential(1e4, 20_000),  # durations
        rng.normal(0, 1, 20_000) * 10.0 ** rng.integers(-300, 300, 20_000),  # every exponent, both signs
        rng.choice([5e-324, -5e-324, 1e-310, 2.0**-1022, 0.0, 1e16, -1e16, 1.0], 20_000),  # subnormals, cancelling
    ]
    array = np.concatenate(kinds)
    rng.shuffle(array)

    assert (exact_sum(array) / 2**1074).hex() == math.fsum(array.tolist()).hex()
    assert exact_sum(np.sort(array)) == exact_sum(array)


def _durations(values: list[float], cuts: tuple[int, int]) -> Durations:
    """`values` as a tally holds them: the first ones added one at a time, the rest as two arrays."""
    durations = Durations()
    for value in values[: cuts[0]]:
        durations.append(value)
    durations.add_array(np.array(values[cuts[0] : cuts[1]], dtype=np.float64))
    durations.add_array(np.array(values[cuts[1] :], dtype=np.float64))
    return durations


ODD = [
    pytest.param(None, id="plain-durations"),
    pytest.param(math.nan, id="a-nan"),
    pytest.param(-0.0, id="a-negative-zero"),
    pytest.param(math.inf, id="an-infinity"),
    pytest.param(2.0**1000, id="a-value-fsum-could-overflow-on"),
    pytest.param(5e-324, id="a-subnormal"),
    pytest.param(-1e16, id="a-cancelling-pair"),
]


@pytest.mark.parametrize("odd", ODD)
@pytest.mark.parametrize("count", [40, LARGE + 3], ids=["small", "large"])
def test_durations_held_as_arrays_summarise_as_the_same_values_in_a_list(odd: float | None, count: int) -> None:
    rng = random.Random(count)
    values = [rng.choice([0.0, 360.0, rng.expovariate(1e-3), rng.uniform(0, 1e6)]) for _ in range(count)]
    if odd is not None:  # in the values added one by one and in an array
        values[1] = values[-2] = odd
        if not math.isinf(odd):  # inf - inf has no sum
            values[count // 2] = -odd
    cuts = (count // 4, count // 2 + 1)
    durations = _durations(values, cuts)

    assert list(map(repr, durations.tolist())) == list(map(repr, values))  # NaN and -0.0 too, in order
    assert len(durations) == count
    assert _bits(Distributions().of([durations])) == _bits(Distribution.of(values))
    if odd is None or not math.isnan(odd):  # the definition; a NaN makes sorted() depend on the order
        assert _bits(Distributions().of([durations])) == _bits(_by_sorting(values))


@pytest.mark.parametrize("odd", [7, 2**60 + 1], ids=["an-int", "an-int-beyond-float-precision"])
def test_ints_added_one_by_one_with_arrays_are_sorted_as_python_does(odd: int) -> None:
    values: list[float] = [float(i) for i in range(LARGE)]
    durations = _durations(values, (10, LARGE // 2))
    durations.append(odd)

    assert _bits(Distributions().of([durations])) == _bits(_by_sorting([*values, odd]))


def test_a_union_of_durations_and_lists_is_summarised_as_all_its_values_together() -> None:
    rng = random.Random(5)
    a = [rng.uniform(0, 1e5) for _ in range(3 * LARGE)]
    b = [rng.expovariate(1e-2) for _ in range(LARGE // 3)]
    c = [rng.choice([0.0, 360.0]) for _ in range(100)]
    da, db = _durations(a, (5, LARGE)), _durations(b, (0, 7))
    shared = Distributions()

    for parts in ([da], [db], [da, db], [db, c, da], [c], [da, c]):
        plain = [v for p in parts for v in (p.tolist() if isinstance(p, Durations) else p)]
        assert _bits(shared.of(parts)) == _bits(_by_sorting(plain))
    assert shared.of([db, da]) is shared.of([da, [], db])


@pytest.mark.parametrize(
    ("array", "message"),
    [
        pytest.param(np.zeros((2, 2)), "1-d float64 array", id="two-dimensional"),
        pytest.param(np.zeros(3, dtype=np.float32), "1-d float64 array", id="float32"),
        pytest.param(np.zeros(3, dtype=np.int64), "1-d float64 array", id="ints"),
    ],
)
def test_durations_refuse_an_array_that_is_not_float64_values(array: np.ndarray, message: str) -> None:
    durations = Durations()

    with pytest.raises(ValueError, match=message):
        durations.add_array(array)
    assert len(durations) == 0


def test_small_summaries_and_reports_do_not_load_numpy() -> None:
    script = (
        "import sys\n"
        "from crossrail.core.events import Event, EventType\n"
        "from crossrail.metrics import Distribution, compute\n"
        "Distribution.of([1.0, 2.0, 3.0])\n"
        "log = [Event(EventType.SUBMITTED, 0.0, 'r', None, {'stage': 's'}, 1),\n"
        "       Event(EventType.STARTED, 5.0, 'r', 1, {'pool': 'p'}, 2),\n"
        "       Event(EventType.SUCCEEDED, 9.0, 'r', 1, {}, 3)]\n"
        "assert compute(log, 10.0).totals.jct.count == 1\n"
        "assert 'numpy' not in sys.modules, 'numpy was loaded'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


@pytest.mark.parametrize("seed", range(3))
def test_a_union_reads_its_ranks_from_its_sorted_parts_for_every_kind_of_float(seed: int) -> None:
    rng = random.Random(seed)
    pool = [0.0, 5e-324, -5e-324, 1.0, -1.0, math.inf, -math.inf, 1e300, -1e300, 360.0]
    parts = [
        [rng.choice([*pool, rng.uniform(-1e6, 1e6), rng.expovariate(1.0)]) for _ in range(rng.randrange(1, 300))]
        for _ in range(3)
    ]
    parts[0][0] = 0.0  # a zero at the ranks of some unions: it must come back as 0.0, never -0.0
    arrays = [_durations(part, (0, len(part) // 2)) for part in parts]
    shared = Distributions()

    for chosen in ([0, 1], [1, 2], [0, 1, 2], [2, 0]):
        values = [v for i in chosen for v in parts[i]]
        if math.inf in values and -math.inf in values:
            continue  # inf - inf has no mean
        assert _bits(shared.of([arrays[i] for i in chosen])) == _bits(_by_sorting(values))
    zeros = Distributions().of([_durations([-1.0] + [0.0] * 8 + [1.0], (0, 5)), _durations([0.0] * 10, (0, 3))])
    assert _bits(zeros) == _bits(_by_sorting([-1.0] + [0.0] * 18 + [1.0]))
