"""The pipeline's stages as Ray actors: the same stage code, one actor process each, on a running Ray cluster.

Each actor is told the attempt's environment and the stage's arguments and runs `python -m
crossrail.workloads.rl --part ...` in its own process; the supervisor tends actors as it tends processes, so a
dead actor (its process killed, its node lost) is replaced the same way. Ray is imported only here.
"""

from __future__ import annotations

import os
from typing import Any

from crossrail.errors import CrossrailError
from crossrail.workloads.rl.settings import Rendezvous, Settings
from crossrail.workloads.rl.supervisor import Handle, Start, stage_argv

CPUS_PER_STAGE = 0.01  # stages share the CPUs they find; a pipeline fits any cluster with one node


def _run_stage(argv: list[str], env: dict[str, str]) -> int:
    os.environ.update(env)
    from crossrail.workloads.rl.launch import main

    return main(argv)


class RayActor:
    def __init__(self, ray: Any, remote_cls: Any, argv: list[str], env: dict[str, str]) -> None:
        self.ray = ray
        self.actor = remote_cls.remote()
        self.ref = self.actor.run.remote(argv, env)

    def poll(self) -> int | None:
        ready, _ = self.ray.wait([self.ref], timeout=0)
        if not ready:
            return None
        try:
            return int(self.ray.get(self.ref))
        except self.ray.exceptions.RayError:
            return -9  # the actor died: killed, out of memory, or its node lost

    def stop(self) -> None:
        self.ray.kill(self.actor)


def actors(settings: Settings, rdv: Rendezvous) -> Start:
    try:
        import ray
    except ImportError as exc:
        raise CrossrailError("--stages ray needs Ray: pip install 'crossrail[ray]'") from exc
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)

    @ray.remote(num_cpus=CPUS_PER_STAGE, max_restarts=0)
    class StageActor:
        def run(self, argv: list[str], env: dict[str, str]) -> int:
            return _run_stage(argv, env)

    env = {
        k: v for k, v in os.environ.items() if k.startswith("CROSSRAIL_") or k in ("TRAINING_BACKEND", "EXPERIMENT_ID")
    }

    def start(part: str, replica: int) -> Handle:
        return RayActor(ray, StageActor, stage_argv(settings, rdv, part, replica)[3:], env)

    return start
