"""The verdict's arithmetic and sentences on runs whose numbers are written down, so each answer is known."""

from __future__ import annotations

import math

import pytest

from crossrail.metrics import AttemptFacts, RunFacts, Sample, change, compare


def run(i: int, *, queue_s: float, run_s: float, tokens_per_s: float | None = None) -> RunFacts:
    """A run submitted at 0 that waited `queue_s`, ran `run_s` on one chip and succeeded."""
    attempt = AttemptFacts(1, "gpu-a", queue_s, chips=1, queue_s=queue_s, ended_ts=queue_s + run_s, end="succeeded")
    samples = [Sample(f"r{i}", 1, queue_s + 1, "tokens_per_second", tokens_per_s)] if tokens_per_s else []
    end = queue_s + run_s
    return RunFacts(f"r{i}", now=end, submitted_ts=0.0, ended_ts=end, outcome="succeeded", attempts=[attempt],
                    samples=samples)  # fmt: skip


def test_runs_needed_is_the_normal_approximation_for_80_percent_power() -> None:
    before = [run(i, queue_s=0, run_s=s) for i, s in enumerate((10, 20, 30, 40))]
    after = [run(i, queue_s=0, run_s=s) for i, s in enumerate((20, 30, 40, 50))]

    c = change("research_cycle_seconds", before, after)

    # (1.959964 + 0.841621)^2 * (var 166.67 + var 166.67) / (35 - 25)^2 = 26.16 -> 27 runs a side
    assert c.needed == 27
    assert (c.before, c.after, c.change) == (25, 35, pytest.approx(0.4))
    assert not c.significant
    assert compare(before, after).sentence == (
        "no significant change in research cycle (+40%, 95% CI "
        f"{c.ci[0] * 100:+.0f}% to {c.ci[1] * 100:+.0f}%) (n too small: 4 runs; need about 27)"
        # 2.801585 * sqrt(166.67 / 4 + 166.67 / 4) / 25 = 1.023: four runs a side see only a doubling
        "; these runs detect a change of 102% or more"
    )


def test_the_interval_is_the_same_for_the_same_seed_and_covers_the_observed_change() -> None:
    before = [run(i, queue_s=0, run_s=100 + 7 * (i % 5)) for i in range(20)]
    after = [run(i, queue_s=0, run_s=80 + 7 * (i % 5)) for i in range(20)]

    first, again = change("research_cycle_seconds", before, after), change("research_cycle_seconds", before, after)

    assert first.ci == again.ci
    assert first.ci is not None
    assert first.ci[0] <= first.change <= first.ci[1]
    assert first.significant
    sentence = compare(before, after).sentence
    assert sentence.startswith(f"research cycle shorter by {abs(first.change) * 100:.0f}% (95% CI ")


def test_throughput_up_but_cycle_not_shorter_names_the_queue_that_ate_the_gain() -> None:
    before = [run(i, queue_s=10 + i % 3, run_s=100 + 3 * (i % 4), tokens_per_s=100 + i % 3) for i in range(16)]
    after = [run(i, queue_s=37 + i % 3, run_s=73 + 3 * (i % 4), tokens_per_s=130 + i % 3) for i in range(16)]

    verdict = compare(before, after)

    queue = next(c for c in verdict.explain if c.metric == "experiment_queue_seconds")
    assert verdict.sentence == f"throughput up 30% but cycle not shorter: queue time rose {queue.ratio():.1f}×"
    assert not verdict.cycle.significant


def test_no_succeeded_runs_on_a_side_cannot_be_judged() -> None:
    sentence = compare([], [run(0, queue_s=0, run_s=1)]).sentence
    assert (
        sentence
        == "cannot judge the research cycle: no run before succeeded (n too small: 0 runs; need at least 3 a side)"
    )
    assert math.isclose(
        change("research_cycle_seconds", [run(0, queue_s=0, run_s=2)], [run(1, queue_s=0, run_s=1)]).change or 0, -0.5
    )
