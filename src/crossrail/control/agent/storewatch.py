"""What an agent does to trust its store: register and beat in `agents`, check each pass that the store is the
one it opened (and, now and then, sound), wait out a server that went away, and report attempts an executor
runs that the store does not know (after a reset or a restore)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass

from crossrail.control.executor import AttemptStatus
from crossrail.core import Clock, Event, EventType
from crossrail.errors import StoreError, StoreUnavailableError
from crossrail.store import Store

log = logging.getLogger("crossrail.agent")


@dataclass(frozen=True)
class WatchConfig:
    heartbeat_s: float = 10.0
    check_s: float = 60.0  # how often a pass also runs the store's quick integrity check (0: every pass)
    wait_s: float = 300.0  # how long an unreachable store is waited for before the agent stops


class StoreWatch:
    def __init__(self, store: Store, clock: Clock, config: WatchConfig, workspace: str | None = None) -> None:
        self.store, self.clock, self.config, self.workspace = store, clock, config, workspace
        self.agent_id: str | None = None
        self._beat_at = self._checked_at = -float("inf")
        self._down_since: float | None = None
        self._reported: set[tuple[str, int]] = set()

    def start(self) -> None:
        now = self.clock.now()
        self.store.check_identity(integrity=True)
        self._checked_at = self._beat_at = now
        self.agent_id = self.store.register_agent(
            host=socket.gethostname(), pid=os.getpid(), workspace=self.workspace, now=now
        )

    def before_pass(self) -> None:
        """Raise StoreDamagedError (stop: never write elsewhere) unless the store is still the one opened."""
        now = self.clock.now()
        integrity = now - self._checked_at >= self.config.check_s
        self.store.check_identity(integrity=integrity)
        if integrity:
            self._checked_at = now
        if self.agent_id is not None and now - self._beat_at >= self.config.heartbeat_s:
            self.store.agent_heartbeat(self.agent_id, now)
            self._beat_at = now
        if self._down_since is not None:
            log.warning("crossrail agent: the state store %s is reachable again; carrying on", self.store.url)
            self._down_since = None

    def unavailable(self, exc: StoreUnavailableError, retry_s: float) -> None:
        """A pass met an unreachable store: say so and let the loop retry, or raise once `wait_s` has passed."""
        now = self.clock.now()
        if self._down_since is None:
            self._down_since = now
        waited = now - self._down_since
        if waited >= self.config.wait_s:
            raise StoreUnavailableError(f"{exc}; the agent stops after waiting {waited:.0f}s for it") from exc
        log.warning("crossrail agent: %s; retrying in %gs (gives up after %gs)", exc, retry_s, self.config.wait_s)

    def stop(self) -> None:
        if self.agent_id is None:
            return
        with suppress(StoreError):  # a damaged or unreachable store: the row keeps its last heartbeat
            self.store.agent_stopped(self.agent_id, self.clock.now())

    def unknown_attempts(self, statuses: Iterable[AttemptStatus]) -> list[AttemptStatus]:
        """Attempts the executor has that the store has no record of, each reported once (event + log line).

        They are what an executor still runs after the store was reset or restored from an older backup;
        the agent leaves them alone (they are not its to end) and carries on with the runs it knows.
        """
        found = []
        by_run: dict[str, set[int]] = {}
        for s in statuses:
            key = (s.run, s.attempt)
            if key in self._reported:
                continue
            if s.run not in by_run:
                by_run[s.run] = {a.number for a in self.store.attempts(s.run)}
            if s.attempt not in by_run[s.run]:
                found.append(s)
        if not found:
            return []
        now = self.clock.now()
        events = [
            Event(
                EventType.UNKNOWN_ATTEMPT,
                now,
                None,
                None,
                {"run": s.run, "attempt": s.attempt, "phase": s.phase, "detail": s.detail},
            )
            for s in found
        ]
        self.store.append_events(events)
        for s in found:
            self._reported.add((s.run, s.attempt))
            log.warning(
                "crossrail agent: the executor has attempt %s/%s (%s) that this store does not know (a store reset "
                "or restore?); it is left alone, `crossrail logs` cannot show it; stop it by hand if it should not run",
                s.run,
                s.attempt,
                s.phase,
            )
        return found
