"""The simulated RL pipeline: its parts admitted by the scheduling core, its stages sized by the controller."""

from __future__ import annotations

import pytest

from crossrail.core import Event, EventType
from crossrail.errors import PlacementError
from crossrail.scheduling import Request, Scheduler
from crossrail.scheduling.pipeline import parts_of
from crossrail.sim.rl import RLPart, RLPipeline, RLRates, RLSimulation
from crossrail.spec import Fleet, Part


def rl_fleet(tpu_chips: int = 32) -> Fleet:
    pools = [
        {"name": "tpu", "accelerator": "tpu", "chip_type": "tpu-v5e", "chips": tpu_chips, "chips_per_host": 4},
        {"name": "h100", "accelerator": "gpu", "chip_type": "h100", "chips": 16, "chips_per_host": 8},
        {"name": "cpu", "accelerator": "cpu", "chip_type": "epyc", "chips": 8, "chips_per_host": 8},
    ]
    data = {"apiVersion": "crossrail/v1", "kind": "Fleet", "metadata": {"name": "rl"}, "spec": {"pools": pools}}
    return Fleet.model_validate(data)


RATES = RLRates(sampler={"tpu-v5e": 4.0}, reward={"epyc": 100.0}, learner={"h100": 8.0})
"""A 4-chip sampler makes 16 samples/s; the 8-chip learner takes 64/s: four samplers feed it."""


def one_sampler(lag: int = 2, most: int = 8) -> RLPipeline:
    parts = {
        "sampler": RLPart(chips=4, replicas=1, most=most, prefer="tpu"),
        "reward": RLPart(chips=1, replicas=1, most=4, prefer="cpu"),
        "learner": RLPart(chips=8, replicas=1, most=1, prefer="gpu"),
    }
    return RLPipeline(parts, batch=64, max_policy_lag_steps=lag)


@pytest.mark.parametrize("lag", [pytest.param(0, id="synchronous"), pytest.param(2, id="bounded-async")])
def test_from_one_sampler_the_controller_at_least_halves_learner_idle_within_the_lag_bound(lag: int) -> None:
    off = RLSimulation(rl_fleet(), one_sampler(lag), RATES, controller=False).run(600.0)
    on = RLSimulation(rl_fleet(), one_sampler(lag), RATES, controller=True).run(600.0)

    assert off.learner_idle_fraction > 0.7
    assert on.learner_idle_fraction <= off.learner_idle_fraction / 2
    assert on.samples_per_second > 2 * off.samples_per_second
    assert max(off.max_policy_lag_steps, on.max_policy_lag_steps) <= lag
    assert on.sizes["sampler"] >= 4


def test_every_resize_is_a_resized_event_with_part_sizes_and_reason_and_the_scheduler_holds_the_chips() -> None:
    sim = RLSimulation(rl_fleet(), one_sampler(), RATES)
    result = sim.run(120.0)

    [event] = result.resizes
    assert event.type == EventType.RESIZED
    assert {k: event.data[k] for k in ("part", "degree_before", "degree_after", "chips")} == {
        "part": "sampler",
        "degree_before": 1,
        "degree_after": 4,
        "chips": 16,
    }
    assert event.data["reason"].startswith("learner idle")
    assert {p.name: p.free for p in sim.sched.pool_status()} == {"tpu": 16, "h100": 8, "cpu": 7}


def test_parts_land_on_different_pools_by_their_hints() -> None:
    result = RLSimulation(rl_fleet(), one_sampler(), RATES, controller=False).run(30.0)

    assert result.pools == {"sampler": "tpu", "reward": "cpu", "learner": "h100"}
    assert [e.data["part"] for e in result.events if e.type == EventType.STARTED] == ["learner", "sampler", "reward"]


def test_growth_is_held_to_the_chips_the_samplers_pool_has_free() -> None:
    result = RLSimulation(rl_fleet(tpu_chips=12), one_sampler(), RATES).run(120.0)

    assert result.sizes["sampler"] == 3
    assert "(held to 1..3)" in result.resizes[0].data["reason"]


def test_the_simulator_admits_the_parts_as_the_core_does_for_the_spec() -> None:
    spec = {
        "sampler": Part.model_validate({"chips": 4, "accelerator": "tpu"}),
        "reward": Part.model_validate({"chips": 1, "accelerator": "cpu"}),
        "learner": Part.model_validate({"chips": 8, "accelerator": "gpu"}),
    }
    core = Scheduler.from_fleet(rl_fleet())
    core.submitted(Request("rl", "rl", 13, prefer="mixed", parts=parts_of(spec)))
    decided = {a.part: (a.pool, a.chips) for a in core.cycle(0.0).admitted}

    sim = RLSimulation(rl_fleet(), one_sampler(), RATES, controller=False).run(1.0)

    assert decided == {part: (pool, chips) for part, pool, chips in _started(sim.events)}


def test_a_part_on_a_chip_type_without_a_rate_is_refused_by_name() -> None:
    rates = RLRates(sampler={}, reward=RATES.reward, learner=RATES.learner)

    with pytest.raises(PlacementError, match="sampler on tpu"):
        RLSimulation(rl_fleet(), one_sampler(), rates).run(30.0)


def _started(events: list[Event]) -> list[tuple[str, str, int]]:
    return [(e.data["part"], e.data["pool"], e.data["chips"]) for e in events if e.type == EventType.STARTED]
