"""Workloads: the synthetic generator, job files, and the Gavel and Philly trace adapters."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from crossrail.errors import SpecError
from crossrail.sim.traces import gavel_jobs, philly_jobs
from crossrail.sim.workload import SyntheticSpec, load_jobs, parse_workload, synthetic

DATA = Path(__file__).resolve().parents[3] / "data"
TRACE, MATRIX = DATA / "gavel" / "artifact_evaluation.trace", DATA / "gavel" / "simulation_throughputs.json"


def test_the_synthetic_generator_is_a_function_of_its_seed() -> None:
    spec = SyntheticSpec.parse("jobs=50,span=1d,mix=pretraining:1/experiment:3,sizes=8:1/64:1,median=2h,seed=4")
    again = synthetic(spec)
    other = synthetic(SyntheticSpec(**{**spec.__dict__, "seed": 5}))

    assert synthetic(spec) == again
    assert [j.work_s for j in other] != [j.work_s for j in again]
    assert {j.stage for j in again} == {"pretraining", "experiment"}
    assert {j.chips for j in again} <= {8, 64}
    assert all(0 <= a.submit_s <= b.submit_s for a, b in itertools.pairwise(again))


def test_a_bad_synthetic_spec_names_every_problem() -> None:
    with pytest.raises(SpecError) as err:
        parse_workload("synthetic:jobs=many,colour=blue")
    text = str(err.value)
    assert "2 problems" in text
    assert "jobs" in text
    assert "unknown key 'colour'" in text


def test_gavel_trace_jobs_carry_the_matrix_row_of_their_model_and_gpus() -> None:
    jobs = gavel_jobs(TRACE, MATRIX)

    assert len(jobs) == 15
    lm = jobs[11]  # LM (batch size 40) on 2 GPUs, 15044 steps
    assert (lm.chips, lm.work_s, lm.submit_s) == (2, 15044.0, 0.0)
    assert set(lm.throughput) == {"v100", "p100", "k80"}
    assert lm.throughput["v100"] > lm.throughput["k80"] > 0
    assert lm.estimate_s == pytest.approx(15044.0 / lm.throughput["v100"])


def test_a_gavel_trace_without_its_matrix_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="needs its throughput matrix"):
        parse_workload(f"gavel:{TRACE}")
    with pytest.raises(SpecError) as missing:
        gavel_jobs(tmp_path / "missing.trace", MATRIX)
    assert [p.source for p in missing.value.problems] == [str(tmp_path / "missing.trace")]


def test_the_shipped_philly_sample_is_replayed_in_time_order_without_jobs_that_never_ran() -> None:
    jobs = philly_jobs(DATA / "philly" / "sample.csv")
    rows = (DATA / "philly" / "sample.csv").read_text().splitlines()[1:]
    zero = sum(1 for r in rows if float(r.split(",")[1]) == 0)

    assert len(jobs) == len(rows) - zero > 150
    assert jobs[0].submit_s == 0.0
    assert all(a.submit_s <= b.submit_s for a, b in itertools.pairwise(jobs))
    assert {j.team for j in jobs} == {"vc-a", "vc-b", "vc-c", "vc-d"}


def test_malformed_philly_rows_are_reported_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-03 00:00:00,60,1,60,a\nyesterday,60,1,60,a\n"
        "2017-10-03 00:00:00,-5,1,60,a\n"
    )
    with pytest.raises(SpecError) as err:
        philly_jobs(path)
    assert [p.line for p in err.value.problems] == [3, 4]


def test_a_job_file_with_an_unknown_field_is_rejected_with_the_fields_it_takes(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n  - {name: a, chips: 8, work_s: 60}\n  - {name: b, chips: 8, work_s: 60, gpus: 2}\n")
    with pytest.raises(SpecError, match=r"jobs\[1\].*unknown fields gpus"):
        load_jobs(path)
    path.write_text("jobs:\n  - {name: a, stage: eval, chips: 8, work_s: 60, accelerators: [tpu]}\n")
    assert load_jobs(path)[0].accelerators == ("tpu",)
