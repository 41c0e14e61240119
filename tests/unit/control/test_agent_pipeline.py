"""A run with `spec.parts` under the agent (a fake executor on a virtual clock): one attempt per part on its
own pool, admitted together; a part's failure retries that part alone; the learner's success ends the run
and stops the other parts; cancel stops every part."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crossrail.cli import render
from crossrail.core import Event, EventType, ManualClock
from crossrail.errors import PlacementError
from crossrail.scheduling.types import part_key
from crossrail.sim.rl import RLPart, RLPipeline, RLRates, RLSimulation
from crossrail.spec import load_fleet

from .test_agent_decisions import Live

FLEET = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: mixed}
spec:
  pools:
    - {name: tpu-a, accelerator: tpu, chip_type: tpu-v5p, chips: 8, chips_per_host: 4, cost_per_chip_hour: 4.0}
    - {name: h100-a, accelerator: gpu, chip_type: h100, chips: 8, chips_per_host: 8, cost_per_chip_hour: 3.0}
    - {name: h100-b, accelerator: gpu, chip_type: h100, chips: 8, chips_per_host: 8, cost_per_chip_hour: 3.1}
  queues:
    - {name: rl, stage: reinforcement_learning, quota: {tpu-a: 8, h100-a: 8, h100-b: 8}}
"""
PIPELINE = """\
apiVersion: crossrail/v1
kind: Experiment
metadata: {name: rl-tiny, team: alignment, owner: ada@example.com}
spec:
  stage: reinforcement_learning
  image: python@sha256:9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c0b2d4f6e8a1c3e5b7d9f0a2c4e6b8d0f
  code: {repo: https://github.com/acme/trainer, commit: auto}
  command: [python, -m, crossrail.workloads.rl]
  dataset: {uri: DATA, version: v1}
  checkpoint: {dir: CKPT, format: crossrail-ckpt/v1}
  resources: {chips: 13}
  parts:
    sampler: {chips: 2, replicas: 2, prefer: tpu}
    reward: {chips: 1, prefer: gpu}
    learner: {chips: 8, prefer: gpu}
  retries: {max: 2, backoff: {initial: 10s}}
"""


@pytest.fixture
def live(checkout: Path, clock: ManualClock) -> Iterator[Live]:
    world = Live(checkout, clock, fleet=FLEET)
    yield world
    world.client.close()


def submit(live: Live, tmp_path: Path, text: str = PIPELINE) -> str:
    path = tmp_path / "rl-tiny.yaml"
    (tmp_path / "data").mkdir(exist_ok=True)
    path.write_text(text.replace("CKPT", str(tmp_path / "ckpt")).replace("DATA", str(tmp_path / "data")))
    return str(live.client.submit(path)["run"]["id"])


def parts(live: Live, run: str) -> list[tuple[int, str | None, str, int, str]]:
    return [(a.number, a.part, a.pool, a.chips, a.state) for a in live.store.attempts(run)]


@pytest.mark.slow
def test_a_pipeline_runs_each_part_as_its_own_attempt_on_its_own_pool(live: Live, tmp_path: Path) -> None:
    run = submit(live, tmp_path)
    live.tick()
    assert parts(live, run) == [
        (1, "learner", "h100-a", 8, "running"),
        (2, "sampler", "tpu-a", 4, "running"),
        (3, "reward", "h100-b", 1, "running"),
    ]
    assert live.state(run) == "running"
    launched = {r.attempt: r for r in live.executor.launched}
    assert launched[2].env["CROSSRAIL_PART"] == "sampler"
    assert launched[2].env["CROSSRAIL_PART_REPLICAS"] == "2"
    assert launched[2].command[-2:] == ["--part", "sampler"]
    # One checkpoint directory for all parts: the RL stages meet in its rendezvous directory (`<dir>/rl`).
    shared = {r.env["CROSSRAIL_CHECKPOINT_DIR"] for r in launched.values()}
    assert shared == {live.store.get_run(run).run_checkpoint_dir}
    shown = live.client.show(run)
    assert shown["lineage"]["parts"] == {
        "learner": {"pool": "h100-a", "accelerator": "gpu", "chip_type": "h100", "chips": 8},
        "sampler": {"pool": "tpu-a", "accelerator": "tpu", "chip_type": "tpu-v5p", "chips": 4},
        "reward": {"pool": "h100-b", "accelerator": "gpu", "chip_type": "h100", "chips": 1},
    }
    assert [a["part"] for a in shown["attempts"]] == ["learner", "sampler", "reward"]
    with render.console.capture() as printed:
        render.run(shown)
    assert "sampler on tpu-a (4 x tpu-v5p)" in printed.get()
    started = [e for e in live.store.events(run=run) if e.type is EventType.STARTED]
    assert {(e.data["part"], e.data["pool"], e.data["chip_type"]) for e in started} == {
        ("learner", "h100-a", "h100"),
        ("sampler", "tpu-a", "tpu-v5p"),
        ("reward", "h100-b", "h100"),
    }


