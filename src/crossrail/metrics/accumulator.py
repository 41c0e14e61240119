"""A fold of the event log into per stage x pool tallies, snapshotted into a Report at any time."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from crossrail.core.events import Event, EventType
from crossrail.metrics.distribution import Distribution, Distributions, Durations
from crossrail.metrics.progress import Beat, Resize, chip_seconds, mean_chips, step_of, step_work
from crossrail.metrics.report import ALL, NO_POOL, UNKNOWN_STAGE, GroupMetrics, Report

GroupKey = tuple[str, str]  # (stage, pool)
ACTIVE = "active"
SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"
STATUSES = (SUCCEEDED, FAILED, CANCELLED, ACTIVE)


class Fields(Protocol):
    """What the accumulator reads of an event: an `Event`, or the fields `fold` was given."""

    @property
    def type(self) -> EventType: ...
    @property
    def ts(self) -> float: ...
    @property
    def run(self) -> str | None: ...
    @property
    def attempt(self) -> int | None: ...
    @property
    def data(self) -> dict[str, Any]: ...


@dataclass(slots=True)
class _Folded:
    """An event's fields as `fold` was given them."""

    type: EventType
    ts: float
    run: str | None
    attempt: int | None
    data: dict[str, Any]


@dataclass(slots=True)
class _Attempt:
    number: int
    key: GroupKey
    chips: float
    cost_per_chip_hour: float
    started_ts: float
    first_beat: Beat | None = None
    last_beat: Beat | None = None
    resume_step: int | None = None
    part: str | None = None  # the pipeline part it runs; None for a run of one part
    resizes: list[Resize] | None = None  # (ts, chips after) of each `resized` event while it ran

    def chip_s(self, lo: float, hi: float) -> float:
        """Its chip-seconds within [lo, hi], each size for its own time."""
        if self.resizes is None:
            return self.chips * max(0.0, hi - max(lo, self.started_ts))
        return chip_seconds(self.chips, self.started_ts, self.resizes, lo, hi)


@dataclass(slots=True)
class _RunTally:
    id: str
    key: GroupKey  # the group the run counts in: its stage and the pool of its last started attempt
    stage_known: bool
    chips: float = 0.0
    placement: dict[str, Any] = field(default_factory=dict)
    waiting_since: float | None = None
    submitted_ts: float | None = None  # the first `submitted` (or `queued`): where its completion time starts
    recovering_since: float | None = None  # the failure or preemption the next start recovers from
    attempt: _Attempt | None = None  # the attempt running now (the last started, in a pipeline)
    others: list[_Attempt] | None = None  # a pipeline's other parts' attempts running now
    last_attempt: int = 0
    outcome: str | None = None
    high_step: int = 0  # the furthest step its ended attempts reported: steps up to it are not new work


@dataclass(slots=True)
class _Tally:
    """Everything final about one group; running attempts and queue waits are added at snapshot time."""

    runs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    queue_s: Durations = field(default_factory=Durations)
    run_s: Durations = field(default_factory=Durations)
    recovery_s: Durations = field(default_factory=Durations)
    jct_s: Durations = field(default_factory=Durations)
    recoveries: int = 0
    useful_chip_hours: float = 0.0
    reports_useful: bool = False
    chip_hours: float = 0.0
    cost: float = 0.0
    has_attempts: bool = False


