"""spec.retries.backoff: the defaults, and every mistake named with its field and fix."""

from __future__ import annotations

import pytest

from crossrail.errors import SpecError
from crossrail.scheduling.decisions import RetryBackoff, RetryPolicy
from crossrail.spec import parse_experiment

from .builders import EXPERIMENT_YAML, doc, edited


def with_backoff(backoff: str) -> str:
    return edited(EXPERIMENT_YAML, "retries: {max: 3, exit_codes: []}", f"retries: {{max: 3, backoff: {backoff}}}")


def problems(text: str) -> list[tuple[str, str, str | None]]:
    with pytest.raises(SpecError) as caught:
        parse_experiment(doc(text))
    return [(p.path, p.message, p.fix) for p in caught.value.problems]


def test_the_default_back_off_is_30s_doubling_up_to_10m() -> None:
    exp = parse_experiment(doc(EXPERIMENT_YAML))
    policy = RetryPolicy.from_spec(exp.spec.retries.model_dump())
    assert policy.backoff == RetryBackoff(initial_s=30.0, factor=2.0, max_s=600.0)
    assert [policy.backoff.delay_s(n) for n in range(1, 7)] == [30.0, 60.0, 120.0, 240.0, 480.0, 600.0]


def test_a_back_off_of_durations_reads_as_seconds_and_zero_means_no_wait() -> None:
    exp = parse_experiment(doc(with_backoff("{initial: 1m, factor: 3, max: 1h}")))
    assert (exp.spec.retries.backoff.initial, exp.spec.retries.backoff.max) == (60.0, 3600.0)
    none = parse_experiment(doc(with_backoff("{initial: 0s}")))
    assert RetryPolicy.from_spec(none.spec.retries.model_dump()).backoff.delay_s(3) == 0.0


@pytest.mark.parametrize(
    ("backoff", "path", "message"),
    [
        pytest.param("{initial: soon}", "spec.retries.backoff.initial", "'soon' is not a duration", id="no-duration"),
        pytest.param("{factor: 0.5}", "spec.retries.backoff.factor", "must be >= 1", id="a-shrinking-factor"),
        pytest.param("{initial: 5m, max: 1m}", "spec.retries.backoff.max", "shorter than initial", id="max-too-low"),
        pytest.param("{intial: 5m}", "spec.retries.backoff.intial", "unknown key 'intial'", id="a-misspelt-key"),
    ],
)  # fmt: skip
def test_a_bad_back_off_is_one_problem_naming_its_field(backoff: str, path: str, message: str) -> None:
    ((where, what, fix),) = problems(with_backoff(backoff))
    assert where == path
    assert message in what
    if "intial" in backoff:
        assert fix == "did you mean 'initial'?"
