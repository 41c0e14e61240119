"""An executor for tests of the agent's decisions: attempts are records a test ends at will, on its clock.

It stands in for an engine only where the agent's rules are under test (what an end means, back-off,
which pool a retry avoids, heartbeats, moves); the real executors keep their own tests with real processes.
"""

from __future__ import annotations

from dataclasses import replace

from crossrail.core import Clock
from crossrail.core.attempts import AttemptStatus, Capabilities, LaunchRequest, StopReason


class FakeExecutor:
    def __init__(
        self, clock: Clock, *, sees_processes: bool = True, can_withdraw: bool = False, queued: bool = False
    ) -> None:
        self.clock = clock
        self.capabilities = Capabilities(("local",), sees_processes=sees_processes, can_withdraw=can_withdraw)
        self.queued = queued
        """Launched attempts wait in the engine's queue (`pending`) until `start` is called."""
        self.attempts: dict[tuple[str, int], AttemptStatus] = {}
        self.launched: list[LaunchRequest] = []
        self.stops: list[tuple[str, int, StopReason]] = []

    # --- the protocol ----------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> AttemptStatus:
        key = (request.run, request.attempt)
        if key not in self.attempts:
            self.launched.append(request)
            phase = "pending" if self.queued else "running"
            started = None if self.queued else self.clock.now()
            self.attempts[key] = AttemptStatus(request.run, request.attempt, phase, started_at=started)
        return self.attempts[key]

    def observe(self) -> list[AttemptStatus]:
        return list(self.attempts.values())

    def stop(self, run: str, attempt: int, grace_s: float, reason: StopReason) -> None:
        status = self.attempts.get((run, attempt))
        if status is not None and status.phase in ("running", "pending"):
            self.stops.append((run, attempt, reason))
            self._end(status, signal=15, stopped_by=reason)

    def resize(self, run: str, attempt: int, chips: int) -> bool:
        return False

    def logs(self, run: str, attempt: int) -> str:
        return ""

    def withdraw(self, run: str, attempt: int) -> bool:
        status = self.attempts.get((run, attempt))
        if not self.capabilities.can_withdraw or status is None or status.phase != "pending":
            return False
        del self.attempts[(run, attempt)]
        return True

    def forget(self, run: str, attempt: int) -> None:
        self.attempts.pop((run, attempt), None)

    # --- what a test makes happen ----------------------------------------------------------------

    def start(self, run: str, attempt: int) -> None:
        status = self.attempts[(run, attempt)]
        self.attempts[(run, attempt)] = replace(status, phase="running", started_at=self.clock.now())

    def exit(self, run: str, attempt: int, code: int) -> None:
        self._end(self.attempts[(run, attempt)], exit_code=code)

    def kill(self, run: str, attempt: int, signal: int = 9) -> None:
        self._end(self.attempts[(run, attempt)], signal=signal)

    def lose(self, run: str, attempt: int) -> None:
        status = self.attempts[(run, attempt)]
        self.attempts[(run, attempt)] = replace(status, phase="lost", ended_at=self.clock.now(), detail="host gone")

    def vanish(self, run: str, attempt: int) -> None:
        """The engine forgets the attempt (no record of it at all)."""
        del self.attempts[(run, attempt)]

    def _end(self, status: AttemptStatus, **how: object) -> None:
        ended = replace(status, phase="exited", ended_at=self.clock.now(), **how)  # type: ignore[arg-type]
        self.attempts[(status.run, status.attempt)] = ended
