"""Attempt records shared by the control plane and the executors: launch requests and observed statuses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

AttemptPhase = Literal["pending", "running", "exited", "lost", "unplaced"]
StopReason = Literal["preempted", "cancelled", "suspended"]


@dataclass(frozen=True)
class LaunchRequest:
    """One attempt of one run on one pool. `env` already holds every CROSSRAIL_* variable."""

    run: str
    attempt: int
    pool: str
    accelerator: str
    chip_type: str
    chips: int
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AttemptStatus:
    """What an executor knows of one attempt.

    `phase` is `running` while the attempt's process lives, `exited` once its exit was recorded
    durably (`exit_code` or `signal` set), `lost` when it is gone with no record of how it ended.
    Engines that place work themselves (Ray) add two: `pending` while the engine is still placing the
    attempt (nothing of it runs yet), and `unplaced` when the engine could not place it in time and
    released everything it had reserved: nothing ever ran, so the run goes back to its queue unharmed.
    `stopped_by` is the reason given to `stop()` when crossrail stopped it, else None.
    """

    run: str
    attempt: int
    phase: AttemptPhase
    exit_code: int | None = None
    signal: int | None = None
    stopped_by: StopReason | None = None
    started_at: float | None = None
    ended_at: float | None = None
    detail: str = ""
