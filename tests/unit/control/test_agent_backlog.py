"""The backlog controller in the agent (a fake executor on a virtual clock): a learner that reports idle
steps gets its sampler part resized, the part restarted at the new size, and no second resize within the
window; a resize recorded by an agent that died before acting on it is finished by the next one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossrail.core import Event, EventType, ManualClock
from crossrail.scheduling.types import part_key
from crossrail.workloads.rl.control import Control, write_control

from .test_agent_decisions import Live
from .test_agent_pipeline import FLEET, PIPELINE, parts, submit


@pytest.fixture
def live(checkout: Path, clock: ManualClock) -> Iterator[Live]:
    world = Live(checkout, clock, fleet=FLEET)
    yield world
    world.client.close()


def start(live: Live, tmp_path: Path) -> tuple[str, Path]:
    """The pipeline running (learner 1, sampler 2 of 2 x 2 chips, reward 3) with its control.json written."""
    run = submit(live, tmp_path)
    live.tick()
    rendezvous = Path(live.store.get_run(run).run_checkpoint_dir) / "rl"
    write_control(rendezvous, Control(samplers=2, reward_workers=1, max_policy_lag_steps=2))
    return run, rendezvous


def report_steps(live: Live, run: str, first_ts: float, n: int, idle_s: float) -> None:
    """`n` learner steps (attempt 1), one a second from `first_ts`: 8 samples each, `idle_s` spent waiting."""
    samples = []
    for i in range(n):
        values = {"samples_per_second": 8.0, "step_time_s": 1.0, "learner_idle_seconds": idle_s}
        samples += [
            {"run_id": run, "attempt": 1, "ts": first_ts + i, "step": i + 1, "name": k, "value": v}
            for k, v in values.items()
        ]
    live.store.add_metric_samples(samples)


def resized(live: Live, run: str) -> list[dict[str, object]]:
    return [e.data for e in live.store.events(run=run) if e.type is EventType.RESIZED]


@pytest.mark.slow
def test_an_idle_learner_gets_its_sampler_part_grown_restarted_at_that_size_and_no_flapping(
    live: Live, tmp_path: Path
) -> None:
    run, rendezvous = start(live, tmp_path)
    began = live.clock.now()
    report_steps(live, run, began + 1, 14, idle_s=0.8)
    live.tick(5)  # the parts have not run a whole window (10 s) at their size yet
    assert resized(live, run) == []
    live.tick(10)
    [event] = resized(live, run)
    assert (event["part"], event["degree_before"], event["degree_after"], event["chips"]) == ("sampler", 2, 4, 8)
    assert "learner idle 72%" in str(event["reason"])
    assert "(held to 1..4)" in str(event["reason"])  # tpu-a had room for two more replicas of 2 chips
    assert live.executor.stops == [(run, 2, "preempted")]  # ended with grace to start again at its new size
    assert json.loads((rendezvous / "control.json").read_text())["samplers"] == 4
    live.tick()
    assert parts(live, run)[1:] == [
        (2, "sampler", "tpu-a", 4, "preempted"),
        (3, "reward", "h100-b", 1, "running"),
        (4, "sampler", "tpu-a", 8, "running"),
    ]
    assert live.executor.launched[-1].env["CROSSRAIL_PART_REPLICAS"] == "4"
    live.tick()
    assert live.agent.scheduler is not None
    held = live.agent.scheduler.cache.allocs[part_key(run, "sampler")]
    assert (held.chips, held.request.workers) == (8, 4)  # the scheduler holds the part at its new size
    report_steps(live, run, live.clock.now() + 1, 5, idle_s=0.9)
    live.tick(6)  # still idle, but within the window after the last resize
    assert len(resized(live, run)) == 1


@pytest.mark.slow
def test_a_resize_recorded_by_an_agent_that_died_before_acting_is_made_real_by_the_next_pass(
    live: Live, tmp_path: Path
) -> None:
    run, rendezvous = start(live, tmp_path)
    data = {"part": "sampler", "degree_before": 2, "degree_after": 4, "chips": 8, "reason": "learner idle"}
    live.store.append_events([Event(EventType.RESIZED, live.clock.now(), run, 2, data)])
    live.tick()
    assert live.executor.stops == [(run, 2, "preempted")]
    assert json.loads((rendezvous / "control.json").read_text())["samplers"] == 4
    live.tick()
    assert parts(live, run)[-1] == (4, "sampler", "tpu-a", 8, "running")
    assert live.executor.launched[-1].env["CROSSRAIL_PART_REPLICAS"] == "4"
    live.tick(1)
    assert live.executor.stops == [(run, 2, "preempted")]  # at its size now: nothing more to do


@pytest.mark.slow
def test_a_pipeline_without_a_learner_part_is_not_weighed_and_its_passes_go_on(live: Live, tmp_path: Path) -> None:
    text = PIPELINE.replace("resources: {chips: 13}", "resources: {chips: 5}").replace(
        "    learner: {chips: 8, prefer: gpu}\n", ""
    )
    run = submit(live, tmp_path, text)
    live.tick()
    rendezvous = Path(live.store.get_run(run).run_checkpoint_dir) / "rl"
    write_control(rendezvous, Control(samplers=2))
    live.tick(15)
    live.tick(15)
    assert [p[4] for p in parts(live, run)] == ["running", "running"]
    assert resized(live, run) == []
