"""Start estimates with backfill: whenever chips free up, the first pending runs in admission order that fit
start, so a small run passes a gang that is still waiting for its chips.

This is how heads of different queues, and the runs of a `best_effort_fifo` queue, meet free capacity in
the scheduling cycle: nothing is held back for a waiting gang. The default estimate (starts.py) instead
never lets a run start before one ahead of it on the same pool; the truth for a fleet of many queues lies
between the two.

An event simulation over all pools at once. Waiting runs sit in one deque per (pool, gang size) in
admission order, and one heap holds every pool's releases; at each time chips free on a pool, the earliest
run among the heads of the size classes that fit starts, until none fits. Each start costs O(gang sizes on
the pool), each release O(log n).
"""

from __future__ import annotations

import heapq
from collections import deque

from crossrail.scheduling.timeline import StartEstimate, Timeline, Waiting


def greedy_starts(
    ordered: list[Waiting], lines: dict[str, Timeline], now: float, unknown_s: float
) -> dict[str, StartEstimate]:
    """Starts of `ordered` (admission order) on `lines` (pools with their running work), with backfill."""
    return _Greedy(ordered, lines, unknown_s).run(now)


class _Greedy:
    def __init__(self, ordered: list[Waiting], lines: dict[str, Timeline], unknown_s: float) -> None:
        self.ordered = ordered
        self.lines = lines
        self.unknown_s = unknown_s
        self.started = [False] * len(ordered)
        self.out: dict[str, StartEstimate] = {}
        self.releases: list[tuple[float, str, int]] = []
        self.sizes: dict[str, dict[int, deque[int]]] = {name: {} for name in lines}
        for i, wait in enumerate(ordered):
            names = self.candidates(wait)
            if not names:
                self.out[wait.run] = StartEstimate(wait.run, None, None, None)
            for name in names:
                self.sizes[name].setdefault(wait.chips, deque()).append(i)

    def candidates(self, wait: Waiting) -> list[str]:
        """The pools `wait` may start on: its pinned pool when that can hold it, else every one that can."""
        fits = [n for n in wait.durations if n in self.lines and self.lines[n].capacity >= wait.chips]
        return [wait.pool] if wait.pool in fits else fits

    def run(self, now: float) -> dict[str, StartEstimate]:
        # One heap of every pool's releases: the next event is its top, whatever the number of pools.
        for name, line in self.lines.items():
            self.releases.extend((at, name, chips) for at, chips in line.releases)
            line.releases = []
        heapq.heapify(self.releases)
        t, due = now, set(self.lines)
        while True:
            for name in sorted(due):
                self.fill(name, t)
            if not self.releases:
                return self.out
            t, due = self.releases[0][0], set()
            while self.releases and self.releases[0][0] <= t:
                _, name, chips = heapq.heappop(self.releases)
                self.lines[name].free += chips
                due.add(name)

    def fill(self, name: str, t: float) -> None:
        """Start, at `t` on pool `name`, the earliest waiting runs in admission order that fit, until none does."""
        line, sizes = self.lines[name], self.sizes[name]
        while True:
            best: int | None = None
            for chips, waiting in sizes.items():
                while waiting and self.started[waiting[0]]:  # started on another of its pools
                    waiting.popleft()
                if chips <= line.free and waiting and (best is None or waiting[0] < best):
                    best = waiting[0]
            if best is None:
                return
            wait = self.ordered[best]
            sizes[wait.chips].popleft()
            self.started[best] = True
            duration = wait.durations[name]
            end = t + (duration if duration is not None else self.unknown_s)
            line.free -= wait.chips
            heapq.heappush(self.releases, (end, name, wait.chips))
            self.out[wait.run] = StartEstimate(wait.run, name, t, end, {name: t})
