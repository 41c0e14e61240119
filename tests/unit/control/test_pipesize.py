"""The live backlog controller's reading of the learner's reports (control/agent/pipesize.py): a window of step
samples -> stage metrics -> the same backlog.control decision the simulator takes."""

from __future__ import annotations

from typing import Any

import pytest

from crossrail.control.agent.pipesize import MOST_REPLICAS, PipelineSizing, decide, window_metrics
from crossrail.spec import Part


def step(
    step: int, ts: float, *, idle_s: float, queued: float = 0, scored: float = 0, lag: int = 0
) -> list[dict[str, Any]]:
    """The samples one learner step leaves in the store: 8 samples in a 1 s step, `idle_s` of it waiting."""
    values = {
        "samples_per_second": 8.0,
        "step_time_s": 1.0,
        "learner_idle_seconds": idle_s,
        "backlog_samples_length": queued,
        "backlog_scored_length": scored,
        "policy_lag_steps": lag,
    }
    return [{"ts": ts, "step": step, "name": name, "value": v, "attempt": 2} for name, v in values.items()]


def steps(n: int, growth: float = 0, **kw: Any) -> list[dict[str, Any]]:
    """`n` steps 1 s apart; the unscored queue gains `growth` samples a step (the samplers make more)."""
    return [s for i in range(n) for s in step(i + 1, float(i + 1), queued=growth * i, **kw)]


PARTS = {"sampler": Part(chips=1), "reward": Part(chips=1), "learner": Part(chips=1)}
SIZES = {"sampler": 1, "reward": 1, "learner": 1}
PLAN = PipelineSizing(running={}, sizes=SIZES, wanted=SIZES, last_resize_at=None)


def test_a_window_reads_the_learners_rate_idle_time_and_what_the_queues_before_it_gained() -> None:
    samples = [*step(1, 1.0, idle_s=0.5), *step(2, 2.0, idle_s=0.5, queued=4), *step(3, 3.0, idle_s=0.5, queued=8)]
    m = window_metrics(samples, since=0.0, until=4.0)
    assert m is not None
    assert m.window_s == 4.0
    assert m.learner_samples_per_second == pytest.approx(24 / 4)  # three steps of 8
    assert m.learner_idle_seconds == pytest.approx(1.5)
    assert m.sampler_samples_per_second == pytest.approx((24 + 8) / 4)  # learnt plus the unscored queue's growth
    assert m.reward_samples_per_second == pytest.approx(24 / 4)


def test_steps_outside_the_window_and_a_window_of_one_step_say_nothing() -> None:
    samples = steps(5, idle_s=0.0)
    assert window_metrics(samples, since=4.0, until=10.0) is None  # only step 5 is in it
    assert window_metrics(samples, since=10.0, until=20.0) is None
    m = window_metrics(samples, since=2.0, until=5.0)
    assert m is not None
    assert m.learner_samples_per_second == pytest.approx(24 / 3)  # steps 3..5


def test_a_learner_idle_most_of_the_window_grows_the_sampler_within_its_pools_room() -> None:
    m = window_metrics(steps(6, idle_s=0.8), since=0.0, until=6.0)
    assert m is not None
    [resize] = decide(m, PLAN, PARTS, free_chips={"sampler": 2, "reward": 0}, lag=2)
    assert (resize.part, resize.old, resize.new) == ("sampler", 1, 3)  # wanted 5: held to the 2 free chips
    assert "learner idle" in resize.reason
    [unbounded] = decide(m, PLAN, PARTS, free_chips={"sampler": 100, "reward": 0}, lag=2)
    assert unbounded.new <= MOST_REPLICAS


def test_a_busy_learner_keeps_every_size_and_lag_over_the_bound_shrinks_the_samplers() -> None:
    busy = window_metrics(steps(6, idle_s=0.0), since=0.0, until=6.0)
    assert busy is not None
    assert decide(busy, PLAN, PARTS, free_chips={"sampler": 8, "reward": 8}, lag=2) == []
    plan = PipelineSizing(
        running={}, sizes={**SIZES, "sampler": 4}, wanted={**SIZES, "sampler": 4}, last_resize_at=None
    )
    stale = window_metrics(steps(6, growth=9.6, idle_s=0.0, lag=5), since=0.0, until=6.0)
    assert stale is not None
    [resize] = decide(stale, plan, PARTS, free_chips={"sampler": 8, "reward": 8}, lag=2)
    assert (resize.part, resize.old) == ("sampler", 4)
    assert resize.new == 2  # the samplers made twice what the learner took
    assert "policy lag 5" in resize.reason


def test_a_restart_inside_the_window_never_yields_an_infinite_learner_capacity() -> None:
    # Steps 1..3 of attempt 2, then the learner restarts and resumes at step 2, idle 3 s while the parts came back.
    before = [*step(1, 1.0, idle_s=0.1), *step(2, 2.0, idle_s=0.1), *step(3, 3.0, idle_s=0.1)]
    resumed = [dict(s, attempt=3) for s in [*step(2, 7.0, idle_s=3.0), *step(3, 8.0, idle_s=1.0)]]
    same_attempt = [dict(s, attempt=2) for s in resumed]

    assert window_metrics([*before, *resumed], since=0.0, until=8.0) is None  # two attempts in one window
    assert window_metrics([*before, *same_attempt], since=0.0, until=8.0) is None  # the step counter went back
    # a learner idle the whole window tells nothing of what it could take (its capacity would be inf)
    assert window_metrics([*step(1, 1.0, idle_s=2.0), *step(2, 2.0, idle_s=2.0)], since=0.0, until=3.0) is None
    after = window_metrics(resumed, since=5.0, until=10.0)  # a window wholly after the restart is read
    assert after is not None
    assert after.learner_idle_seconds == pytest.approx(4.0)
    assert decide(after, PLAN, PARTS, {"sampler": 4, "reward": 4}, lag=8)[0].reason.find("inf") == -1
