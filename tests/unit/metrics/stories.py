"""Builder for metrics tests: one run's event story, told step by step against its own clock."""

from __future__ import annotations

import heapq
from typing import Any

from crossrail.core import Event, EventType, ManualClock
from crossrail.metrics import Sample

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, where ManualClock starts


class Story:
    """The events of one run in the order they happen.

    `Story("pre-1").wait(60).start("tpu-a", price=2.0).wait(3600).succeed()` is a run that queued for a
    minute, then ran an hour on tpu-a. Each step records its event at the story clock's current time.
    """

    def __init__(
        self,
        run: str,
        *,
        stage: str = "pretrain",
        chips: int = 8,
        at: float = T0,
        team: str = "core",
        **submitted: Any,
    ) -> None:
        """`submitted` adds keys to the `submitted` event (e.g. `target`, `parent_run`)."""
        self.run, self.stage, self.chips, self.team = run, stage, chips, team
        self.clock = ManualClock(at)
        self.events: list[Event] = []
        self.samples: list[Sample] = []
        self.attempt = 0
        experiment = run.rsplit("-", 1)[0]
        self._emit(EventType.SUBMITTED, experiment=experiment, stage=stage, team=team, chips=chips, **submitted)
        self._queue()

    @property
    def now(self) -> float:
        return self.clock.now()

    def wait(self, seconds: float) -> Story:
        self.clock.advance(seconds)
        return self

    def start(self, pool: str = "tpu-a", *, price: float = 2.0, chips: int | None = None) -> Story:
        self.attempt += 1
        chips = self.chips if chips is None else chips
        accelerator = "tpu" if pool.startswith("tpu") else "gpu"
        return self._emit(
            EventType.STARTED,
            attempt=self.attempt,
            pool=pool,
            accelerator=accelerator,
            chip_type=f"{accelerator}-chip",
            chips=chips,
            cost_per_chip_hour=price,
        )

    def metric(self, name: str, value: float, step: int | None = None) -> Story:
        """A metric sample the attempt's training code reports now (kept beside the events, as the store does)."""
        self.samples.append(Sample(self.run, self.attempt or None, self.now, name, value, step))
        return self

    def beat(self, step: int) -> Story:
        return self._emit(EventType.HEARTBEAT, attempt=self.attempt, step=step)

    def runtime(self, framework: str, precision: str) -> Story:
        """What the runtime reports of the attempt's software (a `reported` event named `runtime`)."""
        data = {"framework": framework, "precision": precision}
        return self._emit(EventType.REPORTED, attempt=self.attempt, name="runtime", data=data)

    def succeed(self) -> Story:
        return self._emit(EventType.SUCCEEDED, attempt=self.attempt)

    def fail(self, *, final: bool | None = True) -> Story:
        """`final=None` leaves the flag out, as an older writer might."""
        flags = {} if final is None else {"final": final}
        return self._emit(EventType.FAILED, attempt=self.attempt, reason="exit 1", exit_code=1, **flags)

    def preempt(self) -> Story:
        return self._emit(EventType.PREEMPTED, attempt=self.attempt, reason="capacity", final=False)

    def retry(self) -> Story:
        self._emit(EventType.RETRIED, next_attempt=self.attempt + 1, reason="retryable")
        return self._queue()

    def cancel(self, *, running: bool = False) -> Story:
        return self._emit(EventType.CANCELLED, attempt=self.attempt if running else None, by="alice")

    def suspend(self) -> Story:
        return self._emit(EventType.SUSPENDED, by="alice")

    def resume(self) -> Story:
        self._emit(EventType.RESUMED, by="alice")
        return self._queue()

    def emit(
        self, type_: EventType | str, *, attempt: int | None = None, at: float | None = None, **data: Any
    ) -> Story:
        """Any event, stamped `at` instead of now if given: for logs no well-behaved writer produces."""
        return self._emit(type_, attempt=attempt, at=at, **data)

    def _queue(self) -> Story:
        return self._emit(EventType.QUEUED, queue=self.stage, stage=self.stage, team=self.team, priority=0)

    def _emit(
        self, type_: EventType | str, *, attempt: int | None = None, at: float | None = None, **data: Any
    ) -> Story:
        # A plain string stands for an event type this version of crossrail does not know.
        ts = self.now if at is None else at
        self.events.append(Event(type=type_, ts=ts, run=self.run, attempt=attempt, data=data))
        return self


def tell(*stories: Story) -> list[Event]:
    """The stories interleaved by time, as the store would log them, with seq numbers."""
    # merge, unlike sorted, keeps each story's own order even where a stamp goes backwards.
    told = heapq.merge(*(s.events for s in stories), key=lambda e: e.ts)
    return [Event(e.type, e.ts, e.run, e.attempt, e.data, seq=i) for i, e in enumerate(told, start=1)]
