"""Builders for the RL pipeline tests: a launcher with a small pipeline, and readers of what it left."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.unit.workloads.builders import Launcher, of_type, spec

from crossrail.runtime import Checkpointer

MODULE = "crossrail.workloads.rl"
SMALL = ["--warm-steps", "4", "--prompts-per-step", "4", "--group", "4", "--prompts-per-batch", "2"]
"""A pipeline that steps in well under a second on a loaded CPU; it learns nothing worth measuring."""


def rl_launcher(root: Path, *args: str) -> Launcher:
    launcher = Launcher(root, run="rl-1", module=MODULE)
    launcher.spec = spec()
    launcher.defaults = [*SMALL, *args]
    return launcher


def rendezvous(launcher: Launcher) -> Path:
    return launcher.checkpoints / "rl"


def metric(records: list[dict[str, Any]], name: str) -> list[tuple[int, float]]:
    return [(r["step"], r["value"]) for r in of_type(records, "metric", name)]


def wait_for_step(launcher: Launcher, attempt: int, step: int, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(s >= step for s, _ in metric(launcher.records(attempt), "loss")):
            return
        time.sleep(0.05)
    raise AssertionError(f"the learner did not reach step {step} in {timeout_s} s")


def live_pid(launcher: Launcher, part: str, replica: int = 0) -> int:
    return int((rendezvous(launcher) / "pids" / f"{part}-{replica}.pid").read_text().split()[-1])


def final_state(launcher: Launcher) -> dict[str, Any]:
    """The `rl` block of the newest policy checkpoint: its version and every sample id it counted."""
    _, manifest = Checkpointer(launcher.checkpoints.as_uri()).restore()
    state: dict[str, Any] = manifest["state"]["rl"]
    return state
