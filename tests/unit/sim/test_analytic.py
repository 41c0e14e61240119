"""The closed-form useful fraction: exact under its own assumptions, close to first order, peaking at Daly's tau."""

from __future__ import annotations

import math

import numpy as np
import pytest

from crossrail.sim.analytic import (
    LLAMA3_405B,
    best_tau_first_order,
    daly_goodput,
    elastic_goodput,
    expected_goodput,
    first_order_goodput,
    renewal_goodput,
)
from crossrail.sim.checkpointing import daly_interval
from crossrail.sim.failures import FailureModel, FailureSpec

HOUR = 3600.0


def _renewal_goodput(tau: float, delta: float, mtbf: float, restart: float, work: float, seed: int) -> float:
    """Monte-Carlo of the model the formula describes: one run, exponential failures, restart from checkpoint."""
    failures = FailureModel(FailureSpec(chip_mtbf_s=mtbf), np.random.default_rng(seed))
    return renewal_goodput(failures, 1, 0, tau_s=tau, delta_s=delta, restart_s=restart, work_s=work)


@pytest.mark.parametrize(
    ("tau", "delta", "mtbf", "restart"),
    [(600, 20, 3 * HOUR, 300), (1800, 300, HOUR, 600), (5000, 100, HOUR, 0)],
    ids=["llama-like", "slow-checkpoints-short-mtbf", "interval-longer-than-the-mtbf"],
)
def test_the_exact_expression_matches_a_monte_carlo_of_its_own_model(
    tau: float, delta: float, mtbf: float, restart: float
) -> None:
    simulated = _renewal_goodput(tau, delta, mtbf, restart, work=tau * 4000, seed=1)
    assert simulated == pytest.approx(expected_goodput(tau, delta, mtbf, restart), rel=0.015)


def test_first_order_model_agrees_when_interval_and_restart_are_small_against_the_mtbf() -> None:
    tau, delta, mtbf, restart = 654.0, 20.0, 11_135.0, 300.0
    exact = expected_goodput(tau, delta, mtbf, restart)
    assert first_order_goodput(tau, delta, mtbf, restart) == pytest.approx(exact, abs=0.003)
    assert daly_goodput(tau, delta, mtbf, restart) == pytest.approx(exact, abs=0.001)
    # far from that regime the first-order model is only a rough guide (and floors at zero)
    assert first_order_goodput(3 * HOUR, 600, HOUR, 600) == 0.0
    assert expected_goodput(3 * HOUR, 600, HOUR, 600) > 0.05


@pytest.mark.parametrize("mtbf_h", [24.0, 6.0, 0.5], ids=["24h", "6h", "30min"])
def test_the_exact_model_peaks_at_dalys_interval(mtbf_h: float) -> None:
    delta, mtbf = 300.0, mtbf_h * HOUR
    taus = np.linspace(0.2, 3, 4000) * daly_interval(delta, mtbf)
    best = taus[np.argmax([daly_goodput(t, delta, mtbf, 0.0) for t in taus])]
    assert best == pytest.approx(daly_interval(delta, mtbf), rel=0.03)


def test_a_bigger_run_wants_shorter_intervals_as_one_over_sqrt_n() -> None:
    chip_mtbf, delta = 5 * 365 * 86_400.0, 30.0
    small, big = best_tau_first_order(delta, chip_mtbf / 1024), best_tau_first_order(delta, chip_mtbf / 16_384)
    assert small / big == pytest.approx(4.0)


def test_llama3_report_gives_a_job_mtbf_of_about_three_hours() -> None:
    assert LLAMA3_405B.mtbf_s / HOUR == pytest.approx(3.09, abs=0.005)
    assert LLAMA3_405B.chip_mtbf_s == pytest.approx(LLAMA3_405B.mtbf_s * 16_384)
    tau = daly_interval(20.0, LLAMA3_405B.mtbf_s)
    assert expected_goodput(tau, 20.0, LLAMA3_405B.mtbf_s, 300.0) == pytest.approx(0.9166, abs=0.0005)


def test_elastic_continue_beats_restarting_at_the_same_failure_rate() -> None:
    mtbf = LLAMA3_405B.mtbf_s
    rigid = expected_goodput(daly_interval(20, mtbf), 20, mtbf, 300)
    elastic = elastic_goodput(daly_interval(10, mtbf), 10, mtbf, 60, hosts=2048, lost_hosts=1, repair_s=4 * HOUR)
    assert elastic > rigid
    assert elastic == pytest.approx(0.9737, abs=0.001)


def test_without_failures_only_the_checkpoint_cost_remains() -> None:
    assert expected_goodput(600, 20, math.inf, 300) == pytest.approx(600 / 620)


@pytest.mark.parametrize(
    "args", [(0, 20, HOUR, 0), (600, -1, HOUR, 0), (600, 20, 0, 0), (600, 20, HOUR, -5)],
    ids=["no-interval", "negative-cost", "zero-mtbf", "negative-restart"],
)  # fmt: skip
def test_nonsense_inputs_are_refused(args: tuple[float, float, float, float]) -> None:
    with pytest.raises(ValueError, match="need tau > 0"):
        expected_goodput(*args)


def test_renewal_monte_carlo_without_failures_is_the_checkpoint_overhead_alone() -> None:
    failures = FailureModel(FailureSpec(), np.random.default_rng(0))
    got = renewal_goodput(failures, 8, 1, tau_s=600, delta_s=20, restart_s=300, work_s=6000)
    assert got == pytest.approx(6000 / (6000 + 9 * 20))  # ten intervals, no checkpoint after the last
