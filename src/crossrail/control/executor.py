"""The Executor protocol: how the agent launches, watches and stops attempts on any engine.

Defined here, where it is used. The local executor (crossrail.executors.local), and later Ray,
Kubernetes and the simulator's executor, satisfy it by shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

AttemptPhase = Literal["running", "exited", "lost"]
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


class Executor(Protocol):
    def launch(self, request: LaunchRequest) -> AttemptStatus:
        """Start the attempt; launching an attempt that already exists returns its status, starting nothing."""
        ...

    def observe(self) -> list[AttemptStatus]:
        """Every attempt this executor has launched and not yet forgotten, including ones from before a restart."""
        ...

    def stop(self, run: str, attempt: int, grace_s: float, reason: StopReason) -> None:
        """Ask the attempt to end: SIGTERM (or the engine's equivalent), `grace_s` to checkpoint, then kill.

        Returns at once; the end shows up in `observe()`. Stopping an ended attempt does nothing.
        """
        ...

    def resize(self, run: str, attempt: int, chips: int) -> bool:
        """Change an elastic attempt's chips; False when the executor cannot (the local one cannot)."""
        ...

    def logs(self, run: str, attempt: int) -> str:
        """The attempt's combined stdout and stderr so far ('' when none is kept)."""
        ...

    def forget(self, run: str, attempt: int) -> None:
        """Drop the executor's record of an ended attempt whose end the store has recorded (logs may stay)."""
        ...
