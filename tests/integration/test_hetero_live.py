"""max_min_fairness_hetero on the live agent, two local pools, one slowed by its `slowdown`; then the same runs
through the simulator, fed the durations the live runs took: the same decisions (kind, run, pool), in order.

Three runs arrive a round apart at two one-chip, time-sliced pools. The slow pool's processes run half the time
(the executor's `slowdown`), and the fleet declares it `relative_speed: 0.5`, the rate the policy weighs it by
(the live agent's rates come from the placement estimates, the simulator's from the pools' speeds). Each run
keeps its progress in a file, as a checkpoint, so a run the rounds stop continues where it stood.

Runs that arrive together tie at the round boundaries (the same service, give or take the 0.3-0.5 s a live
attempt takes to start and stop), and which of two tied runs a round stops then follows that noise, live, where
the simulator's runs tie exactly; so the arrivals here are a round apart.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_agent import FAST, ended, state

from crossrail.client import Client
from crossrail.core import EventType
from crossrail.scheduling.decisions import RetryPolicy
from crossrail.sim.checkpointing import CheckpointModel
from crossrail.sim.job import SimJob
from crossrail.sim.simulation import Simulation
from crossrail.spec import load_fleet

pytestmark = pytest.mark.slow

ROUND_S = 3.0
FLEET = f"""\
apiVersion: crossrail/v1
kind: Fleet
metadata: {{name: two-speeds}}
spec:
  scheduling: {{policy: max_min_fairness_hetero, round: {ROUND_S:g}s}}
  pools:
    - {{name: fast, accelerator: gpu, chip_type: h100, chips: 1, chips_per_host: 1, time_sliced: true}}
    - {{name: slow, accelerator: gpu, chip_type: a100, chips: 1, chips_per_host: 1, relative_speed: 0.5,
        slowdown: 2, time_sliced: true}}
  queues:
    - {{name: eval, stage: eval, quota: {{fast: 1, slow: 1}}}}
"""
# Steps of 10 ms, the progress kept in a file after each (a checkpoint every step): a stopped run continues.
STEPS = """\
import os, pathlib, time
path = pathlib.Path(os.environ["PROGRESS_DIR"]) / os.environ["CROSSRAIL_RUN_ID"]
done = int(path.read_text()) if path.exists() else 0
for step in range(done, {steps}):
    time.sleep(0.01)
    path.with_suffix(".tmp").write_text(str(step + 1))
    os.replace(path.with_suffix(".tmp"), path)
"""
WORK_S = {"a": 9.0, "b": 7.0, "c": 5.0}
"""Each run's work at full speed (in steps of 10 ms), declared as its duration."""


def _submit(client: Client, experiments: Path, name: str, progress: Path) -> str:
    steps = int(WORK_S[name] * 100)
    sets = [
        f"metadata.name=hetero-{name}",
        f"spec.command=[python, -c, {json.dumps(STEPS.format(steps=steps))}]",
        "spec.args=[]",
        "spec.resources.chips=1",
        f"spec.resources.duration={WORK_S[name]:g}s",
        f"spec.env={{PROGRESS_DIR: {json.dumps(str(progress))}}}",
        "spec.accelerators={allow: [gpu]}",
    ]
    return str(client.submit(experiments / "eval-smoke.yaml", sets=sets)["run"]["id"])


def _decisions(events: list[Any], names: dict[str, str]) -> dict[str, list[tuple[str, str]]]:
    """Admissions, preemptions and successes, each kind in time order, as (run, pool)."""
    kinds = {EventType.STARTED: "admit", EventType.PREEMPTED: "preempt", EventType.SUCCEEDED: "end"}
    out: dict[str, list[tuple[str, str]]] = {k: [] for k in kinds.values()}
    for e in sorted(events, key=lambda e: (e.ts, e.seq or 0)):
        kind = kinds.get(e.type)
        if kind is not None:
            out[kind].append((names.get(e.run, e.run), e.data["pool"]))
    return out


def test_a_hetero_policy_runs_live_on_two_pools_and_the_simulator_fed_its_durations_decides_alike(
    checkout: Path, experiments: Path, tmp_path: Path
) -> None:
    fleet_path = checkout / ".crossrail" / "fleet.yaml"
    fleet_path.write_text(FLEET)
    progress = tmp_path / "progress"
    progress.mkdir()
    with Client(cwd=checkout) as client:
        agent = client.agent(FAST)  # one agent throughout: it keeps its rounds' phase and its policy's ledger
        agent.reconcile()  # and it is warm before the first run arrives, so it sees each at once

        def until(done: Callable[[], bool], timeout_s: float = 120.0) -> None:
            deadline = time.monotonic() + timeout_s
            while not done():
                assert time.monotonic() < deadline, "the runs did not end in time"
                agent.reconcile()
                time.sleep(FAST.poll_s)

        runs: dict[str, str] = {}
        for name in WORK_S:
            runs[_submit(client, experiments, name, progress)] = name
            if len(runs) < len(WORK_S):
                later = time.monotonic() + ROUND_S
                until(lambda: time.monotonic() > later)  # noqa: B023 (called at once)
        until(lambda: all(ended(client, r)() for r in runs))
        assert {state(client, r) for r in runs} == {"succeeded"}
        store = client.service.store
        events = [e for r in runs for e in store.events(run=r)]
        attempts = {r: store.attempts(r) for r in runs}
    arrived = {r: min(e.ts for e in events if e.run == r and e.type is EventType.QUEUED) for r in runs}

    live = _decisions(events, runs)
    assert {pool for _, pool in live["admit"]} == {"fast", "slow"}
    assert len(live["end"]) == len(WORK_S)
    speed = {"fast": 1.0, "slow": 0.5}
    for run, name in runs.items():  # every run's steps done, in one or more attempts
        assert (progress / run).read_text() == str(int(WORK_S[name] * 100))

    # The simulator, fed what the live runs took: each run's work is its attempts' run times at their pools'
    # speeds; each arrives when it was queued, in the live round phase (boundaries on whole multiples of it).
    epoch = (min(arrived.values()) // ROUND_S) * ROUND_S
    jobs = [
        SimJob(
            name=name,
            stage="eval",
            chips=1,
            work_s=sum((a.ended_at - a.started_at) * speed[a.pool] for a in attempts[run] if a.started_at),
            submit_s=arrived[run] - epoch,
            team="evals",
            priority="low",
            accelerators=("gpu",),
            estimate_s=WORK_S[name],
        )
        for run, name in runs.items()
    ]
    sim = Simulation(
        load_fleet(fleet_path),
        jobs,
        policy="max_min_fairness_hetero",
        checkpoint=CheckpointModel(),
        retries=RetryPolicy.from_spec({"max": 10}),
        record_events=True,
        quantum_s=0.0,
        recheck_s=0.0,
        fallback_wait_s=0.0,
    )
    sim.run(until_s=3600.0)
    assert sim.events is not None

    assert _decisions(sim.events, {}) == live
