"""Scheduling policies on constructed inputs with known answers: who goes first, who gets which chips."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossrail.errors import UsageError
from crossrail.scheduling.policies import POLICY_NAMES, JobView, PoolView, get_policy, level_of
from crossrail.scheduling.policies.base import worth_s
from crossrail.scheduling.policies.maxmin import max_min_shares

V100 = PoolView("v100", "v100", 1, 1)
K80 = PoolView("k80", "k80", 2, 2)


def job(run: str, **fields: Any) -> JobView:
    base: dict[str, Any] = {
        "queue": "q",
        "priority": level_of("normal"),
        "submitted_at": 0.0,
        "chips": 1,
        "attained_s": 0.0,
        "throughput": {},
    }
    return JobView(run=run, **{**base, **fields})


def runs(ordered: list[tuple[JobView, str | None]]) -> list[str]:
    return [j.run for j, _ in ordered]


# --- names -------------------------------------------------------------------------------------


def test_every_name_builds_a_policy_of_that_name_and_kind() -> None:
    kinds = {name: (get_policy(name).round_based, get_policy(name).hetero) for name in POLICY_NAMES}
    assert kinds == {
        "fifo": (False, False),
        "priority": (False, False),
        "las": (True, False),
        "max_min_fairness": (True, False),
        "fifo_hetero": (False, True),
        "las_hetero": (True, True),
        "max_min_fairness_hetero": (True, True),
        "min_jct_hetero": (True, True),
    }
    assert all(get_policy(name).name == name for name in POLICY_NAMES)


def test_a_misspelt_policy_is_refused_with_a_suggestion_and_every_valid_name() -> None:
    with pytest.raises(UsageError) as caught:
        get_policy("fifo_hetro")
    message = str(caught.value)
    assert "unknown scheduling policy 'fifo_hetro'" in message
    assert "did you mean 'fifo_hetero'?" in message
    assert all(name in message for name in POLICY_NAMES)


@pytest.mark.parametrize(
    ("name", "options", "says"),
    [
        pytest.param("las", {"normalise": "best"}, "policy las takes no option normalise", id="option-not-taken"),
        pytest.param("max_min_fairness", {"normalize": "best"}, "its options: normalise", id="unknown-option"),
        pytest.param("max_min_fairness_hetero", {"normalise": "worst"}, "equal_share, best", id="bad-normalise"),
    ],
)
def test_bad_options_are_refused_naming_the_valid_ones(name: str, options: dict[str, Any], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        get_policy(name, **options)


# --- admission order ---------------------------------------------------------------------------


def test_fifo_orders_by_arrival_whatever_the_priority() -> None:
    jobs = [job("late", submitted_at=5.0, priority=level_of("critical")), job("early", submitted_at=1.0)]
    assert runs(get_policy("fifo").order(jobs, [V100], 10.0)) == ["early", "late"]


def test_priority_puts_the_higher_class_first_then_arrival() -> None:
    jobs = [
        job("low-early", submitted_at=0.0, priority=level_of("low")),
        job("high-late", submitted_at=9.0, priority=level_of("high")),
        job("high-early", submitted_at=3.0, priority=level_of("high")),
    ]
    assert runs(get_policy("priority").order(jobs, [V100], 10.0)) == ["high-early", "high-late", "low-early"]


def test_las_admits_the_job_with_least_attained_service_first() -> None:
    jobs = [job("a", attained_s=100.0), job("b", attained_s=10.0), job("c", attained_s=50.0)]
    policy = get_policy("las")
    assert runs(policy.order(jobs, [V100], 0.0)) == ["b", "c", "a"]
    assert policy.allocate(jobs, [V100], 0.0, 360.0) == {"b": "v100"}


def test_order_lists_only_pending_jobs() -> None:
    jobs = [job("running", pool="v100"), job("waiting")]
    assert runs(get_policy("fifo").order(jobs, [V100], 0.0)) == ["waiting"]


def test_las_hetero_counts_slow_chip_time_at_its_worth() -> None:
    # Both ran 100 chip-seconds; "slow" ran on K80, where it goes at a quarter of its V100 speed.
    rates = {"v100": 4.0, "k80": 1.0}
    fast = job("fast", attained_s=100.0, attained_by_type={"v100": 100.0}, throughput=rates)
    slow = job("slow", attained_s=100.0, attained_by_type={"k80": 100.0}, throughput=rates)
    assert worth_s(slow) == pytest.approx(25.0)
    assert runs(get_policy("las").order([fast, slow], [V100], 0.0)) == ["fast", "slow"]  # tie: by run
    assert runs(get_policy("las_hetero").order([fast, slow], [V100], 0.0)) == ["slow", "fast"]


def test_min_jct_hetero_runs_the_job_closest_to_done_on_its_fastest_chip_first() -> None:
    long = job("long", remaining=1000.0, throughput={"v100": 10.0, "k80": 1.0})  # 100 s on V100
    short = job("short", remaining=300.0, throughput={"v100": 2.0, "k80": 1.0})  # 150 s on V100
    unknown = job("unknown", remaining=None, throughput={"v100": 1.0})
    assert runs(get_policy("min_jct_hetero").order([unknown, short, long], [V100, K80], 0.0)) == [
        "long",
        "short",
        "unknown",
    ]


# --- where jobs go -----------------------------------------------------------------------------

SPEEDY = {"v100": 10.0, "k80": 1.0}
"""A job ten times faster on V100 (like CycleGAN in Gavel's matrix)."""
FLAT = {"v100": 1.2, "k80": 1.0}


def test_hetero_gives_the_v100_to_the_job_that_gains_most_from_it_even_if_it_came_second() -> None:
    jobs = [job("flat", submitted_at=0.0, throughput=FLAT), job("speedy", submitted_at=1.0, throughput=SPEEDY)]
    assert get_policy("fifo_hetero").allocate(jobs, [V100, K80], 2.0, 360.0) == {"speedy": "v100", "flat": "k80"}
    # The agnostic form sees two alike pools and fills the one with most chips left.
    assert get_policy("fifo").allocate(jobs, [V100, K80], 2.0, 360.0) == {"flat": "k80", "speedy": "k80"}


def test_hetero_admission_names_the_fast_pool_for_the_job_that_gains_most() -> None:
    jobs = [job("flat", submitted_at=0.0, throughput=FLAT), job("speedy", submitted_at=1.0, throughput=SPEEDY)]
    ordered = get_policy("fifo_hetero").order(jobs, [V100, K80], 2.0)
    assert [(j.run, pool) for j, pool in ordered] == [("flat", "k80"), ("speedy", "v100")]
    assert [pool for _, pool in get_policy("fifo").order(jobs, [V100, K80], 2.0)] == [None, None]


def test_hetero_never_places_a_job_where_its_rate_is_zero() -> None:
    only_k80 = job("only-k80", throughput={"v100": 0.0, "k80": 3.0})
    assert get_policy("fifo_hetero").allocate([only_k80], [V100, K80], 0.0, 360.0) == {"only-k80": "k80"}
    assert get_policy("fifo").allocate([only_k80], [V100], 0.0, 360.0) == {}


def test_without_rates_a_hetero_policy_places_like_its_agnostic_form() -> None:
    jobs = [job(f"j{i}", submitted_at=float(i), chips=1 + i % 2, attained_s=float(10 - i)) for i in range(6)]
    pools = [PoolView("a", "v100", 4, 4), PoolView("b", "k80", 3, 3)]
    # Not the max-min pair: as in Gavel, its agnostic form takes chip types in a shuffled order each round.
    for hetero, agnostic in (("fifo_hetero", "fifo"), ("las_hetero", "las")):
        assert get_policy(hetero).allocate(jobs, pools, 60.0, 360.0) == get_policy(agnostic).allocate(
            jobs, pools, 60.0, 360.0
        ), hetero


def test_a_running_job_stays_on_its_pool_when_the_agnostic_order_keeps_it() -> None:
    jobs = [job("a", pool="v100", attained_s=1.0), job("b")]
    assert get_policy("las").allocate(jobs, [V100, K80], 10.0, 360.0) == {"a": "v100", "b": "k80"}


# --- max-min fairness --------------------------------------------------------------------------


def test_agnostic_max_min_fairness_gives_three_jobs_a_third_of_one_chip_each() -> None:
    jobs = [job("a"), job("b"), job("c")]
    shares = max_min_shares(jobs, [V100], hetero=False, normalise="equal_share")
    assert {run: sum(x.values()) for run, x in shares.items()} == pytest.approx(
        {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, abs=1e-5
    )


@pytest.mark.parametrize("normalise", ["equal_share", "best"])
def test_hetero_max_min_fairness_equalises_normalised_throughput(normalise: str) -> None:
    pools = [PoolView("v100", "v100", 1, 1), PoolView("k80", "k80", 1, 1)]
    big = job("big-speedup", throughput={"v100": 4.0, "k80": 1.0})
    small = job("small-speedup", throughput={"v100": 2.0, "k80": 1.0})
    shares = max_min_shares([big, small], pools, hetero=True, normalise=normalise)
    if normalise == "best":
        refs = {"big-speedup": 4.0, "small-speedup": 2.0}
    else:
        refs = {"big-speedup": 2.5, "small-speedup": 1.5}  # half a V100 and half a K80
    rates = {"big-speedup": big.throughput, "small-speedup": small.throughput}
    normalised = {run: sum(rates[run][p] * x for p, x in got.items()) / refs[run] for run, got in shares.items()}
    assert normalised["big-speedup"] == pytest.approx(normalised["small-speedup"], rel=1e-5)
    # The job that gains most from the V100 gets at least as much of it; no chip is over-committed.
    assert shares["big-speedup"].get("v100", 0.0) >= shares["small-speedup"].get("v100", 0.0) - 1e-9
    for pool in ("v100", "k80"):
        assert sum(x.get(pool, 0.0) for x in shares.values()) <= 1.0 + 1e-9
    # No worse for either than a plain half of each chip, which gives each exactly 1.0 under equal_share.
    if normalise == "equal_share":
        assert normalised["big-speedup"] >= 1.0 - 1e-6


def test_gavel_priorities_favour_the_job_that_received_less_than_its_share() -> None:
    """Equal shares of time since the allocation was computed: the deficit (service below the allocation
    before it) breaks the tie, as in Gavel."""
    jobs = [
        job("ahead", attained_s=300.0, attained_by_type={"v100": 300.0}),
        job("behind", attained_s=60.0, attained_by_type={"v100": 60.0}),
    ]
    assert get_policy("max_min_fairness").allocate(jobs, [V100], 600.0, 360.0) == {"behind": "v100"}


def test_max_min_fairness_gives_a_gang_time_only_on_pools_that_can_hold_it() -> None:
    pair = job("pair", chips=2, throughput={"v100": 9.0, "k80": 1.0})
    single = job("single", throughput={"v100": 9.0, "k80": 1.0})
    shares = max_min_shares([pair, single], [V100, K80], hetero=True, normalise="best")
    assert set(shares["pair"]) == {"k80"}  # the V100 pool has one chip
    assert shares["single"].get("v100", 0.0) == pytest.approx(1.0)


def test_max_min_fairness_with_no_runnable_job_allocates_nothing() -> None:
    too_big = job("too-big", chips=8)
    assert get_policy("max_min_fairness_hetero").allocate([too_big], [V100, K80], 0.0, 360.0) == {}


# --- every policy, any input -------------------------------------------------------------------

rates = st.dictionaries(st.sampled_from(["v100", "k80"]), st.floats(0.0, 50.0), max_size=2)
jobs_strategy = st.lists(
    st.builds(
        job,
        st.uuids().map(lambda u: str(u)[:8]),
        chips=st.integers(1, 4),
        attained_s=st.floats(0.0, 1e5),
        submitted_at=st.floats(0.0, 1e4),
        throughput=rates,
        remaining=st.none() | st.floats(1.0, 1e6),
        pool=st.none() | st.sampled_from(["v100", "k80"]),
    ),
    max_size=8,
    unique_by=lambda j: j.run,
)


@settings(max_examples=40, deadline=None)
@given(jobs=jobs_strategy, name=st.sampled_from(POLICY_NAMES))
def test_every_allocation_fits_gangs_in_capacity_on_chips_that_run_them_and_is_deterministic(
    jobs: list[JobView], name: str
) -> None:
    pools = [PoolView("v100", "v100", 2, 2), PoolView("k80", "k80", 4, 4)]
    placed = get_policy(name).allocate(jobs, pools, 1e4, 360.0)
    by_run = {j.run: j for j in jobs}
    for pool in pools:
        assert sum(by_run[r].chips for r, p in placed.items() if p == pool.name) <= pool.capacity
    for run, pool in placed.items():
        rates = by_run[run].throughput
        assert not rates or rates.get(pool, 0.0) > 0
    assert get_policy(name).allocate(list(reversed(jobs)), pools, 1e4, 360.0) == placed
    ordered = get_policy(name).order(jobs, pools, 1e4)
    assert sorted(j.run for j, _ in ordered) == sorted(j.run for j in jobs if j.pool is None)
    for view, wanted in ordered:
        capacity = {p.name: p.capacity for p in pools}
        assert wanted is None or view.chips <= capacity[wanted]
        assert wanted is None or not view.throughput or view.throughput.get(wanted, 0) > 0


def test_jobs_alike_get_equal_shares_and_the_lp_fills_every_chip() -> None:
    pools = [PoolView("v100", "v100", 2, 2), PoolView("k80", "k80", 4, 4)]
    alike = [job(f"a{i}", throughput={"v100": 4.0, "k80": 1.0}) for i in range(5)]
    other = [job(f"b{i}", throughput={"v100": 2.0, "k80": 1.5}) for i in range(3)]
    shares = max_min_shares([*alike, *other], pools, hetero=True, normalise="equal_share")

    for group in (alike, other):
        first = shares[group[0].run]
        assert all(shares[j.run] == first for j in group)
    for pool in pools:
        used = sum(x.get(pool.name, 0.0) for x in shares.values())
        assert used == pytest.approx(pool.capacity, rel=1e-6)
