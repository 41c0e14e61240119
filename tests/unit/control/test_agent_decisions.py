"""The agent's end-of-attempt rules on a virtual clock (a fake executor, no processes, no sleeps), and the
same failure scenario driven through the agent and through the simulator: the decisions are equal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crossrail.client import Client
from crossrail.control.agent import Agent, AgentConfig
from crossrail.core import Event, EventType, ManualClock
from crossrail.scheduling.decisions import RetryPolicy
from crossrail.sim.checkpointing import CheckpointSpec
from crossrail.sim.simulation import Simulation
from crossrail.sim.workload import SimJob
from crossrail.spec import load_fleet

from .fake_executor import FakeExecutor

FLEET = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: two-tpu-pools}
spec:
  preemption: {on_drain: preempt}
  pools:
    - {name: tpu-a, accelerator: tpu, chip_type: tpu-v5p, chips: 4, chips_per_host: 4, cost_per_chip_hour: 4.0,
       drained: DRAIN_A}
    - {name: tpu-b, accelerator: tpu, chip_type: tpu-v5p, chips: 4, chips_per_host: 4, cost_per_chip_hour: 4.2,
       drained: DRAIN_B}
    - {name: h100, accelerator: gpu, chip_type: h100, chips: 8, chips_per_host: 8, cost_per_chip_hour: 3.0}
  queues:
    - {name: pretraining, stage: pretraining, quota: {tpu-a: 4, tpu-b: 4, h100: 8}}
    - {name: eval, stage: eval, quota: {tpu-a: 4, tpu-b: 4, h100: 8}}
"""
TPU_ONLY = ["spec.accelerators={prefer: tpu, allow: [tpu]}", "spec.resources.chips=4"]
ENDS = (EventType.FAILED, EventType.PREEMPTED, EventType.UNPLACED, EventType.SUCCEEDED)


def fleet_text(drained: tuple[str, ...] = ()) -> str:
    text = FLEET.replace("DRAIN_A", str("tpu-a" in drained).lower())
    return text.replace("DRAIN_B", str("tpu-b" in drained).lower())


class Live:
    """A workspace on a virtual clock with the agent driving a fake executor."""

    def __init__(self, checkout: Path, clock: ManualClock, **executor: Any) -> None:
        self.fleet_path = checkout / ".crossrail" / "fleet.yaml"
        self.fleet_path.write_text(fleet_text())
        self.clock = clock
        self.client = Client(cwd=checkout, clock=clock)
        self.store = self.client.service.store
        self.executor = FakeExecutor(clock, **executor)
        config = AgentConfig(fallback_wait_s=0.0, heartbeat_timeout_s=60.0)
        self.agent = Agent(self.client.service, self.executor, checkout / ".crossrail" / "reports", config)
        self.agent.fleet_path = self.fleet_path
        self.experiments = checkout / ".crossrail" / "experiments"

    def submit(self, *sets: str) -> str:
        run = self.client.submit(self.experiments / "pretrain-small.yaml", sets=[*TPU_ONLY, *sets])
        return str(run["run"]["id"])

    def tick(self, seconds: float = 0.0) -> None:
        self.clock.advance(seconds)
        self.agent.reconcile()

    def drain(self, pool: str) -> None:
        self.fleet_path.write_text(fleet_text((pool,)))

    def attempts(self, run: str) -> list[tuple[int, str, str]]:
        return [(a.number, a.pool, a.state) for a in self.store.attempts(run)]

    def state(self, run: str) -> str:
        return self.store.get_run(run).state

    def ends(self, run: str) -> list[Event]:
        return [e for e in self.store.events(run=run) if e.type in ENDS]


@pytest.fixture
def live(checkout: Path, clock: ManualClock) -> Iterator[Live]:
    world = Live(checkout, clock)
    yield world
    world.client.close()


def decisions(events: list[Event]) -> list[tuple[Any, ...]]:
    """The decision sequence an event log records: each attempt's pool, and each end with what follows."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        if e.type is EventType.STARTED:
            out.append(("started", e.data["pool"]))
        elif e.type is EventType.SUCCEEDED:
            out.append(("succeeded", e.data["pool"]))
        elif e.type in ENDS:
            d = e.data
            out.append((str(e.type), d["pool"], d["cause"], d["final"], d.get("backoff_s"), d.get("avoid_pool")))
    return out


# --- one failure scenario, through the agent and through the simulator -------------------------------


def test_the_agent_and_the_simulator_decide_a_tpu_failure_a_retry_a_back_off_and_a_drain_alike(
    checkout: Path, clock: ManualClock
) -> None:
    """Attempt 1 is lost on tpu-a; the retry waits out its 30 s back-off and avoids tpu-a; tpu-b is then
    drained under it (no back-off), and attempt 3 finishes on tpu-a. Both logs hold the same decisions."""
    # The agent, on a virtual clock.
    world = Live(checkout, clock)
    run = world.submit("spec.retries={max: 2}")
    world.tick()
    world.tick(100)
    world.executor.lose(run, 1)
    world.tick()
    assert world.state(run) == "queued"
    world.tick(29)
    assert len(world.attempts(run)) == 1, "the retry waits out its back-off"
    world.tick(1)
    world.tick(100)
    world.drain("tpu-b")
    world.tick()
    world.tick()
    world.tick(100)
    world.executor.exit(run, 3, 0)
    world.tick()
    agent_log = decisions([e for e in world.store.events(run=run) if e.type is EventType.STARTED or e.type in ENDS])
    world.client.close()

    # The simulator, with the same fleet, job, retry policy and the same two events at the same times.
    path = checkout / "scenario-fleet.yaml"
    path.write_text(fleet_text())
    fleet = load_fleet(path)
    job = SimJob("job", "pretraining", 4, work_s=1000.0, accelerators=("tpu",), prefer="tpu")
    no_downtime = CheckpointSpec(detect_s=0.0, reschedule_s=0.0)
    retries = RetryPolicy.from_spec({"max": 2})
    sim = Simulation(fleet, [job], checkpoint=no_downtime, retries=retries, record_events=True, quantum_s=0.0)
    sim.engine.schedule(100.0, lambda: sim.executor.interrupt("job"))

    def drain() -> None:
        sim.sched.drain("tpu-b", preempt=True)
        sim.demand_changed()

    sim.engine.schedule(230.0, drain)
    sim.run()
    assert sim.events is not None
    sim_log = decisions(sim.events)

    assert agent_log == sim_log
    assert agent_log == [
        ("started", "tpu-a"),
        ("failed", "tpu-a", "lost", False, 30.0, "tpu-a"),
        ("started", "tpu-b"),
        ("preempted", "tpu-b", "drained", False, 0.0, "tpu-b"),
        ("started", "tpu-a"),
        ("succeeded", "tpu-a"),
    ]
