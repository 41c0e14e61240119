"""The backlog controller: stage metrics and bounds in, part resizes with their reasons out."""

from __future__ import annotations

import pytest

from crossrail.scheduling.backlog import Bounds, Resize, StageMetrics, control

SIZES = {"sampler": 1, "reward": 1, "learner": 1}
BOUNDS = Bounds(max_policy_lag_steps=2, replicas={"sampler": (1, 8), "reward": (1, 4), "learner": (1, 2)})


def metrics(**fields: float) -> StageMetrics:
    base = {
        "window_s": 30.0,
        "sampler_samples_per_second": 16.0,
        "reward_samples_per_second": 16.0,
        "learner_samples_per_second": 16.0,
        "learner_idle_seconds": 22.5,  # busy 7.5 s for 480 samples: it could take 64/s
        "policy_lag_steps": 1.0,
    }
    return StageMetrics(**{**base, **fields})


def test_an_idle_learner_grows_the_samplers_to_what_it_could_take() -> None:
    [resize] = control(metrics(), SIZES, BOUNDS)

    assert (resize.part, resize.old, resize.new) == ("sampler", 1, 4)
    assert resize.reason.startswith("learner idle 75% of 30s waiting for samples; sampler supplies 16.0 samples/s")


def test_a_reward_stage_that_scores_less_than_the_samplers_make_is_grown_instead() -> None:
    [resize] = control(metrics(sampler_samples_per_second=64.0), SIZES, BOUNDS)

    assert (resize.part, resize.old, resize.new) == ("reward", 1, 4)


def test_growth_stops_at_the_bound_and_at_the_chips_the_pool_has_free() -> None:
    free = Bounds(**{**BOUNDS.__dict__, "free": {"sampler": 2}})

    [resize] = control(metrics(), SIZES, free)

    assert resize.new == 3
    assert resize.reason.endswith("sampler 1 -> 3 (held to 1..3)")


def test_when_the_samplers_cannot_grow_the_learner_gives_back_its_chips() -> None:
    full = Bounds(**{**BOUNDS.__dict__, "free": {"sampler": 0}})

    assert control(metrics(), {"sampler": 1, "reward": 1, "learner": 2}, full) == [
        Resize(
            "learner",
            2,
            1,
            "learner idle 75% of 30s waiting for samples; sampler supplies 16.0 samples/s, the learner could take "
            "64.0, and sampler cannot grow: learner 2 -> 1",
        )
    ]


@pytest.mark.parametrize(
    ("fields", "new", "reason"),
    [
        pytest.param(
            {"sampler_samples_per_second": 128.0, "policy_lag_steps": 3.0},
            4,
            "policy lag 3 steps is over the bound 2",
            id="lag-over-bound",
        ),
        pytest.param(
            # 8 replicas made 64/s while each was held back 20 of 30 s: they could make 192/s, three times
            # what the learner takes
            {"sampler_samples_per_second": 64.0, "sampler_held_seconds": 8 * 20.0},
            3,
            "samplers held back by the lag bound 67% of the window while the learner idled 0%",
            id="held-back-by-the-bound",
        ),
    ],
)
def test_samplers_that_outrun_the_learner_shrink_to_its_rate(fields: dict[str, float], new: int, reason: str) -> None:
    busy = {"learner_samples_per_second": 64.0, "learner_idle_seconds": 0.0}

    [resize] = control(metrics(**{**busy, **fields}), {"sampler": 8, "reward": 1, "learner": 1}, BOUNDS)

    assert (resize.part, resize.old, resize.new) == ("sampler", 8, new)
    assert resize.reason.startswith(reason)


def test_a_busy_learner_within_the_lag_bound_changes_nothing() -> None:
    assert control(metrics(learner_idle_seconds=1.0), SIZES, BOUNDS) == []


def test_a_change_inside_the_dead_band_is_not_made() -> None:
    # 10 samplers supply 60/s to a learner idle 13% that could take 69/s: 12 samplers is a 20% change.
    rates = {"sampler_samples_per_second": 60.0, "reward_samples_per_second": 60.0, "learner_samples_per_second": 60.0}
    near = metrics(**rates, learner_idle_seconds=4.0)
    sizes = {"sampler": 10, "reward": 1, "learner": 1}

    assert control(near, sizes, Bounds(2, {"sampler": (1, 16)}, slack=0.25)) == []
    assert [r.new for r in control(near, sizes, Bounds(2, {"sampler": (1, 16)}, slack=0.1))] == [12]
