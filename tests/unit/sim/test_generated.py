"""Gavel's generated workloads (`gavel-gen:`): the draws, the window, and the Fig. 8 setup reduced."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path

import pytest

from crossrail.errors import SpecError
from crossrail.sim import Simulation
from crossrail.sim.fleets import build_fleet
from crossrail.sim.generated import JOB_TABLE, GavelGen, GavelGenSpec
from crossrail.sim.traces import throughput_matrix
from crossrail.sim.workload import parse_workload

MATRIX = Path(__file__).resolve().parents[3] / "data" / "gavel" / "simulation_throughputs.json"


def stream(text: str) -> GavelGen:
    found = parse_workload(f"gavel-gen:{text}", throughputs=str(MATRIX))
    assert isinstance(found, GavelGen)
    return found


def test_the_same_seed_draws_the_same_jobs_and_another_seed_others() -> None:
    first = list(itertools.islice(stream("rate=5/h,window=10-20,seed=3"), 50))

    assert first == list(itertools.islice(stream("rate=5/h,window=10-20,seed=3"), 50))
    assert first != list(itertools.islice(stream("rate=5/h,window=10-20,seed=4"), 50))


def test_durations_types_and_arrivals_follow_gavels_distributions() -> None:
    gen = stream("rate=6/h,window=0-10,seed=0")
    jobs = list(itertools.islice(gen, 4000))
    minutes = [j.work_s / j.throughput["v100"] / 60 for j in jobs]

    assert all(j.chips == 1 for j in jobs)
    assert all(10**1.5 - 1e-6 <= m <= 10**4 + 1e-6 for m in minutes)
    short = sum(m < 10**3 for m in minutes) / len(minutes)
    assert short == pytest.approx(0.8, abs=0.03)
    gaps = [b.submit_s - a.submit_s for a, b in itertools.pairwise(jobs)]
    assert sum(gaps) / len(gaps) == pytest.approx(600.0, rel=0.06)  # 6 an hour
    types = {j.throughput["v100"] for j in jobs}
    assert len(types) == len(gen.templates) == 26


def test_multi_gpu_jobs_take_1_2_4_or_8_gpus_with_gavels_weights() -> None:
    jobs = list(itertools.islice(stream("rate=5/h,window=0-10,multi_gpu=1"), 6000))
    share = {g: sum(j.chips == g for j in jobs) / len(jobs) for g in (1, 2, 4, 8)}

    # As Gavel draws them: the GPUs first, then the type again until it is one Gavel runs distributed.
    assert share[1] == pytest.approx(0.7, abs=0.03)
    assert share[2] == pytest.approx(0.1, abs=0.02)
    assert share[4] == pytest.approx(0.15, abs=0.02)
    assert share[8] == pytest.approx(0.05, abs=0.015)


def test_seed_n_draws_the_jobs_gavels_simulator_draws_with_seed_n() -> None:
    """Gavel's generate_job: random.Random(seed + 2) gives a GPU-count draw, the duration, then the type from its
    job table in order; random.Random(seed + 3) the gaps (Scheduler._sample_arrival_time_delta)."""
    gen = stream("rate=5/h,window=0-10,seed=7")
    draws, gaps, matrix = random.Random(9), random.Random(10), throughput_matrix(MATRIX)
    at = 0.0
    for got in itertools.islice(gen, 20):
        draws.uniform(0, 1)
        low, high = (3, 4) if draws.random() >= 0.8 else (1.5, 3)
        run_s = 60 * 10 ** draws.uniform(low, high)
        model = draws.choice([name for name, _ in JOB_TABLE])
        v100 = matrix.rate(model, 1, "v100")
        assert (got.chips, got.throughput["v100"]) == (1, v100)
        assert got.work_s == pytest.approx(run_s * v100, rel=1e-12)
        assert got.submit_s == pytest.approx(at, rel=1e-12)
        at += -math.log(1.0 - gaps.random()) * 720.0


def test_bad_specs_name_every_problem_and_the_matrix_is_required() -> None:
    with pytest.raises(SpecError) as caught:
        GavelGenSpec.parse("rate=fast,window=9-3,colour=red")
    text = caught.value.render()
    assert "rate" in text
    assert "unknown key 'colour'" in text
    with pytest.raises(SpecError, match="window is required"):
        GavelGenSpec.parse("rate=5/h")
    with pytest.raises(SpecError, match="needs 0 <= A < B"):
        GavelGenSpec.parse("rate=5/h,window=9-3")
    with pytest.raises(SpecError, match="throughput matrix"):
        parse_workload("gavel-gen:rate=5/h,window=0-10")


def test_the_simulation_ends_when_the_window_has_finished_and_measures_only_it() -> None:
    gen = GavelGen(GavelGenSpec.parse("rate=4/h,window=20-40"), throughput_matrix(MATRIX))
    fleet = build_fleet([{"name": t, "accelerator": "gpu", "chip_type": t, "chips": 4, "chips_per_host": 1}
                         for t in ("v100", "p100", "k80")])  # fmt: skip
    result = Simulation(fleet, gen, policy="fifo").run()

    window = [result.record(f"gen-{i:06d}") for i in range(20, 40)]
    assert all(r.end_s is not None for r in window)
    assert result.end_s == max(r.end_s for r in window if r.end_s is not None)
    assert result.jobs > 40  # arrivals kept coming while the window ran
    jcts = [r.jct_s for r in window if r.jct_s is not None]
    assert result.avg_jct_s == pytest.approx(sum(jcts) / len(jcts))
    assert result.to_json()["measured_jobs"] == 20


@pytest.mark.slow
def test_gavel_fig8_reduced_the_heterogeneity_aware_form_beats_the_agnostic_one() -> None:
    """Gavel Fig. 8 on 16 V100 : 16 P100 : 16 K80 (a 16/36 scale of 36 each), jobs 400-500 measured."""
    gen = stream("rate=2/h,window=400-500,seed=0")
    fleet = build_fleet([{"name": t, "accelerator": "gpu", "chip_type": t, "chips": 16, "chips_per_host": 1,
                          "time_sliced": True}
                         for t in ("v100", "p100", "k80")])  # fmt: skip
    hetero = Simulation(fleet, gen, policy="max_min_fairness_hetero").run()
    agnostic = Simulation(fleet, gen, policy="max_min_fairness").run()

    assert hetero.avg_jct_s is not None
    assert agnostic.avg_jct_s is not None
    assert math.isfinite(hetero.avg_jct_s)
    assert hetero.avg_jct_s < 0.9 * agnostic.avg_jct_s


def test_the_windows_average_jct_does_not_depend_on_the_order_its_jobs_are_summed_in() -> None:
    """The window is a set of names, iterated in an order that changes with Python's hash seed; the average
    is summed exactly, so one run gives the same figure in every process."""
    gen = GavelGen(GavelGenSpec.parse("rate=4/h,window=0-11"), throughput_matrix(MATRIX))
    fleet = build_fleet([{"name": "v100", "accelerator": "gpu", "chip_type": "v100", "chips": 4, "chips_per_host": 1}])
    result = Simulation(fleet, gen, policy="fifo").run()
    window = [result.record(f"gen-{i:06d}") for i in range(11)]
    for i, rec in enumerate(window):  # ten JCTs of 1 s and one of 1e16 s: a plain sum loses the ones but last
        rec.submit_s, rec.end_s = 0.0, 1e16 if i == 5 else 1.0

    assert result.avg_jct_s == (1e16 + 10.0) / 11


@pytest.mark.parametrize("policy", ["max_min_fairness", "max_min_fairness_hetero"])
def test_fig8_reduced_folds_the_same_figures_whether_or_not_the_events_are_kept(policy: str) -> None:
    """Without an event log the simulation folds each event's fields into the metrics and builds no Event;
    every figure is the one the logged events give (within a relative 1e-9), on a Fig. 8-like workload
    where rounds stop and restart runs every six minutes."""
    fleet = build_fleet([{"name": t, "accelerator": "gpu", "chip_type": t, "chips": 8, "chips_per_host": 1,
                          "time_sliced": True}
                         for t in ("v100", "p100", "k80")])  # fmt: skip
    folded = Simulation(fleet, stream("rate=1/h,window=5-15,seed=0"), policy=policy).run()
    logged_sim = Simulation(fleet, stream("rate=1/h,window=5-15,seed=0"), policy=policy, record_events=True)
    logged = logged_sim.run()

    assert logged_sim.events is not None
    assert sum(e.type == "preempted" for e in logged_sim.events) > 100  # the rounds did stop runs
    assert folded.avg_jct_s == pytest.approx(logged.avg_jct_s, rel=1e-9)
    figures, expected = _figures(folded.to_json()), _figures(logged.to_json())
    assert figures.keys() == expected.keys()
    for key, value in expected.items():
        assert figures[key] == (pytest.approx(value, rel=1e-9) if isinstance(value, float) else value), key


def _figures(doc: dict[str, object], prefix: str = "") -> dict[str, object]:
    """A result's figures as one flat mapping (those of its wall time, which no two runs share, left out)."""
    flat: dict[str, object] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            flat.update(_figures(value, f"{prefix}{key}."))
        elif key not in ("wall_s", "events_per_s"):
            flat[prefix + key] = value
    return flat