class MetricsAccumulator:
    """Feed events in log (seq) order with add(); report(now) takes a snapshot and changes nothing.

    Each event costs O(1); a snapshot costs one sort per distribution. Events of unknown types, fleet-wide
    events and events that contradict what came before (an end with no start, anything after a run's
    terminal event) are ignored rather than raised, so a partial log still yields numbers.
    """

    def __init__(self) -> None:
        self._runs: dict[str, _RunTally] = {}
        self._tallies: dict[GroupKey, _Tally] = {}
        self._running: dict[str, _RunTally] = {}
        self._waiting: dict[str, _RunTally] = {}
        self._fleet = _FleetUsage()
        self._handlers: dict[EventType, Callable[[_RunTally, Fields], None]] = {
            EventType.SUBMITTED: self._on_submitted,
            EventType.QUEUED: self._on_queued,
            EventType.PLACED: self._on_placed,
            EventType.STARTED: self._on_started,
            EventType.SUCCEEDED: self._on_succeeded,
            EventType.FAILED: self._on_failed,
            EventType.PREEMPTED: self._on_preempted,
            EventType.CANCELLED: self._on_cancelled,
            EventType.SUSPENDED: self._on_suspended,
            EventType.HEARTBEAT: self._on_beat,
            EventType.REPORTED: self._on_reported,
            EventType.RESIZED: self._on_resized,
        }

    def add(self, event: Fields) -> None:
        if event.type is EventType.CAPACITY_CHANGED:
            self._fleet.capacity_changed(event)
            return
        handler = self._handlers.get(event.type)
        if handler is None or event.run is None:
            return
        run = self._runs.get(event.run)
        if run is None:
            run = self._runs[event.run] = self._new_run(event.run)
        if run.outcome is None:  # a terminal run accepts no further change
            handler(run, event)

    def fold(self, kind: EventType, ts: float, run: str | None, attempt: int | None, data: dict[str, Any]) -> None:
        """`add` an event given by its fields, for a driver that keeps no log (the simulator folds millions of
        events and builds no `Event` for them: a frozen dataclass costs ten times these few fields)."""
        self.add(_Folded(kind, ts, run, attempt, data))

    def report(self, now: float) -> Report:
        """The metrics as of `now`: running attempts count up to it, queued runs have waited until it."""
        return self._report(now, self._running_usage(now), Distributions())

    def stage_totals(self, now: float) -> list[GroupMetrics]:
        """One record per stage over all its pools (pool `*`), sorted by stage; same definitions as groups."""
        return self._stage_totals(self._running_usage(now), Distributions())

    def snapshot(self, now: float) -> tuple[Report, list[GroupMetrics]]:
        """`report(now)` and `stage_totals(now)` in one pass: a distribution two groups share is computed once."""
        running, distributions = self._running_usage(now), Distributions()
        return self._report(now, running, distributions), self._stage_totals(running, distributions)

    def _report(self, now: float, running: dict[GroupKey, tuple[float, float]], dist: Distributions) -> Report:
        keys = sorted(k for k, t in self._tallies.items() if t.has_attempts or any(t.runs.values()))
        groups = [_group_metrics(k, [self._tallies[k]], running.get(k, (0.0, 0.0)), dist) for k in keys]
        totals = _group_metrics(
            (ALL, ALL),
            list(self._tallies.values()),
            (math.fsum(h for h, _ in running.values()), math.fsum(c for _, c in running.values())),
            dist,
        )
        fleet = self._fleet
        capacity = fleet.capacity_chip_hours(now)
        used = totals.chip_hours - self._used_before_capacity(now)
        return Report(
            groups=groups,
            totals=totals,
            pending=self._pending(now),
            generated_at=now,
            makespan_s=fleet.makespan_s(),
            utilization=min(1.0, max(0.0, used / capacity)) if capacity > 0 else None,
            capacity_chip_hours=capacity if fleet.known else None,
            capacity_since=fleet.first,
        )

    def _used_before_capacity(self, now: float) -> float:
        """Chip-hours used before capacity was first recorded (by ended and running attempts): utilization
        compares only the time both are known."""
        first = self._fleet.first
        until = now if first is None else min(now, first)
        running = math.fsum(a.chip_s(a.started_ts, until) for run in self._running.values() for a in _open(run))
        return (self._fleet.used_before_s + running) / 3600

    def _stage_totals(self, running: dict[GroupKey, tuple[float, float]], dist: Distributions) -> list[GroupMetrics]:
        stages = sorted({k[0] for k, t in self._tallies.items() if t.has_attempts or any(t.runs.values())})
        out = []
        for stage in stages:
            keys = [k for k in self._tallies if k[0] == stage]
            usage = [running.get(k, (0.0, 0.0)) for k in keys]
            hours, cost = math.fsum(u[0] for u in usage), math.fsum(u[1] for u in usage)
            out.append(_group_metrics((stage, ALL), [self._tallies[k] for k in keys], (hours, cost), dist))
        return out

    # -- event handlers ------------------------------------------------------------------------------

    def _on_submitted(self, run: _RunTally, event: Fields) -> None:
        self._learn_stage(run, event)
        run.chips = number_field(event.data, "chips", run.chips)
        self._arrived(run, event.ts)

    def _on_queued(self, run: _RunTally, event: Fields) -> None:
        self._learn_stage(run, event)
        self._queue(run, event.ts)

    def _on_placed(self, run: _RunTally, event: Fields) -> None:
        run.placement = event.data

    def _on_started(self, run: _RunTally, event: Fields) -> None:
        number = event.attempt if event.attempt is not None else run.last_attempt + 1
        pool = text_field(event.data, "pool", text_field(run.placement, "pool", NO_POOL))
        chips = number_field(event.data, "chips", number_field(run.placement, "chips", run.chips))
        price = number_field(event.data, "cost_per_chip_hour", number_field(run.placement, "cost_per_chip_hour", 0.0))
        part = event.data.get("part")
        self._start(run, event.ts, number, pool=pool, chips=chips, price=price, part=part)

    def _start(
        self, run: _RunTally, ts: float, number: int, *, pool: str, chips: float, price: float, part: str | None = None
    ) -> None:
        if number <= run.last_attempt:  # a repeated or stale start
            return
        if run.attempt is not None and run.attempt.part != part:  # another part of a pipeline: it runs on
            run.others = [*(run.others or ()), run.attempt]
            run.attempt = None
        for lost in [a for a in run.others or () if a.part == part]:  # its end never reached the log
            self._drop(run, lost, ts, ended=False)
        if run.attempt is not None:  # its end never reached the log; bill it up to this start
            self._close(run, ts, ended=False)
        key = (run.key[0], pool)
        tally = self._tally(key)
        tally.has_attempts = True
        if run.waiting_since is not None:
            tally.queue_s.append(max(0.0, ts - run.waiting_since))
            self._stop_waiting(run)
        if run.recovering_since is not None:
            tally.recoveries += 1
            tally.recovery_s.append(max(0.0, ts - run.recovering_since))
            run.recovering_since = None
        self._move(run, key)
        run.attempt = _Attempt(number=number, key=key, chips=chips, cost_per_chip_hour=price, started_ts=ts, part=part)
        run.last_attempt = number
        self._running[run.id] = run

    def _on_succeeded(self, run: _RunTally, event: Fields) -> None:
        self._end_attempt(run, event)
        if event.data.get("final") is False:  # a pipeline part's end; its run goes on
            return
        self._finish(run, SUCCEEDED, event.ts)
        if run.submitted_ts is not None:
            self._tallies[run.key].jct_s.append(max(0.0, event.ts - run.submitted_ts))

    def _on_failed(self, run: _RunTally, event: Fields) -> None:
        self._end_attempt(run, event)
        if event.data.get("final") is False:
            self._await_recovery(run, event.ts, event.attempt)
        else:  # `final` true or missing: the run failed
            self._finish(run, FAILED, event.ts)

    def _on_preempted(self, run: _RunTally, event: Fields) -> None:
        self._end_attempt(run, event)
        self._await_recovery(run, event.ts, event.attempt)

    def _on_beat(self, run: _RunTally, event: Fields) -> None:
        attempt, step = _numbered(run, event.attempt), step_of(event.data)
        if attempt is None or step is None:
            return
        if attempt.first_beat is None:
            attempt.first_beat = (event.ts, step)
        attempt.last_beat = (event.ts, step)

    def _on_reported(self, run: _RunTally, event: Fields) -> None:
        attempt = _numbered(run, event.attempt)
        if attempt is not None and event.data.get("name") == "resumed":
            attempt.resume_step = step_of(event.data.get("data"))

    def _on_resized(self, run: _RunTally, event: Fields) -> None:
        """A running attempt's chips changed (an elastic growth or shrink, a pipeline part resized): it is billed
        at each size for the time it held it."""
        attempt = _numbered(run, event.attempt)
        chips = number_field(event.data, "chips", -1.0)
        if attempt is None or chips < 0 or event.ts < attempt.started_ts:
            return
        if attempt.resizes is None:
            attempt.resizes = []
        elif event.ts < attempt.resizes[-1][0]:  # out of order: not a change of what it holds now
            return
        attempt.resizes.append((event.ts, chips))

    def _on_cancelled(self, run: _RunTally, event: Fields) -> None:
        self._end_attempt(run, event)
        self._finish(run, CANCELLED, event.ts)

    def _on_suspended(self, run: _RunTally, event: Fields) -> None:
        # A suspended run leaves its queue, or its attempt stops; `resumed` and `queued` bring it back.
        self._end_attempt(run, event)
        self._stop_waiting(run)

    # -- state changes -------------------------------------------------------------------------------

    def _new_run(self, run_id: str) -> _RunTally:
        run = _RunTally(id=run_id, key=(UNKNOWN_STAGE, NO_POOL), stage_known=False)
        self._tally(run.key).runs[ACTIVE] += 1
        return run

    def _learn_stage(self, run: _RunTally, event: Fields) -> None:
        stage = text_field(event.data, "stage", "")
        # A run that started before its stage was named stays under the unknown stage with its attempts.
        if run.stage_known or not stage or run.last_attempt > 0:
            return
        run.stage_known = True
        self._move(run, (stage, NO_POOL))

    def _arrived(self, run: _RunTally, ts: float) -> None:
        if run.submitted_ts is None:
            run.submitted_ts = ts
            self._fleet.arrived(ts)

    def _queue(self, run: _RunTally, ts: float) -> None:
        self._arrived(run, ts)
        if run.waiting_since is None:  # a repeated `queued` does not restart the wait
            run.waiting_since = ts
            self._waiting[run.id] = run

    def _end_attempt(self, run: _RunTally, event: Fields) -> None:
        useful = number_field(event.data, "useful_chip_s", math.nan)
        self._end(run, event.ts, event.attempt, useful if math.isfinite(useful) else None)

    def _end(self, run: _RunTally, ts: float, number: int | None, useful_chip_s: float | None) -> None:
        if run.others:  # a pipeline: the part it names, or every part when it names none
            for part in [a for a in _open(run) if number in (None, a.number)]:
                self._credit(run, part, useful_chip_s if part.number == number else None)
                self._drop(run, part, ts, ended=True)
            return
        attempt = run.attempt
        if attempt is not None and number in (None, attempt.number):
            self._credit(run, attempt, useful_chip_s)
            self._close(run, ts, ended=True)

    def _credit(self, run: _RunTally, attempt: _Attempt, useful_chip_s: float | None) -> None:
        """Count the work an ending attempt kept: what its end reports, else what its steps measured."""
        chips = attempt.chips
        if attempt.resizes is not None and attempt.first_beat is not None and attempt.last_beat is not None:
            first, last = attempt.first_beat[0], attempt.last_beat[0]
            chips = mean_chips(chips, attempt.started_ts, attempt.resizes, first, last)
        work = step_work(chips, attempt.first_beat, attempt.last_beat, attempt.resume_step, run.high_step)
        if attempt.last_beat is not None:
            run.high_step = max(run.high_step, attempt.last_beat[1])
        if useful_chip_s is None and work is not None:
            useful_chip_s = work[0]  # measured live from its steps; a simulator's end reports its own
        if useful_chip_s is not None:
            tally = self._tallies[attempt.key]
            tally.useful_chip_hours += max(useful_chip_s, 0.0) / 3600
            tally.reports_useful = True

    def _drop(self, run: _RunTally, attempt: _Attempt, ts: float, *, ended: bool) -> None:
        """Bill one of a pipeline's running attempts and let it go."""
        if attempt is run.attempt:
            self._close(run, ts, ended=ended)
            return
        assert run.others is not None
        run.others.remove(attempt)
        self._bill(attempt, ts, ended=ended)

    def _close(self, run: _RunTally, ts: float, *, ended: bool) -> None:
        attempt = run.attempt
        assert attempt is not None
        self._bill(attempt, ts, ended=ended)
        run.attempt = run.others.pop() if run.others else None
        if run.attempt is None:
            del self._running[run.id]

    def _bill(self, attempt: _Attempt, ts: float, *, ended: bool) -> None:
        duration_s = max(0.0, ts - attempt.started_ts)
        tally = self._tallies[attempt.key]
        if ended:
            tally.run_s.append(duration_s)
        chip_hours = attempt.chip_s(attempt.started_ts, ts) / 3600
        self._fleet.used(attempt, ts)
        tally.chip_hours += chip_hours
        tally.cost += chip_hours * attempt.cost_per_chip_hour

    def _await_recovery(self, run: _RunTally, ts: float, attempt: int | None) -> None:
        if attempt is None or attempt >= run.last_attempt:  # not a stale report
            run.recovering_since = ts

    def _finish(self, run: _RunTally, outcome: str, ts: float) -> None:
        while run.attempt is not None:  # ended by a run-level event that named another attempt (or part)
            self._close(run, ts, ended=False)
        self._stop_waiting(run)
        runs = self._tallies[run.key].runs
        runs[ACTIVE] -= 1
        runs[outcome] += 1
        run.outcome = outcome
        self._fleet.ended(ts)

    def _stop_waiting(self, run: _RunTally) -> None:
        run.waiting_since = None
        self._waiting.pop(run.id, None)

    def _move(self, run: _RunTally, key: GroupKey) -> None:
        if key != run.key:
            status = run.outcome or ACTIVE
            self._tallies[run.key].runs[status] -= 1
            self._tally(key).runs[status] += 1
            run.key = key

    def _tally(self, key: GroupKey) -> _Tally:
        tally = self._tallies.get(key)
        if tally is None:
            tally = self._tallies[key] = _Tally()
        return tally

    # -- snapshot ------------------------------------------------------------------------------------

    def _running_usage(self, now: float) -> dict[GroupKey, tuple[float, float]]:
        """Chip-hours and cost of the attempts running at `now`, by group."""
        usage: dict[GroupKey, tuple[float, float]] = {}
        for run in self._running.values():
            for attempt in _open(run):
                chip_hours = attempt.chip_s(attempt.started_ts, now) / 3600
                hours, cost = usage.get(attempt.key, (0.0, 0.0))
                usage[attempt.key] = (hours + chip_hours, cost + chip_hours * attempt.cost_per_chip_hour)
        return usage

    def _pending(self, now: float) -> dict[str, Distribution]:
        waits: dict[str, list[float]] = {}
        for run in self._waiting.values():
            assert run.waiting_since is not None
            waits.setdefault(run.key[0], []).append(max(0.0, now - run.waiting_since))
        return {stage: Distribution.of(waits[stage]) for stage in sorted(waits)}


