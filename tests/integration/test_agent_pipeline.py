"""An RL pipeline (crossrail.workloads.rl) under `crossrail agent --until-idle` with the local executor:
each part its own process and attempt on its pool, the stages meeting in the run's rendezvous directory;
a killed sampler is retried alone while the learner goes on; the learner's success ends the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import wait_for

from crossrail.client import Client

from .test_agent import state

PIPELINE = """\
apiVersion: crossrail/v1
kind: Experiment
metadata: {name: rl-live, team: alignment, owner: ada@example.com}
spec:
  stage: reinforcement_learning
  image: python@sha256:9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c0b2d4f6e8a1c3e5b7d9f0a2c4e6b8d0f
  code: {repo: https://github.com/acme/trainer, commit: auto}
  command: [python, -m, crossrail.workloads.rl]
  args: [--steps, "14", --samplers, "1", --eval-every, "100", --warm-steps, "4", --prompts-per-step, "4",
         --group, "4", --prompts-per-batch, "2"]
  dataset: {uri: DATA, version: v1}
  checkpoint: {dir: CKPT, format: crossrail-ckpt/v1}
  resources: {chips: 6}
  parts:
    sampler: {chips: 4, prefer: tpu}
    reward: {chips: 1, prefer: gpu}
    learner: {chips: 1, prefer: gpu}
  retries: {max: 2, backoff: {initial: 1s}}
"""
CLI = [sys.executable, "-m", "crossrail.cli"]


@pytest.fixture
def client(checkout: Path) -> Iterator[Client]:
    with Client(cwd=checkout) as c:  # the real clock: the supervisor and the runtime take real times
        yield c


def learner_step(client: Client, run: str) -> int:
    return max((int(s["step"]) for s in client.service.store.metric_samples(run, "loss")), default=0)


@pytest.mark.slow
def test_each_part_runs_as_its_own_attempt_and_a_killed_sampler_is_retried_alone(
    client: Client, checkout: Path, tmp_path: Path
) -> None:
    (tmp_path / "data").mkdir()
    path = tmp_path / "rl-live.yaml"
    path.write_text(PIPELINE.replace("CKPT", str(tmp_path / "ckpt")).replace("DATA", str(tmp_path / "data")))
    run = client.submit(path)["run"]["id"]
    store = client.service.store
    env = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_STORE_URL")}
    agent = subprocess.Popen(
        [*CLI, "agent", "--until-idle", "--poll", "0.1", "--grace", "10"],
        cwd=checkout,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: learner_step(client, run) >= 3, what="the learner's third step", alive=agent, timeout_s=120)
        first = {a.part: (a.number, a.pool, a.state) for a in store.attempts(run)}  # largest part first
        assert first == {
            "sampler": (1, "tpu-v5p", "running"),
            "learner": (2, "h100", "running"),
            "reward": (3, "h100", "running"),
        }
        rendezvous = Path(store.get_run(run).run_checkpoint_dir) / "rl"
        pid = int((rendezvous / "pids" / "sampler-0.pid").read_text().split()[-1])
        os.kill(pid, signal.SIGKILL)
        _out, err = agent.communicate(timeout=240)  # --until-idle: it ends once the run has
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    assert agent.returncode == 0, err
    assert state(client, run) == "succeeded"
    attempts = [(a.number, a.part, a.state, a.end_reason and str(a.end_reason)) for a in store.attempts(run)]
    assert attempts[0] == (1, "sampler", "failed", "signal")
    assert attempts[1] == (2, "learner", "succeeded", "succeeded")  # one learner attempt from start to end
    assert attempts[2][:2] == (3, "reward")  # the reward stage ran on, untouched by the sampler's crash
    assert [a[1] for a in attempts[3:]] == ["sampler"]  # only the sampler was offered again
    assert learner_step(client, run) == 14
    lineage = [(e["data"]["part"], e["data"]["pool"]) for e in client.events(run)["events"] if e["type"] == "started"]
    assert sorted(lineage[:3]) == [("learner", "h100"), ("reward", "h100"), ("sampler", "tpu-v5p")]
