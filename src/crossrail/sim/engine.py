"""The simulation engine: an event heap on a virtual clock, after SimPy's schedule / peek / step / run(until).

Entries are `(time, priority, seq, action)`; the sequence number breaks every tie in the order events were
scheduled, so a run is a pure function of its inputs and seed. The engine is a `crossrail.core.Clock`:
whatever reads `engine.now()` (the scheduler's callers, the metrics) sees virtual time.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

Action = Callable[[], None]

COMPACT_AT = 4096
"""Heap entries past which cancelled timers are swept out (then twice the live ones left, at least this)."""

URGENT, NORMAL, LATE = 0, 1, 2
"""Priorities at one instant: URGENT before NORMAL before LATE (scheduling cycles run LATE, after every
event of their instant has changed capacity and demand)."""


@dataclass(slots=True)
class Timer:
    """One scheduled action; `cancel()` makes the engine skip it (removal from the heap is lazy)."""

    at: float
    action: Action
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class Engine:
    """A virtual clock and its event heap. `now()` satisfies the Clock protocol of `crossrail.core`."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._heap: list[tuple[float, int, int, Timer]] = []
        """(time, priority, seq, timer): tuples compare in C, and seq is unique, so timers never compare."""
        self._seq = itertools.count()
        self._compact_at = COMPACT_AT
        self.steps = 0
        """Actions run so far (cancelled timers are not counted)."""

    def now(self) -> float:
        return self._now

    def schedule(self, at: float, action: Action, priority: int = NORMAL) -> Timer:
        """Run `action` at virtual time `at` (never in the past)."""
        if math.isnan(at) or at < self._now:
            raise ValueError(f"cannot schedule at {at}: the clock is at {self._now} and never goes back")
        timer = Timer(at, action)
        heapq.heappush(self._heap, (at, priority, next(self._seq), timer))
        if len(self._heap) > self._compact_at:
            self._compact()
        return timer

    def _compact(self) -> None:
        """Drop cancelled timers from the heap. A stopped attempt leaves its end's timer behind, often far in the
        future; a simulation that preempts every round would otherwise keep hundreds of thousands of them, and
        every push and pop would pay for them. The order of events is that of their unique keys, not of where
        they sit in the heap, so this changes none."""
        self._heap = [entry for entry in self._heap if not entry[3].cancelled]
        heapq.heapify(self._heap)
        self._compact_at = max(2 * len(self._heap), COMPACT_AT)

    def after(self, delay_s: float, action: Action, priority: int = NORMAL) -> Timer:
        return self.schedule(self._now + max(delay_s, 0.0), action, priority)

    def peek(self) -> float:
        """Time of the next live event, or +inf when none is left."""
        heap = self._heap
        while heap and heap[0][3].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def step(self) -> None:
        """Advance the clock to the next live event and run it; IndexError when there is none."""
        if self.peek() == math.inf:
            raise IndexError("no events left to run")
        timer = heapq.heappop(self._heap)[3]
        self._now = timer.at
        self.steps += 1
        timer.action()

    def run(self, until: float | None = None, *, tick: Callable[[float], None] | None = None) -> None:
        """Run events until none is left or the next is after `until` (the clock then stops at `until`).

        `tick(now)` is called after each event (progress bars); it must not schedule anything.
        """
        limit = math.inf if until is None else until
        while (at := self.peek()) < math.inf and at <= limit:
            self.step()
            if tick is not None:
                tick(self._now)
        if until is not None and until > self._now:
            self._now = until

    @property
    def pending(self) -> int:
        """Timers in the heap, cancelled ones included until they surface."""
        return len(self._heap)
