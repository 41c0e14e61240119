"""Throughput per chip at each degree feeds the run-time estimates: a 16-chip estimate is read from the
degrees measured (the degree itself, the only one, or an Amdahl fit), never a 1-chip rate x 16."""

from __future__ import annotations

import pytest

from crossrail.scheduling.estimate import PlacementWork, PoolInfo, estimate_placements, run_time_s
from crossrail.scheduling.scaling import fit, rate_at

HOUR = 3600.0


def amdahl(one_chip: float, serial: float, *degrees: int) -> dict[int, float]:
    """Per-chip rates a workload with this one-chip rate and serial fraction shows at each degree."""
    return {n: one_chip / (1 + serial * (n - 1)) for n in degrees}


def gpu(name: str = "h100", chip_type: str = "h100", speed: float = 1.0) -> PoolInfo:
    return PoolInfo(name, "gpu", chip_type, capacity=64, cost_per_chip_hour=1.0, relative_speed=speed)


def test_the_fit_recovers_the_one_chip_rate_and_serial_fraction_of_amdahl_measurements() -> None:
    model = fit(amdahl(100.0, 0.05, 1, 2, 4, 8))

    assert (model.one_chip, model.serial) == (pytest.approx(100.0), pytest.approx(0.05))


def test_a_16_chip_estimate_uses_the_fit_over_the_measured_degrees_not_the_1_chip_rate_times_16() -> None:
    work = PlacementWork("r", 16, work_units=1e6, scaling={"h100": amdahl(100.0, 0.05, 1, 2, 4, 8)})

    run_s, source = run_time_s(work, gpu())

    assert run_s == pytest.approx(1e6 / (16 * 100.0 / 1.75))  # 1093.75 s; 1 chip x 16 would say 625 s
    assert source == "measured; Amdahl fit over 1, 2, 4, 8 chips (serial 5.0%)"


@pytest.mark.parametrize(
    ("rates", "per_chip", "how"),
    [
        ({1: 100.0, 16: 40.0}, 40.0, "measured at 16 chips"),
        ({4: 90.0}, 90.0, "per-chip rate measured at 4 chips, the only degree measured"),
        ({1: 50.0, 2: 60.0, 4: 70.0}, 3 / (1 / 50 + 1 / 60 + 1 / 70), "Amdahl fit over 1, 2, 4 chips (serial 0.0%)"),
        ({1: 100.0, 2: 40.0, 4: 15.0}, 21 / (1 / 100 + 2 / 40 + 4 / 15) / 16, "Amdahl fit over 1, 2, 4 chips (serial"),
    ],
    ids=["the-degree-itself", "the-only-degree", "superlinear-is-clamped-flat", "collapsing-is-clamped-to-no-gain"],
)  # flat: the harmonic mean of the rates; collapsing: 1 / rate fitted through the origin
def test_the_per_chip_rate_at_16_chips(rates: dict[int, float], per_chip: float, how: str) -> None:
    found = rate_at(rates, 16)

    assert found is not None
    assert found.per_chip == pytest.approx(per_chip)
    assert found.how.startswith(how)


def test_rates_are_kept_per_chip_type_and_decide_which_chip_is_faster_at_the_runs_degree() -> None:
    """The GPU is faster on one chip; the TPU scales better and is faster at 16, so it anchors there."""
    tpu = PoolInfo("v5p", "tpu", "v5p", capacity=64, cost_per_chip_hour=1.0)
    h100 = gpu()
    scaling = {"v5p": amdahl(80.0, 0.01, 4, 8), "h100": amdahl(100.0, 0.2, 1, 2, 8)}
    at = {n: PlacementWork("r", n, reference_s=HOUR, scaling=scaling) for n in (1, 16)}

    assert run_time_s(at[1], h100, [tpu, h100]) == (HOUR, "relative_speed")
    tpu_s, tpu_source = run_time_s(at[16], tpu, [tpu, h100])
    gpu_s, gpu_source = run_time_s(at[16], h100, [tpu, h100])
    assert (tpu_s, tpu_source) == (HOUR, "relative_speed")
    assert gpu_s == pytest.approx(HOUR * (80.0 / 1.15) / (100.0 / 4.0))
    assert gpu_source == "measured ratio; Amdahl fit over 1, 2, 8 chips (serial 20.0%)"
    choice = estimate_placements(at[16], [tpu, h100], {"v5p": 0.0, "h100": 0.0})
    assert choice.pool == "v5p"
    assert choice.candidate("h100").as_dict()["speed_source"] == gpu_source  # what `place --explain` shows


def test_a_chip_type_measured_by_degree_overrides_its_flat_measurement_and_others_keep_theirs() -> None:
    work = PlacementWork("r", 8, work_units=8000.0, measured={"h100": 10.0, "l4": 2.0}, scaling={"h100": {8: 5.0}})

    assert run_time_s(work, gpu()) == (200.0, "measured; measured at 8 chips")
    assert run_time_s(work, gpu("l4", "l4")) == (500.0, "measured")
