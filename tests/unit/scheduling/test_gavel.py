"""Gavel's trace and throughput matrix: the published files parse, and bad input names its line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crossrail.errors import SpecError
from crossrail.scheduling.gavel import (
    GavelJob,
    Throughputs,
    load_throughputs,
    load_trace,
    parse_job_key,
    parse_throughputs,
    parse_trace,
)

DATA = Path(__file__).resolve().parents[3] / "data" / "gavel"


def gavel_jobs() -> tuple[list[GavelJob], Throughputs]:
    return load_trace(DATA / "artifact_evaluation.trace"), load_throughputs(DATA / "simulation_throughputs.json")


ROW = "LM (batch size 10)\tpython main.py\tlanguage_modeling\t--steps\t1\t73486\t1\t1\t-1.000000\t0"


def test_the_published_trace_has_fifteen_single_and_double_gpu_jobs_arriving_at_once() -> None:
    trace, _ = gavel_jobs()
    assert len(trace) == 15
    first = trace[0]
    assert (first.job_type, first.total_steps, first.scale_factor) == ("ResNet-50 (batch size 64)", 2931, 1)
    assert first.command.startswith("python3 main.py")
    assert (first.num_steps_arg, first.needs_data_dir, first.slo, first.priority_weight) == (
        "--num_minibatches",
        True,
        None,
        1.0,
    )
    assert sorted({j.scale_factor for j in trace}) == [1, 2]
    assert {j.arrival_s for j in trace} == {0.0}
    assert not trace[-1].needs_data_dir  # A3C reads no data set


def test_the_matrix_gives_every_trace_job_a_rate_on_v100_and_k80() -> None:
    trace, matrix = gavel_jobs()
    assert {"v100", "p100", "k80", "v100_unconsolidated"} <= set(matrix.worker_types)
    assert matrix.rate("ResNet-18 (batch size 64)", 1, "v100") == pytest.approx(24.0932, rel=1e-4)
    assert matrix.rate("CycleGAN", 1, "k80") == pytest.approx(0.50477, rel=1e-4)
    for job in trace:
        rates = matrix.job_rates(job, ["v100", "k80"])
        assert min(rates.values()) > 0, job.job_type
    assert matrix.rate("No such model", 1, "v100") == 0.0


def test_a_job_key_is_read_as_model_and_gpu_count() -> None:
    assert parse_job_key("('LM (batch size 10)', 2)") == ("LM (batch size 10)", 2)
    with pytest.raises(ValueError, match="is not a job key"):
        parse_job_key("LM, 2")


def test_a_good_row_parses_and_blank_lines_are_skipped() -> None:
    (job,) = parse_trace(f"\n{ROW}\n\n")
    assert (job.job_type, job.total_steps, job.arrival_s) == ("LM (batch size 10)", 73486, 0.0)


def test_every_bad_trace_line_is_reported_with_its_number_and_column() -> None:
    short = "\t".join(ROW.split("\t")[:9])
    bad_steps = ROW.replace("73486", "many")
    zero_gpus = ROW.replace("\t73486\t1\t", "\t73486\t0\t")
    with pytest.raises(SpecError) as caught:
        parse_trace("\n".join([ROW, short, bad_steps, zero_gpus]), source="my.trace")
    text = str(caught.value)
    assert "3 problems in my.trace" in text
    assert "row (line 2): has 9 columns; write 10 tab-separated columns" in text
    assert "total_steps (line 3): column 6 must be a whole number (got 'many')" in text
    assert "scale_factor (line 4): must be > 0 (got 0)" in text


def test_the_matrix_keeps_job_alone_rates_and_refuses_malformed_entries() -> None:
    good = {"v100": {"('A3C', 1)": {"null": 7.5, "('LM (batch size 5)', 1)": [3.0, 50.0]}}}
    assert parse_throughputs(json.dumps(good)).rates == {"v100": {("A3C", 1): 7.5}}
    bad = {"v100": {"A3C": {"null": 1.0}, "('LM', 1)": {"other": 2.0}}, "k80": [1, 2]}
    with pytest.raises(SpecError) as caught:
        parse_throughputs(bad, source="m.json")
    text = str(caught.value)
    assert "3 problems in m.json" in text
    assert "v100.A3C: 'A3C' is not a job key" in text
    assert "needs a 'null' rate >= 0 (got None)" in text
    assert "k80: must map job keys to rates" in text
    with pytest.raises(SpecError, match=r"m.json\n  \(document\) \(line 1\): is not JSON"):
        parse_throughputs("{oops", source="m.json")