@pytest.mark.slow
def test_a_crashed_part_is_retried_alone_and_the_learner_ends_the_run(live: Live, tmp_path: Path) -> None:
    run = submit(live, tmp_path)
    live.tick()
    live.executor.kill(run, 2)  # the sampler
    live.tick()
    assert parts(live, run)[1][1:] == ("sampler", "tpu-a", 4, "failed")
    assert live.state(run) == "running"  # the learner and reward stage keep going
    failed = next(e for e in live.store.events(run=run) if e.type is EventType.FAILED)
    assert (failed.data["part"], failed.data["final"], failed.data["avoid_pool"]) == ("sampler", False, "tpu-a")
    live.tick(5)  # its back-off (10 s) is not over
    assert len(parts(live, run)) == 3
    live.tick(10)
    # Offered again alone, away from the pool it was lost on: h100-b has room beside the reward stage.
    assert parts(live, run)[3] == (4, "sampler", "h100-b", 4, "running")
    assert [p[4] for p in parts(live, run)[:3]] == ["running", "failed", "running"]
    live.executor.exit(run, 1, 0)  # the learner finished
    live.tick()
    assert live.state(run) == "succeeded"
    live.tick()  # the other parts are stopped with grace, and end cancelled
    assert [p[4] for p in parts(live, run)] == ["succeeded", "failed", "cancelled", "cancelled"]
    assert sorted(live.executor.stops) == [(run, 3, "cancelled"), (run, 4, "cancelled")]
    assert live.store.get_run(run).state == "succeeded"
    assert live.agent.reconcile().idle


@pytest.mark.slow
def test_a_part_out_of_retries_fails_the_pipeline_and_cancel_stops_every_part(live: Live, tmp_path: Path) -> None:
    run = submit(live, tmp_path)
    live.tick()
    live.executor.exit(run, 3, 1)  # the reward stage fails with a code not listed: not retried
    live.tick()
    assert live.state(run) == "failed"
    live.tick()  # the learner and sampler are stopped with grace, and end at the next pass
    live.tick()
    assert [p[4] for p in parts(live, run)] == ["cancelled", "cancelled", "failed"]

    other = submit(live, tmp_path)
    live.tick()
    assert [p[4] for p in parts(live, other)] == ["running"] * 3
    live.client.cancel(other)
    live.tick()
    live.tick()
    assert [p[4] for p in parts(live, other)] == ["cancelled"] * 3
    assert part_key(other, "learner") not in (live.agent.scheduler.cache.allocs if live.agent.scheduler else {})


def test_a_pipeline_is_feasible_part_by_part_and_a_part_no_pool_holds_is_named(live: Live, tmp_path: Path) -> None:
    submit(live, tmp_path)  # 13 chips in all on pools of 8: each part fits one
    path = tmp_path / "too-big.yaml"
    path.write_text(
        PIPELINE.replace("CKPT", str(tmp_path))
        .replace("DATA", str(tmp_path / "data"))
        .replace("learner: {chips: 8", "learner: {chips: 16")
        .replace("chips: 13", "chips: 21")
    )
    with pytest.raises(
        PlacementError, match=r"could ever hold part learner of rl-tiny \(16 chips\).*spec\.parts\.learner"
    ):
        live.client.submit(path)
    assert len(live.store.list_runs()) == 1


# --- the same pipeline through the agent and through the simulator ------------------------------------------


