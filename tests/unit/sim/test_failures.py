"""Failure models: run MTBF grows with size, sampled gaps follow their law, correlated failures take whole domains."""

from __future__ import annotations

import math

import numpy as np
import pytest

from crossrail.errors import SpecError
from crossrail.sim.failures import CorrelatedFailure, FailureModel, FailureSpec

DAY = 86_400.0


def model(seed: int = 0, **spec: object) -> FailureModel:
    return FailureModel(FailureSpec(**spec), np.random.default_rng(seed))  # type: ignore[arg-type]


def test_a_run_fails_as_often_as_all_its_chips_hosts_and_domains_together() -> None:
    rack = CorrelatedFailure("rack", mtbf_s=200 * DAY, hosts=16)
    m = model(chip_mtbf_s=5 * 365 * DAY, host_mtbf_s=2 * 365 * DAY, correlated=(rack,))
    chips, hosts = 1024, 128
    expected_rate = chips / (5 * 365 * DAY) + hosts / (2 * 365 * DAY) + 8 / (200 * DAY)
    assert m.run_mtbf_s(chips, hosts) == pytest.approx(1 / expected_rate, rel=1e-12)


def test_doubling_a_run_halves_its_mtbf_under_exponential_failures() -> None:
    m = model(chip_mtbf_s=1e8, host_mtbf_s=4e8)
    assert m.run_mtbf_s(16_384, 2048) == pytest.approx(m.run_mtbf_s(8192, 1024) / 2, rel=1e-12)
    assert m.run_rate_per_s(16_384, 2048) == pytest.approx(2 * m.run_rate_per_s(8192, 1024), rel=1e-12)


def test_doubling_a_weibull_run_shortens_its_mtbf_by_two_to_the_one_over_shape() -> None:
    m = model(chip_mtbf_s=1e8, distribution="weibull", weibull_shape=0.7)
    assert m.run_mtbf_s(2000, 250) == pytest.approx(m.run_mtbf_s(1000, 125) / 2 ** (1 / 0.7), rel=1e-12)


def test_nothing_to_fail_means_no_interruption() -> None:
    m = model()
    assert m.run_mtbf_s(64, 8) == math.inf
    assert m.next_interruption_s(64, 8) == math.inf


def test_sampled_exponential_gaps_average_the_run_mtbf() -> None:
    m = model(seed=7, chip_mtbf_s=1e7)
    gaps = [m.next_interruption_s(1000, 125, age_s=0.0) for _ in range(20_000)]
    assert np.mean(gaps) == pytest.approx(1e4, rel=0.03)
    assert np.std(gaps) == pytest.approx(1e4, rel=0.03)  # exponential: std = mean


def test_exponential_gaps_do_not_depend_on_age() -> None:
    old = model(seed=3, chip_mtbf_s=1e6).sample_many(20_000, 10, 2, age_s=5e5)
    assert old.mean() == pytest.approx(1e5, rel=0.03)


def test_an_exponential_draw_is_the_same_however_old_the_run_is() -> None:
    young = model(seed=4, chip_mtbf_s=1e6).sample(8, 1, age_s=0.0)
    ancient = model(seed=4, chip_mtbf_s=1e6).sample(8, 1, age_s=1e15)
    assert young == ancient


@pytest.mark.parametrize("shape", [0.7, 1.5, 3.0], ids=["infant-mortality", "mild-wear-out", "strong-wear-out"])
def test_sampled_weibull_gaps_average_scale_times_gamma(shape: float) -> None:
    m = model(seed=11, chip_mtbf_s=3e6, distribution="weibull", weibull_shape=shape)
    gaps = m.sample_many(40_000, chips=300, hosts=0)
    assert m.run_mtbf_s(300, 0) == pytest.approx(3e6 / 300 ** (1 / shape), rel=1e-12)
    assert gaps.mean() == pytest.approx(m.run_mtbf_s(300, 0), rel=0.03)


def _mean_residual(scale: float, shape: float, age: float) -> float:
    t = np.linspace(age, age + 30 * scale, 400_001)
    survival = np.exp(-((t / scale) ** shape) + (age / scale) ** shape)
    return float(np.sum((survival[1:] + survival[:-1]) / 2 * np.diff(t)))


