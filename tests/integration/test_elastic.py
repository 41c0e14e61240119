"""An elastic data-parallel run under the agent: four torchrun workers, one lost, the run finishes on three."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.conftest import drive as drive_agent

from crossrail.client import Client
from crossrail.control.agent.loop import AgentConfig

pytest.importorskip("torch")

pytestmark = pytest.mark.slow

FAST = AgentConfig(poll_s=0.2, fallback_wait_s=0.0, stop_grace_s=10.0, heartbeat_s=1.0)
# Few steps after the loss (each costs every worker a gloo round on a busy host), but nine of them paced by
# --step-sleep between the first checkpoint and the end, so the worker is lost while the run still trains.
STEPS, EVERY = 12, 3
ARGS = (
    f"[--steps, '{STEPS}', --checkpoint-every-steps, '{EVERY}', --step-sleep, '0.3', --framework, torch, --batch, '8']"
)
ELASTIC = [
    f"spec.args={ARGS}",
    "spec.resources={chips: 4, min_chips: 2, max_chips: 4}",
    "spec.parallelism={data: 4, oversubscribe: true}",  # four processes on a host of fewer cores: asked for
    "spec.retries={max: 0}",  # the run must finish in its one attempt
]


def drive(client: Client, until: Callable[[], bool], timeout_s: float) -> None:
    drive_agent(client, until, timeout_s, config=FAST, story=lambda: client.events(run_of(client))["events"][-5:])


def run_of(client: Client) -> str:
    run: str = client.service.store.list_runs()[0].id
    return run


def checkpoint_steps(client: Client, run: str) -> list[int]:
    return [c["step"] for c in client.show(run)["checkpoints"]]


def lose_worker(root: Path, worker: int) -> None:
    """SIGKILL one worker and its torchrun agent, as when its host is lost."""
    [found] = list(root.rglob("workers.json"))
    agent = json.loads(found.read_text())["agents"][worker]
    children = Path(f"/proc/{agent}/task/{agent}/children").read_text().split()
    for pid in [agent, *map(int, children)]:
        os.kill(pid, signal.SIGKILL)


def test_losing_one_of_four_workers_resizes_the_run_which_resumes_and_finishes(
    checkout: Path, experiments: Path
) -> None:
    with Client(cwd=checkout) as client:
        run = client.submit(experiments / "pretrain-small.yaml", sets=ELASTIC)["run"]["id"]
        drive(client, lambda: bool(checkpoint_steps(client, run)), timeout_s=240)
        before = max(checkpoint_steps(client, run))

        lose_worker(checkout, 3)
        drive(client, lambda: client.service.store.get_run(run).state in ("succeeded", "failed"), timeout_s=400)

        assert client.service.store.get_run(run).state == "succeeded"
        events = client.events(run)["events"]
        lost = [e for e in events if e["type"] == "reported" and e["data"]["name"] == "worker_lost"]
        assert [e["data"]["data"] for e in lost] == [{"worker": 3, "workers_left": 3, "signal": "SIGKILL"}]
        [resized] = [e for e in events if e["type"] == "resized"]
        assert (resized["data"]["degree_before"], resized["data"]["degree_after"]) == (4, 3)
        assert resized["data"]["step"] >= before  # at most one checkpoint interval lost
        assert resized["seq"] > lost[0]["seq"]
        assert max(checkpoint_steps(client, run)) == STEPS
        [attempt] = client.show(run)["attempts"]
        assert (attempt["state"], attempt["exit_code"]) == ("succeeded", 0)