def _open(run: _RunTally) -> list[_Attempt]:
    """The run's attempts running now: its last started, then a pipeline's other parts'."""
    if run.attempt is None:
        return []
    return [run.attempt, *run.others] if run.others else [run.attempt]


def _numbered(run: _RunTally, number: int | None) -> _Attempt | None:
    """The run's running attempt `number`, if it runs."""
    if run.attempt is not None and run.attempt.number == number:
        return run.attempt
    return next((a for a in run.others or () if a.number == number), None)


class _FleetUsage:
    """Fleet-wide: chips on offer over time (from `capacity_changed`) and the span from first arrival to last end."""

    def __init__(self) -> None:
        self.chips: dict[str, float] = {}
        self.since: float | None = None
        self.chip_s = 0.0
        self.first_arrival: float | None = None
        self.last_end: float | None = None
        self.first: float | None = None  # when capacity was first recorded
        self.used_before_s = 0.0  # chip-seconds of ended attempts before then

    @property
    def known(self) -> bool:
        return self.since is not None

    def capacity_changed(self, event: Fields) -> None:
        pool = event.data.get("pool")
        if not isinstance(pool, str):
            return
        self._advance(event.ts)
        self.chips[pool] = max(number_field(event.data, "chips_after", 0.0), 0.0)
        if self.first is None:
            self.first = event.ts

    def used(self, attempt: _Attempt, ended_ts: float) -> None:
        """An ended attempt's chip-seconds before capacity was first recorded (all of it while none is)."""
        until = ended_ts if self.first is None else min(ended_ts, self.first)
        self.used_before_s += attempt.chip_s(attempt.started_ts, until)

    def _advance(self, ts: float) -> None:
        if self.since is not None and ts > self.since:
            self.chip_s += sum(self.chips.values()) * (ts - self.since)
        self.since = ts if self.since is None else max(self.since, ts)

    def capacity_chip_hours(self, now: float) -> float:
        if self.since is None:
            return 0.0
        return (self.chip_s + sum(self.chips.values()) * max(now - self.since, 0.0)) / 3600

    def arrived(self, ts: float) -> None:
        self.first_arrival = ts if self.first_arrival is None else min(self.first_arrival, ts)

    def ended(self, ts: float) -> None:
        self.last_end = ts if self.last_end is None else max(self.last_end, ts)

    def makespan_s(self) -> float | None:
        if self.first_arrival is None or self.last_end is None:
            return None
        return max(self.last_end - self.first_arrival, 0.0)