def placed(events: list[Event], run: str, kind: EventType) -> list[tuple[object, ...]]:
    """The pipeline's first admission as its events record it: each part's pool, hardware, chips and reason."""
    first = [e for e in events if e.type is kind][:3]
    return sorted(
        (e.data["part"], e.data["pool"], e.data["chip_type"], e.data["chips"], e.data["reason"].replace(run, "RUN"))
        for e in first
    )


def lost(events: list[Event]) -> list[tuple[object, ...]]:
    return [
        (e.data["part"], e.data["cause"], e.data["final"], e.data["avoid_pool"])
        for e in events
        if e.type is EventType.FAILED
    ]


@pytest.mark.slow
def test_the_agent_and_the_simulator_admit_a_pipeline_and_retry_a_lost_part_alike(live: Live, tmp_path: Path) -> None:
    run = submit(live, tmp_path)
    live.tick()
    live.executor.lose(run, 2)  # the sampler's host is gone
    live.tick(30)
    live.tick(120)  # past any back-off: the sampler is offered again alone
    events = live.store.events(run=run)

    rates = RLRates({"tpu-v5p": 1.0, "h100": 1.0}, {"tpu-v5p": 1.0, "h100": 1.0}, {"tpu-v5p": 1.0, "h100": 1.0})
    pipeline = RLPipeline(
        {
            "sampler": RLPart(2, 2, prefer="tpu"),
            "reward": RLPart(1, 1, prefer="gpu"),
            "learner": RLPart(8, 1, prefer="gpu"),
        }
    )
    sim = RLSimulation(load_fleet(live.fleet_path), pipeline, rates, controller=False, crashes={"sampler": 10.0})
    sim_events = sim.run(400.0).events

    assert placed(events, run, EventType.PLACED) == placed(sim_events, "rl", EventType.STARTED)
    assert lost(events) == lost(sim_events) == [("sampler", "lost", False, "tpu-a")]
    retried = [(e.data["part"], e.data["pool"]) for e in events if e.type is EventType.PLACED][3:]
    sim_retried = [(e.data["part"], e.data["pool"]) for e in sim_events if e.type is EventType.STARTED][3:]
    assert retried == sim_retried == [("sampler", "h100-b")]


def test_a_pipeline_waiting_to_retry_its_only_unfinished_part_is_not_idle(live: Live, tmp_path: Path) -> None:
    run = submit(live, tmp_path)
    live.tick()
    live.executor.exit(run, 2, 0)  # the sampler and reward stage finished their work
    live.executor.exit(run, 3, 0)
    live.executor.kill(run, 1)  # and then the learner crashed: nothing of the run is active
    live.clock.advance(1)
    tick = live.agent.reconcile()
    assert (tick.running, tick.queued, tick.idle) == (0, 1, False)  # `agent --until-idle` waits for the retry
    live.tick(10)
    assert parts(live, run)[3][1:] == ("learner", "h100-b", 8, "running")  # only the learner, away from h100-a
    live.executor.exit(run, 4, 0)
    live.tick()
    assert live.state(run) == "succeeded"


def test_parts_waiting_in_their_engines_queue_stay_there_when_a_pool_drains(
    checkout: Path, clock: ManualClock, tmp_path: Path
) -> None:
    kueue = Live(checkout, clock, fleet=FLEET, can_withdraw=True, queued=True)
    try:
        small = PIPELINE.replace("chips: 13", "chips: 7").replace("learner: {chips: 8", "learner: {chips: 2")
        run = submit(kueue, tmp_path, small)  # small enough for one pool: the estimates would move it whole
        kueue.tick()
        assert [p[4] for p in parts(kueue, run)] == ["starting"] * 3  # launched; the engine holds them
        kueue.fleet_path.write_text(
            FLEET.replace("cost_per_chip_hour: 4.0}", "cost_per_chip_hour: 4.0, drained: true}")
        )
        kueue.tick(10)
        kueue.tick(600)
        # A part is re-placed by its own retry (the cycle), not moved as a whole run by the estimates.
        assert [p[4] for p in parts(kueue, run)] == ["starting"] * 3
        assert kueue.store.events(run=run, types=["replaced"]) == []
    finally:
        kueue.client.close()
