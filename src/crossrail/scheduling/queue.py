"""Per-queue heaps of pending runs, in the scheduling policy's order (default: priority then time queued);
never imports the scheduler.

Removal is lazy (a run's live key is kept in a dict; stale heap entries are skipped when they surface), so
submitting, withdrawing and popping a head each cost O(log n), and a cycle touches only the heads.
A best-effort queue can set a head that does not fit aside (`park`) so the runs behind it get their turn;
parked runs come back when capacity frees or when their `retry_at` time arrives.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from crossrail.scheduling.policies.admission import OrderKey, priority_order
from crossrail.scheduling.types import Request

Key = tuple[float, float, float, int]
"""The policy's (class, primary, secondary) for the run, then its submission sequence: smaller goes first."""


class StageQueue:
    def __init__(self, name: str, *, strict: bool = True) -> None:
        self.name = name
        self.strict = strict
        self._heap: list[tuple[Key, str]] = []
        self._live: dict[str, Key] = {}
        self._parked: dict[str, Key] = {}

    def __len__(self) -> int:
        return len(self._live) + len(self._parked)

    def __contains__(self, run: str) -> bool:
        return run in self._live or run in self._parked

    def push(self, run: str, key: Key) -> None:
        self._parked.pop(run, None)
        self._live[run] = key
        heapq.heappush(self._heap, (key, run))
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._live):
            self._heap = [(k, r) for r, k in self._live.items()]
            heapq.heapify(self._heap)

    def remove(self, run: str) -> None:
        self._live.pop(run, None)
        self._parked.pop(run, None)

    def head(self) -> str | None:
        """The first run in order that is neither removed nor parked."""
        heap = self._heap
        while heap:
            key, run = heap[0]
            if self._live.get(run) == key:
                return run
            heapq.heappop(heap)
        return None

    def runs(self) -> list[str]:
        """Every run waiting in this queue, parked ones too, in the policy's order."""
        return [
            run
            for _, run in sorted([(k, r) for r, k in self._live.items()] + [(k, r) for r, k in self._parked.items()])
        ]

    def pop_head(self) -> str | None:
        run = self.head()
        if run is not None:
            heapq.heappop(self._heap)
            del self._live[run]
        return run

    def park(self, run: str) -> None:
        """Set the head aside until `unpark`; the run behind it becomes the head."""
        key = self._live.pop(run, None)
        if key is not None:
            self._parked[run] = key

    def unpark(self, run: str) -> None:
        key = self._parked.pop(run, None)
        if key is not None:
            self.push(run, key)

    def unpark_all(self) -> None:
        for run in list(self._parked):
            self.unpark(run)

    def rekey(self, key: Callable[[str, Key], Key]) -> None:
        """Give every run a new key (`key(run, old key)`), parked runs staying parked."""
        self._live = {run: key(run, old) for run, old in self._live.items()}
        self._parked = {run: key(run, old) for run, old in self._parked.items()}
        self._heap = [(k, r) for r, k in self._live.items()]
        heapq.heapify(self._heap)

    @property
    def parked(self) -> list[str]:
        return list(self._parked)


class QueueSet:
    """Every queue's pending runs, the requests behind them, and when set-aside heads get another try."""

    def __init__(self, strict: dict[str, bool], order: OrderKey = priority_order) -> None:
        self.queues = {name: StageQueue(name, strict=s) for name, s in strict.items()}
        self.order = order
        """The scheduling policy's key for a request (see policies/admission.py)."""
        self.requests: dict[str, Request] = {}
        self._seq = itertools.count()
        self._wake: list[tuple[float, str]] = []
        self.freed = False
        """Capacity was freed since the last cycle: every set-aside head gets another try."""

    def __len__(self) -> int:
        return len(self.requests)

    def queue(self, name: str) -> StageQueue:
        """The queue called `name`; one the fleet does not list is made on first use (strict FIFO)."""
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = StageQueue(name)
        return queue

    def submit(self, req: Request) -> bool:
        """Queue `req`; False when the same request was already waiting."""
        old = self.requests.get(req.run)
        if old == req:
            return False
        if old is not None and old.queue == req.queue and self.order(old) == self.order(req):
            self.requests[req.run] = req  # same place in its queue (e.g. another pool to try first): kept, as parked
            return True
        if old is not None:
            self.queue(old.queue).remove(req.run)
        self.requests[req.run] = req
        self.queue(req.queue).push(req.run, (*self.order(req), next(self._seq)))
        return True

    def reorder(self, order: OrderKey) -> None:
        """Order every queue by a new policy's key; runs keep their submission sequence for ties."""
        self.order = order
        for queue in self.queues.values():
            queue.rekey(lambda run, old: (*order(self.requests[run]), old[-1]))

    def withdraw(self, run: str) -> Request | None:
        req = self.requests.pop(run, None)
        if req is not None:
            self.queue(req.queue).remove(run)
        return req

    def admitted(self, req: Request) -> None:
        """`req` leaves its queue: usually its head, but a head that made room by displacing a run admitted
        earlier in the same cycle has that run back in front of it."""
        queue = self.queue(req.queue)
        if queue.head() == req.run:
            queue.pop_head()
        else:
            queue.remove(req.run)
        del self.requests[req.run]

    def park(self, req: Request, retry_at: float | None) -> None:
        """Set a best-effort head aside; it comes back when capacity frees, or at `retry_at`."""
        self.queue(req.queue).park(req.run)
        if retry_at is not None:
            heapq.heappush(self._wake, (retry_at, req.run))

    def wake(self, now: float) -> None:
        """Return set-aside heads: all of them when capacity was freed, else those whose time came."""
        if self.freed:
            for queue in self.queues.values():
                queue.unpark_all()
            self._wake.clear()
            self.freed = False
        while self._wake and self._wake[0][0] <= now:
            _, run = heapq.heappop(self._wake)
            req = self.requests.get(run)
            if req is not None:
                self.queue(req.queue).unpark(run)
