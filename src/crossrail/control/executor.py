"""The Executor protocol: how the agent launches, watches and stops attempts on any engine.

Defined here, where it is used. The local executor (crossrail.executors.local), and later Ray,
Kubernetes and the simulator's executor, satisfy it by shape. The records it speaks in live in
crossrail.core.attempts, so executors need not import the control plane.

An executor may also offer `launch_parts(requests) -> list[AttemptStatus]`: the parts of one pipeline admitted
together, each its own attempt, launched as one (the Kubernetes executor: one JobSet); the agent uses it where
it is there and launches each part alone otherwise.
"""

from __future__ import annotations

from typing import Protocol

from crossrail.core.attempts import AttemptPhase, AttemptStatus, Capabilities, LaunchRequest, StopReason

__all__ = ["AttemptPhase", "AttemptStatus", "Capabilities", "Executor", "LaunchRequest", "StopReason"]


class Executor(Protocol):
    @property
    def capabilities(self) -> Capabilities:
        """What this executor can do (read each pass: a router's backends follow the fleet)."""
        ...

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

    def withdraw(self, run: str, attempt: int) -> bool:
        """Take back an attempt its engine has not started; False when it cannot (or it has started)."""
        ...

    def forget(self, run: str, attempt: int) -> None:
        """Drop the executor's record of an ended attempt whose end the store has recorded (logs may stay)."""
        ...
