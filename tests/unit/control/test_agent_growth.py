"""The agent acts on the cycle's growth proposals (`CycleResult.grown`) as the simulator does: an executor that
resizes in place gives the running attempt the extra chips, the scheduler holds them and a `resized` event
says so; an executor that cannot leaves the run at its size, and nothing is claimed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crossrail.core import EventType, ManualClock
from crossrail.sim import CheckpointModel, SimJob, Simulation
from crossrail.sim.fleets import build_fleet

from .fake_executor import FakeExecutor
from .test_agent_decisions import Live

FLEET = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: one-gpu-pool}
spec:
  pools:
    - {name: h100, accelerator: gpu, chip_type: h100, chips: 8, chips_per_host: 8, cost_per_chip_hour: 3.0}
  queues:
    - {name: pretraining, stage: pretraining, quota: {h100: 8}}
"""
RIGID = "spec.resources={chips: 4, duration: 20m}"
ELASTIC = "spec.resources={chips: 4, max_chips: 8, duration: 20m}"


class ResizingExecutor(FakeExecutor):
    """A fake executor whose engine takes more chips into a running attempt in place."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.resizes: list[tuple[str, int, int]] = []

    def resize(self, run: str, attempt: int, chips: int) -> bool:
        status = self.attempts.get((run, attempt))
        if status is None or status.phase != "running":
            return False
        self.resizes.append((run, attempt, chips))
        return True


def world(checkout: Path, clock: ManualClock, *, resizes: bool) -> Live:
    live = Live(checkout, clock, FLEET)
    if resizes:
        live.executor = ResizingExecutor(clock)
        live.agent.executor = live.executor
    return live


def submit(live: Live, resources: str) -> str:
    run = live.client.submit(live.experiments / "pretrain-small.yaml", sets=[resources])
    return str(run["run"]["id"])


def resized(live: Live, run: str) -> list[dict[str, Any]]:
    return [dict(e.data, at=e.ts, attempt=e.attempt) for e in live.store.events(run=run) if e.type is EventType.RESIZED]


def neighbour_ends(live: Live) -> tuple[str, str]:
    """`rigid` (4 chips) and then `elastic` (4..8) start side by side on 8 chips; 100 s on, `rigid` succeeds."""
    rigid = submit(live, RIGID)
    live.clock.advance(1)
    elastic = submit(live, ELASTIC)
    live.tick()
    assert [(a.number, a.chips) for a in live.store.attempts(rigid)] == [(1, 4)]
    assert [(a.number, a.chips) for a in live.store.attempts(elastic)] == [(1, 4)]
    live.tick(100)
    live.executor.exit(rigid, 1, 0)
    live.tick()
    assert live.state(rigid) == "succeeded"
    return rigid, elastic


def test_an_executor_that_resizes_in_place_grows_the_attempt_and_the_agent_records_it(
    checkout: Path, clock: ManualClock
) -> None:
    live = world(checkout, clock, resizes=True)
    _, elastic = neighbour_ends(live)
    assert isinstance(live.executor, ResizingExecutor)
    scheduler = live.agent.scheduler
    assert scheduler is not None

    assert live.executor.resizes == [(elastic, 1, 8)]
    [grown] = resized(live, elastic)
    assert grown["attempt"] == 1
    assert (grown["part"], grown["degree_before"], grown["degree_after"], grown["chips"]) == (None, 4, 8, 8)
    assert grown["reason"].endswith("no run waiting for them")
    assert scheduler.cache.allocs[elastic].chips == 8

    for _ in range(3):  # later passes keep the size: nothing proposed or recorded again
        live.tick(10)
    assert live.executor.resizes == [(elastic, 1, 8)]
    assert len(resized(live, elastic)) == 1
    assert scheduler.cache.allocs[elastic].chips == 8

    # A new agent rebuilds the size from the store: a third run of 4 chips finds no room.
    live.agent.scheduler = None
    live.agent._forget_state()
    third = submit(live, RIGID)
    live.tick(1)
    assert live.store.attempts(third) == []
    rebuilt = live.agent.scheduler
    assert rebuilt is not None
    assert rebuilt.cache.allocs[elastic].chips == 8
    assert len(resized(live, elastic)) == 1
    live.client.close()


def test_an_executor_that_cannot_resize_leaves_the_run_at_its_size_and_nothing_is_claimed(
    checkout: Path, clock: ManualClock
) -> None:
    live = world(checkout, clock, resizes=False)
    _, elastic = neighbour_ends(live)
    scheduler = live.agent.scheduler
    assert scheduler is not None

    assert resized(live, elastic) == []
    assert scheduler.cache.allocs[elastic].chips == 4
    live.tick(10)
    assert resized(live, elastic) == []
    third = submit(live, RIGID)  # the 4 chips it did not take are there for the next run
    live.tick(1)
    assert [(a.number, a.chips) for a in live.store.attempts(third)] == [(1, 4)]
    live.client.close()


def test_the_simulator_grows_the_same_run_at_the_same_moment_with_the_same_event(
    checkout: Path, clock: ManualClock
) -> None:
    live = world(checkout, clock, resizes=True)
    start = clock.now()
    _, elastic = neighbour_ends(live)
    [live_grown] = resized(live, elastic)
    live.client.close()

    fleet = build_fleet([{"name": "h100", "accelerator": "gpu", "chip_type": "h100", "chips": 8,
                          "chips_per_host": 8}])  # fmt: skip
    jobs = [SimJob("rigid", "pretraining", 4, work_s=101.0),
            SimJob("elastic", "pretraining", 4, work_s=1200.0, submit_s=1.0, max_chips=8)]  # fmt: skip
    sim = Simulation(fleet, jobs, checkpoint=CheckpointModel(), record_events=True, quantum_s=0.0)
    sim.run()
    assert sim.events is not None
    [sim_grown] = [dict(e.data, at=e.ts, attempt=e.attempt) for e in sim.events if e.type is EventType.RESIZED]

    assert live_grown["at"] - start == pytest.approx(sim_grown["at"])  # both at the neighbour's end, 101 s
    assert {k: v for k, v in live_grown.items() if k != "at"} == {k: v for k, v in sim_grown.items() if k != "at"}
