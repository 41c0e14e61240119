"""The simulated RL pipeline: its parts admitted by the scheduling core, its stages sized by the controller."""

from __future__ import annotations

from dataclasses import replace

import pytest

from crossrail.core import Event, EventType
from crossrail.errors import PlacementError
from crossrail.scheduling import Request, Scheduler
from crossrail.scheduling.pipeline import parts_of
from crossrail.sim.rl import RLPart, RLPipeline, RLRates, RLSimulation
from crossrail.spec import Fleet, Part


def rl_fleet(tpu_chips: int = 32, spare_tpu: int = 0) -> Fleet:
    pools = [
        {"name": "tpu", "accelerator": "tpu", "chip_type": "tpu-v5e", "chips": tpu_chips, "chips_per_host": 4},
        *(
            [{"name": "tpu-b", "accelerator": "tpu", "chip_type": "tpu-v5e", "chips": spare_tpu, "chips_per_host": 4}]
            if spare_tpu
            else []
        ),
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
    started = [e.data for e in result.events if e.type == EventType.STARTED]
    assert [(d["part"], d["accelerator"], d["chip_type"]) for d in started] == [
        ("learner", "gpu", "h100"),
        ("sampler", "tpu", "tpu-v5e"),
        ("reward", "cpu", "epyc"),
    ]


def test_growth_is_held_to_the_chips_the_samplers_pool_has_free() -> None:
    result = RLSimulation(rl_fleet(tpu_chips=12), one_sampler(), RATES).run(120.0)

    assert result.sizes["sampler"] == 3
    assert "(held to 1..3)" in result.resizes[0].data["reason"]


def test_the_simulator_admits_the_parts_as_the_core_does_for_the_spec() -> None:
    spec = {
        "sampler": Part.model_validate({"chips": 4, "prefer": "tpu"}),
        "reward": Part.model_validate({"chips": 1, "prefer": "cpu"}),
        "learner": Part.model_validate({"chips": 8, "prefer": "gpu"}),
    }
    core = Scheduler.from_fleet(rl_fleet())
    core.submitted(Request("rl", "rl", 13, prefer="mixed", parts=parts_of(spec)))
    decided = {a.part: (a.pool, a.chips) for a in core.cycle(0.0).admitted}

    sim = RLSimulation(rl_fleet(), one_sampler(), RATES, controller=False).run(1.0)

    assert decided == {part: (pool, chips) for part, pool, chips in _started(sim.events)}


def test_a_part_on_a_chip_type_without_a_rate_is_refused_by_name() -> None:
    rates = RLRates(sampler={}, reward=RATES.reward, learner=RATES.learner)

    with pytest.raises(PlacementError, match="part sampler: no pool of the fleet may run it"):
        RLSimulation(rl_fleet(), one_sampler(), rates).run(30.0)


def _started(events: list[Event]) -> list[tuple[str, str, int]]:
    return [(e.data["part"], e.data["pool"], e.data["chips"]) for e in events if e.type == EventType.STARTED]


def test_a_crashed_sampler_is_retried_alone_on_another_pool_while_the_learner_keeps_training() -> None:
    sim = RLSimulation(rl_fleet(spare_tpu=16), one_sampler(), RATES, crashes={"sampler": 100.0}, restart_s=20.0)
    result = sim.run(300.0)

    lost = [e for e in result.events if e.data.get("part") == "sampler" and e.type != EventType.RESIZED]
    assert [(e.type, e.attempt) for e in lost] == [
        (EventType.STARTED, 1),
        (EventType.FAILED, 1),
        (EventType.RETRIED, None),
        (EventType.STARTED, 2),
    ]
    assert lost[-1].data["pool"] == "tpu-b"  # away from the pool it was lost on
    assert lost[-1].ts == pytest.approx(120.0)
    assert sim.attempts == {"sampler": 2, "reward": 1, "learner": 1}  # nothing else restarted
    assert {p.name: p.free for p in sim.sched.pool_status()}["tpu"] == 32  # its old chips are free
    learner_starts = [e for e in result.events if e.type == EventType.STARTED and e.data["part"] == "learner"]
    assert len(learner_starts) == 1
    assert result.max_policy_lag_steps <= 2


def test_the_learner_trains_on_the_backlog_while_the_sampler_is_down() -> None:
    overfed = replace(one_sampler(), parts={**one_sampler().parts, "sampler": RLPart(chips=4, replicas=8)})

    def crashed(until_s: float) -> RLSimulation:
        sim = RLSimulation(rl_fleet(), overfed, RATES, controller=False, crashes={"sampler": 50.0}, restart_s=100.0)
        sim.run(until_s)
        return sim

    before, after = crashed(49.9), crashed(100.0)

    assert after.down == {"sampler"}
    assert 2 <= after.version - before.version <= 3  # the backlog the lag bound allowed: at most lag + 1 batches


def test_from_too_many_samplers_the_controller_gives_chips_back_and_keeps_the_learner_fed() -> None:
    pipeline = one_sampler()
    overfed = replace(pipeline, parts={**pipeline.parts, "sampler": RLPart(chips=4, replicas=8, prefer="tpu")})
    sim = RLSimulation(rl_fleet(), overfed, RATES)

    result = sim.run(600.0)

    assert result.sizes["sampler"] == 4
    assert result.learner_idle_fraction < 0.05
    assert result.resizes[0].data["reason"].startswith("samplers held back by the lag bound")
    assert {p.name: p.free for p in sim.sched.pool_status()}["tpu"] == 16  # 16 of its 32 chips given back
