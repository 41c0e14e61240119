"""Amdahl and power-law fits of throughput against chips, and the time and chip-hours to a target."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from crossrail.metrics.scaling_fit import AMDAHL, POWER, Fit, amdahl, fit, power_law, to_target

CHIPS = [1, 2, 4, 8, 16, 32]


def _measured(fn: Callable[..., float], params: tuple[float, float], noise: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [fn(n, *params) * (1 + rng.uniform(-noise, noise)) for n in CHIPS]


@pytest.mark.parametrize("serial", [0.02, 0.08, 0.3])
def test_amdahl_recovers_a_known_serial_fraction_within_5_percent_from_noisy_measurements(serial: float) -> None:
    measured = _measured(amdahl, (1200.0, serial), noise=0.01, seed=7)
    f = fit(AMDAHL, CHIPS, measured)
    assert f.params["serial"] == pytest.approx(serial, rel=0.05)
    assert f.params["base"] == pytest.approx(1200.0, rel=0.05)
    assert f.stderr["serial"] is not None
    assert 0 < f.stderr["serial"] < serial  # the error is stated, and smaller than what it qualifies
    assert 0 < f.rms < 0.02 * max(measured)


def test_the_power_law_recovers_its_exponent_and_fits_amdahl_data_worse() -> None:
    exact = [power_law(n, 900.0, 0.8) for n in CHIPS]
    f = fit(POWER, CHIPS, exact)
    assert f.params["b"] == pytest.approx(0.8, rel=1e-4)
    assert f.params["a"] == pytest.approx(900.0, rel=1e-4)
    amdahl_data = _measured(amdahl, (1000.0, 0.1), noise=0.0, seed=0)
    assert fit(POWER, CHIPS, amdahl_data).rms > 10 * fit(AMDAHL, CHIPS, amdahl_data).rms


def test_the_time_and_chip_hours_to_a_target_checked_by_hand() -> None:
    f = Fit(AMDAHL, {"base": 1000.0, "serial": 0.1}, {"base": None, "serial": None}, 0.0, 2)
    reached = to_target(f, 8, 1e9)
    # 8 chips: 1000 x 8 / (1 + 0.1 x 7) = 8000 / 1.7 = 4705.88 tokens/s; 1e9 tokens take 1e9 x 1.7 / 8000
    # = 212,500 s; 8 chips for 212,500 s are 1,700,000 chip-seconds = 472.22 chip-hours.
    assert reached["throughput"] == pytest.approx(4705.882, rel=1e-6)
    assert reached["time_s"] == pytest.approx(212_500.0)
    assert reached["chip_hours"] == pytest.approx(472.2222, rel=1e-6)


def test_as_many_points_as_parameters_fit_without_an_error_to_state() -> None:
    f = fit(AMDAHL, [1, 2], [1000.0, 1800.0])
    assert f.params["serial"] == pytest.approx(1 / 9, rel=1e-6)  # 2000 / (1 + s) = 1800
    assert f.stderr == {"base": None, "serial": None}


@pytest.mark.parametrize(
    ("chips", "rates"),
    [
        pytest.param([4, 4, 4], [1.0, 2.0, 3.0], id="one chip count"),
        pytest.param([1, 2], [0.0, 0.0], id="no positive throughput"),
    ],
)
def test_points_that_cannot_determine_a_fit_are_refused(chips: list[int], rates: list[float]) -> None:
    with pytest.raises(ValueError, match="two or more chip counts"):
        fit(AMDAHL, chips, rates)
