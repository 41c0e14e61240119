"""Checkpoint cost, Young and Daly intervals, adaptive estimates, recovery plans and closed-form progress."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossrail.errors import SpecError
from crossrail.sim.checkpointing import (
    Cadence,
    CheckpointModel,
    IntervalChooser,
    MtbfEstimator,
    Stretch,
    daly_interval,
    plan_recovery,
    young_interval,
)

MIN, HOUR = 60.0, 3600.0


@pytest.mark.parametrize(
    ("mtbf_s", "minutes"),
    [(24 * HOUR, "116.7"), (6 * HOUR, "56.7"), (15 * MIN, "9.14")],
    ids=["job-mtbf-24h", "job-mtbf-6h", "job-mtbf-15min"],
)
def test_daly_interval_reproduces_the_figures_of_his_paper(mtbf_s: float, minutes: str) -> None:
    # Daly (FGCS 2006) with delta = 5 min; the paper prints these to the digits given here
    got = daly_interval(5 * MIN, mtbf_s) / MIN
    assert f"{got:.{len(minutes.split('.')[1])}f}" == minutes


def test_daly_is_young_plus_higher_order_terms_and_caps_at_the_mtbf() -> None:
    assert young_interval(5 * MIN, 24 * HOUR) == pytest.approx(120 * MIN)
    # Young overestimates when delta is not small against M; Daly's correction subtracts most of delta
    assert daly_interval(5 * MIN, 24 * HOUR) < young_interval(5 * MIN, 24 * HOUR)
    assert daly_interval(2 * HOUR, HOUR) == HOUR
    assert daly_interval(10.0, math.inf) == math.inf


def test_interval_functions_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="checkpoint cost"):
        daly_interval(-1.0, HOUR)
    with pytest.raises(ValueError, match="MTBF"):
        young_interval(1.0, 0.0)


def test_checkpoint_cost_is_size_over_bandwidth() -> None:
    spec = CheckpointModel(size_bytes=2.4e12, bandwidth_bps=1.2e11)  # 2.4 TB at 120 GB/s
    assert spec.delta_s == pytest.approx(20.0)
    assert IntervalChooser(spec).delta_s() == pytest.approx(20.0)


def test_restart_costs_detection_rescheduling_and_restore_and_shrink_costs_less() -> None:
    spec = CheckpointModel(cost_s=20, detect_s=30, reschedule_s=90, restore_s=180, shrink_s=30)
    assert spec.restart_s == 300
    assert spec.shrink_pause_s == 60


@pytest.mark.parametrize(
    ("spec", "expected_s"),
    [
        (CheckpointModel(cost_s=300, interval="fixed", interval_s=1800), 1800),
        (CheckpointModel(cost_s=300, interval="young"), 7200),
        (CheckpointModel(cost_s=300, interval="daly"), daly_interval(300, 24 * HOUR)),
        (CheckpointModel(cost_s=300, interval="daly", assumed_mtbf_s=6 * HOUR), daly_interval(300, 6 * HOUR)),
        (CheckpointModel(cost_s=0, interval="daly"), 0.0),
    ],
    ids=["fixed-ignores-mtbf", "young", "daly", "daly-with-a-believed-mtbf", "free-checkpoints-are-continuous"],
)
def test_interval_chooser_picks_by_kind(spec: CheckpointModel, expected_s: float) -> None:
    assert IntervalChooser(spec).interval_s(24 * HOUR) == pytest.approx(expected_s)


def test_adaptive_interval_follows_the_observed_mtbf_once_there_is_one() -> None:
    chooser = IntervalChooser(CheckpointModel(cost_s=300, interval="adaptive", assumed_mtbf_s=24 * HOUR))
    assert chooser.interval_s(3 * HOUR) == pytest.approx(daly_interval(300, 24 * HOUR))
    assert chooser.interval_s(3 * HOUR, observed_mtbf_s=2 * HOUR) == pytest.approx(daly_interval(300, 2 * HOUR))
    # daly ignores observations: only adaptive moves
    daly = IntervalChooser(CheckpointModel(cost_s=300, interval="daly"))
    assert daly.interval_s(3 * HOUR, observed_mtbf_s=2 * HOUR) == pytest.approx(daly_interval(300, 3 * HOUR))


def test_mtbf_estimate_moves_from_a_wrong_prior_to_what_it_sees() -> None:
    est = MtbfEstimator(prior_mtbf_s=24 * HOUR)
    assert est.mtbf_s() == 24 * HOUR
    for _ in range(50):
        est.observe(2 * HOUR, interrupted=True)
    assert est.mtbf_s() == pytest.approx((100 + 24) / 51 * HOUR)
    est.observe(10 * HOUR, interrupted=False)
    assert est.mtbf_s() == pytest.approx((110 + 24) / 51 * HOUR)


def test_bad_checkpoint_specs_list_every_problem_with_its_field() -> None:
    with pytest.raises(SpecError) as err:
        CheckpointModel(cost_s=-1, size_bytes=1e9, interval="often", restore_s=math.nan)  # type: ignore[arg-type]
    assert [p.path for p in err.value.problems] == ["cost_s", "restore_s", "cost_s", "bandwidth_bps", "interval"]
    with pytest.raises(SpecError, match=r"bandwidth_bps: must be a finite number > 0 \(got '10GB/s'\)"):
        CheckpointModel(size_bytes=1e9, bandwidth_bps="10GB/s")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="interval_s: missing for interval 'fixed'"):
        CheckpointModel(cost_s=10, interval="fixed")


@pytest.mark.parametrize(
    ("elastic", "hosts_lost", "min_hosts", "kind", "downtime_s", "hosts_after"),
    [
        (False, 1, 1, "restart", 300, 64),
        (True, 1, 32, "shrink", 60, 63),
        (True, 40, 32, "restart", 300, 64),
    ],
    ids=["rigid-run-restarts", "elastic-run-shrinks-past-a-host", "elastic-run-below-its-minimum-restarts"],
)
def test_recovery_plan(elastic: bool, hosts_lost: int, min_hosts: int, kind: str, downtime_s: float,
                       hosts_after: int) -> None:  # fmt: skip
    spec = CheckpointModel(cost_s=10, detect_s=20, restore_s=280, shrink_s=40)
    plan = plan_recovery(spec, hosts=64, hosts_lost=hosts_lost, min_hosts=min_hosts, elastic=elastic)
    assert (plan.kind, plan.downtime_s, plan.hosts_after) == (kind, downtime_s, hosts_after)
    assert plan.keeps_uncommitted is (kind == "shrink")


def test_a_stretch_knows_its_checkpoints_and_what_an_interruption_loses() -> None:
    stretch = Stretch(Cadence(tau_s=600, delta_s=20), speed=2.0)
    # 1000 work at speed 2 is 500 s of computing, before the first checkpoint: no checkpoint written
    assert stretch.finish_in_s(1000) == 500
    # 3000 work = 1500 s computing = two full cycles (1240 s) + 300 s
    assert stretch.finish_in_s(3000) == 1540
    state = stretch.at(1540 - 1)
    assert state.checkpoints == 2
    assert state.committed_work_s == 2400
    assert state.computed_work_s == pytest.approx(2998)
    assert state.checkpoint_s == 40
    # interrupted in the middle of the second checkpoint: only the first is kept
    mid = stretch.at(1230)
    assert (mid.checkpoints, mid.committed_work_s, mid.computed_work_s) == (1, 1200, 2400)


def test_a_stretch_resumed_at_another_speed_keeps_its_place_in_the_cycle() -> None:
    cadence = Cadence(tau_s=600, delta_s=20)
    first = Stretch(cadence, speed=1.0).at(400)
    second = Stretch(cadence, speed=0.5, phase_s=first.phase_s)
    assert second.finish_in_s(100) == 200  # still before the checkpoint at 600 s of computing
    later = second.at(250)  # 200 s computing to the checkpoint, then 20 s writing it, then 30 s more
    assert (later.checkpoints, later.committed_work_s, later.computed_work_s) == (1, 100, 115)


def _walk(tau: int, delta: int, phase: int, elapsed: int) -> tuple[float, int, float]:
    """Step through the cadence in 1/10 s ticks: (computed, checkpoints, committed compute) in seconds."""
    ticks, period = 10, (tau + delta) * 10
    computed = checkpoints = committed = 0
    for pos in range(phase * ticks, (phase + elapsed) * ticks):
        r = pos % period
        computed += r < tau * ticks
        if r == period - 1 and delta > 0:  # the last tick of a checkpoint completes it
            checkpoints, committed = checkpoints + 1, computed
    return computed / ticks, checkpoints, committed / ticks


@settings(max_examples=200, deadline=None)
@given(
    tau=st.integers(1, 40),
    delta=st.integers(0, 10),
    phase=st.integers(0, 45),
    elapsed=st.integers(0, 200),
)
def test_closed_form_progress_matches_a_step_by_step_walk(tau: int, delta: int, phase: int, elapsed: int) -> None:
    phase = phase % (tau + delta)
    cadence = Cadence(float(tau), float(delta))
    state = Stretch(cadence, phase_s=float(phase)).at(float(elapsed))
    computed, checkpoints, committed = _walk(tau, delta, phase, elapsed)
    assert state.computed_work_s == pytest.approx(computed, abs=0.05)
    if delta > 0:
        assert state.checkpoints == checkpoints
        assert state.committed_work_s == pytest.approx(committed, abs=0.05)
