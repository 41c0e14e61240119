"""The report's verdict: a numbers table in human units, the confounds named, one compare panel per metric."""

from __future__ import annotations

import io

import pytest

from crossrail.control.reports.figures import compare_view
from crossrail.control.reports.report_doc import ReportDoc, markdown
from crossrail.metrics import AttemptFacts, RunFacts, compare


def run(i: int, cycle_s: float, *, commit: str = "3f9a0c2") -> RunFacts:
    """A run submitted at 0 that ran `cycle_s` on one chip at 2.0 an hour and succeeded."""
    attempt = AttemptFacts(1, "gpu-a", 0.0, chips=1, cost_per_chip_hour=2.0, queue_s=0.0, ended_ts=cycle_s)
    r = RunFacts(f"r{i}", now=cycle_s, submitted_ts=0.0, ended_ts=cycle_s, outcome="succeeded", attempts=[attempt])
    r.work, r.args, r.commit, r.dataset_version = "sha256:" + "a" * 64, (), commit, "v1"
    return r


def doc(before: list[RunFacts], after: list[RunFacts], **options: bool) -> ReportDoc:
    verdict = compare(before, after, explain=("cost_per_effective_run",), **options)
    return ReportDoc("demo", 0.0, None, 0.0, 6, [], [], verdict=verdict, compared="before x (3 runs), after y (3 runs)")


def test_the_numbers_table_shows_each_metric_in_its_own_units() -> None:
    before = [run(i, s) for i, s in enumerate((3600, 3720, 3840))]
    after = [run(i, s) for i, s in enumerate((1800, 1860, 1920), start=3)]

    text = markdown(doc(before, after))

    assert "| metric | before | after | change | 95% CI | runs before/after | runs needed | detectable change |" in text
    # mean cycle 3720 s -> 1860 s; cost 2.0 an hour for each hour run: 2.07 -> 1.03
    assert "| research_cycle_seconds | 1h02m | 31m | -50% |" in text
    assert "| cost_per_effective_run | 2.07 | 1.03 | -50% |" in text


def test_a_refused_verdict_names_its_confound_and_shows_no_numbers() -> None:
    before = [run(i, 3600) for i in range(3)]
    after = [run(i, 1800, commit="9b1e44d") for i in range(3, 6)]

    text = markdown(doc(before, after))

    assert "- confound: code commit differs: before 3f9a0c2, after 9b1e44d" in text
    assert "| research_cycle_seconds |" not in text
    assert "**refused: the sides did not measure the same work" in text


@pytest.mark.slow
def test_the_compare_figure_draws_one_panel_per_metric() -> None:
    from matplotlib.image import imread

    before = [run(i, s) for i, s in enumerate((3600, 3720, 3840))]
    after = [run(i, s) for i, s in enumerate((1800, 1860, 1920), start=3)]
    verdict = compare(before, after, explain=("cost_per_effective_run", "chip_hours_per_run"))

    fig = compare_view(verdict, "x vs y")

    assert fig.png is not None
    assert imread(io.BytesIO(fig.png)).shape[:2] == (450, 800)
    assert fig.note.startswith("x vs y: research cycle shorter by 50%")
    assert "One panel per metric in its own units" in fig.note


def test_the_rl_backlog_panel_draws_each_pipelines_queues() -> None:
    from matplotlib.image import imread

    from crossrail.control.reports.figures import rl_backlog
    from crossrail.metrics import Sample

    rl = run(0, 600)
    rl.samples = [Sample("r0", 1, 10.0 * i, "backlog_samples_length", float(40 - i)) for i in range(5)]
    rl.samples += [Sample("r0", 1, 10.0 * i, "backlog_scored_length", float(i)) for i in range(5)]

    fig = rl_backlog([rl, run(1, 600)])

    assert fig.png is not None
    assert imread(io.BytesIO(fig.png)).shape[:2] == (450, 800)
    assert rl_backlog([run(1, 600)]).note == "no RL pipeline reported its backlog (backlog_samples_length)"