def compute(events: Iterable[Event], now: float) -> Report:
    """The metrics of a whole log (in seq order) as of `now`."""
    accumulator = MetricsAccumulator()
    for event in events:
        accumulator.add(event)
    return accumulator.report(now)


def _group_metrics(
    key: GroupKey, tallies: list[_Tally], running: tuple[float, float], dist: Distributions
) -> GroupMetrics:
    def count(status: str) -> int:
        return sum(t.runs[status] for t in tallies)

    succeeded, failed, cancelled, active = count(SUCCEEDED), count(FAILED), count(CANCELLED), count(ACTIVE)
    finished = succeeded + failed + cancelled
    cost = math.fsum([*(t.cost for t in tallies), running[1]])
    chip_hours = math.fsum([*(t.chip_hours for t in tallies), running[0]])
    useful = math.fsum(t.useful_chip_hours for t in tallies)
    reports_useful = any(t.reports_useful for t in tallies)
    return GroupMetrics(
        stage=key[0],
        pool=key[1],
        runs=finished + active,
        succeeded=succeeded,
        failed=failed,
        cancelled=cancelled,
        active=active,
        # A cancelled run was stopped by a person, not failed by the fleet: it counts for neither side.
        success_rate=succeeded / (succeeded + failed) if succeeded + failed else None,
        queue_time=dist.of([t.queue_s for t in tallies]),
        run_time=dist.of([t.run_s for t in tallies]),
        recoveries=sum(t.recoveries for t in tallies),
        recovery_time=dist.of([t.recovery_s for t in tallies]),
        chip_hours=chip_hours,
        cost=cost,
        cost_per_effective_run=cost / succeeded if succeeded else None,
        jct=dist.of([t.jct_s for t in tallies]),
        useful_chip_hours=useful if reports_useful else None,
        goodput=useful / chip_hours if reports_useful and chip_hours > 0 else None,
    )


def number_field(data: dict[str, Any], key: str, default: float) -> float:
    """`data[key]` as a finite float, else `default` (a report field may be missing, text or NaN)."""
    value = data.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return default


def text_field(data: dict[str, Any], key: str, default: str) -> str:
    """`data[key]` when it is a non-empty string, else `default`."""
    value = data.get(key)
    return value if isinstance(value, str) and value else default
