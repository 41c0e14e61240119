"""The Clock protocol: every component that needs the time is handed one, never calls time.time()."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch (virtual in simulation)."""
        ...


class SystemClock:
    """Wall-clock time."""

    def now(self) -> float:
        return time.time()


class MonotonicClock:
    """Seconds on a clock that never jumps (not since the epoch): for deadlines and intervals of real waits."""

    def now(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told; used by tests and the simulator."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError(f"a clock cannot move backwards (asked to advance by {seconds} s)")
        self._now += seconds
        return self._now

    def set(self, when: float) -> None:
        if when < self._now:
            raise ValueError(f"a clock cannot move backwards (from {self._now} to {when})")
        self._now = when
