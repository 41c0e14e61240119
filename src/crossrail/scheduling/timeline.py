"""Start times' plain data: pending and running work, a start estimate, and each pool's free chips over time.

The two forward simulations of the queues share these: the default one in starts.py (no run starts before
one ahead of it on the same pool) and the greedy one with backfill in backfill.py.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol


class TimelinePool(Protocol):
    """What a timeline needs of a pool (scoring.PoolInfo has it)."""

    @property
    def name(self) -> str: ...
    @property
    def capacity(self) -> int: ...
    @property
    def drained(self) -> bool: ...


@dataclass(frozen=True)
class Busy:
    """Work holding `chips` of `pool` now, expected to end at `expected_end` (None: unknown)."""

    run: str
    pool: str
    chips: int
    expected_end: float | None


@dataclass(frozen=True)
class Waiting:
    """A pending run: the pools it may start on, each with its expected run time there (None: unknown).

    The order of `durations` is the run's preference: on equal start times the earlier pool wins. `pool`
    pins the run to one of them (its current placement); None lets it start wherever is earliest.
    """

    run: str
    chips: int
    durations: Mapping[str, float | None]
    rank: int = 2
    queued_at: float = 0.0
    pool: str | None = None


@dataclass(frozen=True)
class StartEstimate:
    """When and where a pending run is expected to start; `by_pool`: earliest start on each candidate."""

    run: str
    pool: str | None
    start: float | None
    end: float | None
    by_pool: Mapping[str, float] = field(default_factory=dict)


class Timeline:
    """Free chips of one pool from a cursor time on: chips free at the cursor plus a heap of releases.

    Runs start in admission order and never before the cursor, so free chips after the cursor only grow
    as releases pass; that keeps the whole forward simulation at O(log n) per run and release.
    """

    def __init__(self, capacity: int, now: float) -> None:
        self.capacity = capacity
        self.cursor = now
        self.free = capacity
        self.releases: list[tuple[float, int]] = []
        self._memo: dict[int, float | None] = {}
        """Answers of `earliest` since the last `start` (runs of the same size ask again and again)."""

    def earliest(self, chips: int) -> float | None:
        """The first time from the cursor on with `chips` free (nothing changes)."""
        if chips > self.capacity:
            return None
        if self.free >= chips:
            return self.cursor
        if chips in self._memo:
            return self._memo[chips]
        popped, free, at = [], self.free, None
        while self.releases:
            item = heapq.heappop(self.releases)
            popped.append(item)
            free += item[1]
            if free >= chips:
                at = item[0]
                break
        for item in popped:
            heapq.heappush(self.releases, item)
        self._memo[chips] = at
        return at

    def start(self, chips: int, at: float, end: float) -> None:
        """Take `chips` from `at` (an `earliest` answer) until `end`."""
        while self.releases and self.releases[0][0] <= at:
            self.free += heapq.heappop(self.releases)[1]
        self.cursor = max(self.cursor, at)
        self.free -= chips
        heapq.heappush(self.releases, (end, chips))
        self._memo.clear()


def timelines(
    running: Iterable[Busy], pools: Iterable[TimelinePool], now: float, unknown_s: float
) -> dict[str, Timeline]:
    """Each pool that takes work, holding its running work until the work's expected end."""
    lines = {p.name: Timeline(p.capacity, now) for p in pools if not p.drained}
    for busy in running:
        line = lines.get(busy.pool)
        if line is None:
            continue
        end = busy.expected_end if busy.expected_end is not None else now + unknown_s
        line.free -= busy.chips
        heapq.heappush(line.releases, (max(end, now), busy.chips))
    for line in lines.values():  # work found overdue frees its chips now
        while line.releases and line.releases[0][0] <= now:
            line.free += heapq.heappop(line.releases)[1]
    return lines