@pytest.mark.parametrize(
    ("shape", "older_waits_longer"), [(0.7, True), (2.0, False)], ids=["infant-mortality", "wear-out"]
)
def test_weibull_residual_life_given_age_follows_the_conditional_law(shape: float, older_waits_longer: bool) -> None:
    m = model(seed=5, chip_mtbf_s=1e5, distribution="weibull", weibull_shape=shape)
    scale, age = m.run_scale_s(1, 0), 2e5
    young = m.sample_many(40_000, 1, 0, age_s=0.0).mean()
    old = m.sample_many(40_000, 1, 0, age_s=age).mean()
    assert old == pytest.approx(_mean_residual(scale, shape, age), rel=0.03)
    assert bool(old > young) is older_waits_longer


def test_a_rack_failure_takes_every_host_of_the_run_in_that_rack() -> None:
    rack = CorrelatedFailure("rack", mtbf_s=1e6, hosts=16)
    m = model(seed=2, host_mtbf_s=1e6, correlated=(rack,), repair_s=3600)
    hits = [m.sample(chips=512, hosts=64) for _ in range(4000)]
    racks = [h for h in hits if h.cause == "rack"]
    hosts = [h for h in hits if h.cause == "host"]
    assert {h.hosts_lost for h in racks} == {16}
    assert {h.hosts_lost for h in hosts} == {1}
    assert all(h.repair_s == 3600 for h in hits)
    # 64 hosts at 1e6 s against 4 racks at 1e6 s: 4 of every 68 interruptions are whole racks
    assert len(racks) / len(hits) == pytest.approx(4 / 68, abs=0.012)


def test_a_slice_failure_never_takes_more_hosts_than_the_run_has() -> None:
    whole_slice = CorrelatedFailure("slice", mtbf_s=1e5, hosts=64)
    hit = model(correlated=(whole_slice,)).sample(chips=32, hosts=8)
    assert (hit.cause, hit.hosts_lost) == ("slice", 8)


def test_a_chip_failure_sends_its_host_to_repair() -> None:
    hit = model(chip_mtbf_s=1e6, repair_s=7200).pool_failure(chips=4096, hosts=512)
    assert (hit.cause, hit.hosts_lost, hit.repair_s) == ("chip", 1, 7200)


def test_same_seed_same_failures_other_seed_other_failures() -> None:
    def draws(seed: int) -> list[float]:
        m = model(seed=seed, chip_mtbf_s=1e7, host_mtbf_s=1e8)
        return [m.sample(1024, 128, age_s=float(i)).after_s for i in range(50)]

    assert draws(1) == draws(1)
    assert draws(1) != draws(2)


def test_bad_failure_specs_list_every_problem_with_its_field() -> None:
    with pytest.raises(SpecError) as err:
        FailureSpec(
            chip_mtbf_s=-1,
            host_mtbf_s=0,
            distribution="lognormal",  # type: ignore[arg-type]
            weibull_shape=0,
            repair_s=-5,
            correlated=(CorrelatedFailure("row", mtbf_s=math.inf, hosts=0),),  # type: ignore[arg-type]
        )
    paths = [p.path for p in err.value.problems]
    assert paths == [
        "chip_mtbf_s",
        "host_mtbf_s",
        "distribution",
        "weibull_shape",
        "repair_s",
        "correlated[0].scope",
        "correlated[0].mtbf_s",
        "correlated[0].hosts",
    ]
    assert "crossrail: 8 problems in failures" in str(err.value)


def test_values_of_the_wrong_type_are_problems_not_crashes() -> None:
    with pytest.raises(SpecError) as err:
        FailureSpec(chip_mtbf_s="5h", repair_s=True, correlated=[{"scope": "rack"}])  # type: ignore[arg-type]
    assert [p.path for p in err.value.problems] == ["chip_mtbf_s", "repair_s", "correlated[0]"]
    assert "must be a finite number > 0 (got '5h')" in str(err.value)


def test_a_list_of_domains_is_kept_as_a_tuple() -> None:
    spec = FailureSpec(correlated=[CorrelatedFailure("slice", 1e6, hosts=4)])  # type: ignore[arg-type]
    assert spec.correlated == (CorrelatedFailure("slice", 1e6, hosts=4),)
    assert hash(spec) == hash(FailureSpec(correlated=(CorrelatedFailure("slice", 1e6, hosts=4),)))


def test_negative_sizes_and_ages_are_refused() -> None:
    m = model(chip_mtbf_s=1e6)
    with pytest.raises(ValueError, match="chips and hosts"):
        m.run_mtbf_s(-1, 0)
    with pytest.raises(ValueError, match="age_s"):
        m.sample(8, 1, age_s=-1.0)
