"""The backlog controller in the live agent: an RL pipeline started with one slow sampler replica has its
learner idle; the agent resizes the sampler part (a `resized` event with its reason), restarts it at the new
size, and the added sampler replica really runs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossrail.client import Client

from .test_agent import FAST, drive, state

MIS_SIZED = """\
apiVersion: crossrail/v1
kind: Experiment
metadata: {name: rl-mis-sized, team: alignment, owner: ada@example.com}
spec:
  stage: reinforcement_learning
  image: python@sha256:9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c0b2d4f6e8a1c3e5b7d9f0a2c4e6b8d0f
  code: {repo: https://github.com/acme/trainer, commit: auto}
  command: [python, -m, crossrail.workloads.rl]
  args: [--steps, "400", --samplers, "1", --eval-every, "1000", --warm-steps, "2", --prompts-per-step, "4",
         --group, "4", --prompts-per-batch, "2", --sample-sleep-s, "1.0"]
  dataset: {uri: DATA, version: v1}
  checkpoint: {dir: CKPT, format: crossrail-ckpt/v1}
  resources: {chips: 3}
  parts:
    sampler: {chips: 1, prefer: gpu}
    reward: {chips: 1, prefer: gpu}
    learner: {chips: 1, prefer: gpu}
  retries: {max: 2, backoff: {initial: 1s}}
"""
CONFIG = dataclasses.replace(FAST, stop_grace_s=10.0, backlog_window_s=4.0)


@pytest.fixture
def client(checkout: Path) -> Iterator[Client]:
    with Client(cwd=checkout) as c:  # the real clock: the stages and the runtime take real times
        yield c


def sampler_made(rendezvous: Path, replica: int) -> float:
    """Completions sampler replica `replica` made, over all its processes (its stats files)."""
    total = 0.0
    for path in (rendezvous / "stats").glob(f"sampler{replica}.*.json"):
        try:
            total += float(json.loads(path.read_text())["samples"])
        except (json.JSONDecodeError, FileNotFoundError):
            continue
    return total


@pytest.mark.slow
def test_a_learner_idle_for_one_slow_sampler_gets_the_sampler_part_grown_and_the_added_replica_samples(
    client: Client, tmp_path: Path
) -> None:
    (tmp_path / "data").mkdir()
    path = tmp_path / "rl-mis-sized.yaml"
    path.write_text(MIS_SIZED.replace("CKPT", str(tmp_path / "ckpt")).replace("DATA", str(tmp_path / "data")))
    run = client.submit(path)["run"]["id"]
    store = client.service.store
    rendezvous = Path(store.get_run(run).run_checkpoint_dir) / "rl"
    try:
        drive(client, lambda: sampler_made(rendezvous, 1) > 0, timeout_s=150, config=CONFIG)
    finally:
        client.cancel(run)
        drive(client, lambda: not store.active_attempts(), timeout_s=60, config=CONFIG)
    assert state(client, run) == "cancelled"
    resized = [e["data"] for e in client.events(run)["events"] if e["type"] == "resized"]
    assert resized, "no resized event"
    first = resized[0]
    assert (first["part"], first["degree_before"]) == ("sampler", 1)
    assert first["degree_after"] >= 2
    assert first["chips"] == first["degree_after"]
    assert "learner idle" in first["reason"]
    samplers = [a for a in store.attempts(run) if a.part == "sampler"]
    assert samplers[0].chips == 1
    assert str(samplers[0].end_reason) == "preempted"
    assert samplers[1].chips == first["degree_after"]  # its next attempt holds the new size
    assert sampler_made(rendezvous, 1) > 0  # the added replica ran and made completions
    assert (rendezvous / "pids" / "sampler-1.pid").exists()
    control = json.loads((rendezvous / "control.json").read_text())
    assert control["samplers"] >= 2
    assert control["written_by"] == "crossrail agent"
