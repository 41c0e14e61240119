"""Prometheus metrics of a workspace under Kueue's names, folded from the event log (docs/kubernetes.md#prometheus).

`FleetCounters` is the pure fold: feed it events in log order. `EventLogCollector` is a prometheus-client
collector over a store: each scrape folds the events appended since the last one, so a scrape costs the
new events, not the whole log. The API server (`/metrics`) and `crossrail agent --metrics-port` serve it.
prometheus-client (extra `api`) is imported here only, on first use; without it that use says which extra to install.

Series a Kueue dashboard reads carry Kueue's name after the `crossrail_` prefix and Kueue's labels
(`cluster_queue`, `status`, `priority_class`, `cohort`, `flavor`, `resource`); the older series keep their
`queue` label and gain `cluster_queue` beside it for one release (docs/kubernetes.md#prometheus).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from crossrail.core.events import TERMINAL_RUN_STATES, Event, EventType, RunState, state_after
from crossrail.core.extras import require
from crossrail.executors.render.hardware import accelerator_resource
from crossrail.executors.render.kueue import flavor_name
from crossrail.metrics.accumulator import number_field, text_field
from crossrail.metrics.progress import Beat, Resize, chip_seconds, mean_chips, step_of, step_work
from crossrail.spec import Fleet

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily, Metric
    from prometheus_client.registry import CollectorRegistry

# Kueue's wait-time buckets (pkg/metrics: generateExponentialBuckets(14)): 1 s, then 2.5 s doubling 12 times
# (2.5, 5, 10, ... 10240 s, about 2.8 hours).
WAIT_BUCKETS_S = (1.0, *(2.5 * 2**k for k in range(13)))
PENDING_STATES = frozenset({RunState.QUEUED})
ACTIVE_STATES = frozenset({RunState.ADMITTED, RunState.RUNNING})
UNKNOWN = "unknown"
_ENDS = frozenset({EventType.SUCCEEDED, EventType.FAILED, EventType.PREEMPTED, EventType.CANCELLED, EventType.UNPLACED})
PRIORITY_CLASS = "crossrail-{}"
"""The WorkloadPriorityClass `fleet render --target kueue` gives a priority, so Kueue and crossrail label alike."""


@dataclass(frozen=True)
class QuotaRow:
    """One ClusterQueue's nominal quota of one flavor's resource (Kueue's cluster_queue_nominal_quota labels)."""

    cohort: str
    cluster_queue: str
    flavor: str
    resource: str
    nominal: float


@dataclass(frozen=True)
class FleetShape:
    """What the gauges list from the fleet: its queues (every one listed, 0 included), their quotas, and each
    pool's flavor and resource as `fleet render --target kueue` names them."""

    queues: tuple[str, ...] = ()
    quotas: tuple[QuotaRow, ...] = ()
    flavors: dict[str, tuple[str, str]] = field(default_factory=dict)
    cohorts: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Run:
    queue: str = UNKNOWN
    stage: str = UNKNOWN
    team: str = UNKNOWN
    priority_class: str = UNKNOWN
    held: dict[int, tuple[str, float]] = field(default_factory=dict)  # chips per admitted attempt, by pool
    state: RunState = RunState.QUEUED
    waiting_since: float | None = None
    pool: str = UNKNOWN  # of the attempt started last
    chips: float = 0.0  # the chips and price of the attempt started last: a start that leaves them out keeps them
    cost_per_chip_hour: float = 0.0
    running: dict[int | None, _OpenAttempt] = field(default_factory=dict)  # a pipeline's parts run at once
    high_step: int = 0  # the furthest step its ended attempts reported


@dataclass(slots=True)
class _OpenAttempt:
    pool: str
    chips: float
    cost_per_chip_hour: float
    started_ts: float
    part: str | None
    first_beat: Beat | None = None  # its progress (metrics.progress)
    last_beat: Beat | None = None
    resume_step: int | None = None
    resizes: list[Resize] | None = None  # (ts, chips after) of each `resized` event naming it

    def chip_s(self, until: float) -> float:
        return chip_seconds(self.chips, self.started_ts, self.resizes, self.started_ts, until)


@dataclass
class _Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * len(WAIT_BUCKETS_S))
    total: int = 0
    sum_s: float = 0.0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(WAIT_BUCKETS_S):
            if value <= bound:
                self.counts[i] += 1
        self.total += 1
        self.sum_s += value


class FleetCounters:
    """Counters, gauges and the admission-wait histogram of one event log, as of the events added so far."""

    def __init__(self) -> None:
        self.runs: dict[str, _Run] = {}
        self.admission_wait: dict[tuple[str, str, str], _Histogram] = defaultdict(_Histogram)
        """By (queue, stage, priority class)."""
        self.admitted: dict[tuple[str, str], int] = defaultdict(int)
        """`admitted` events (one per admitted attempt, or part) by (queue, priority class)."""
        self.holds: dict[str, float] = {}
        """Teams whose budget holds their queued runs, until when (`budget_exceeded` with `hold`)."""
        self.preemptions: dict[tuple[str, str, str], int] = defaultdict(int)
        self.retries: dict[tuple[str, str], int] = defaultdict(int)
        self.failures: dict[tuple[str, str, str], int] = defaultdict(int)
        self.chip_s: dict[tuple[str, str, str], float] = defaultdict(float)
        self.cost: dict[tuple[str, str, str], float] = defaultdict(float)
        self.useful_chip_s: dict[tuple[str, str, str], float] = defaultdict(float)
        self.recompute_chip_s: dict[tuple[str, str, str], float] = defaultdict(float)

    def add(self, event: Event) -> None:
        if event.type is EventType.BUDGET_EXCEEDED and event.data.get("hold") is True:
            team, until = text_field(event.data, "team", UNKNOWN), number_field(event.data, "period_end", 0.0)
            self.holds[team] = max(until, self.holds.get(team, 0.0))
        if event.run is None:
            return
        run = self.runs.get(event.run)
        if run is None:
            run = self.runs[event.run] = _Run()
        if run.state in TERMINAL_RUN_STATES:
            return  # a terminal run accepts no further change (docs/events.md)
        self._apply(run, event)
        run.state = state_after(run.state, event)
        if run.state not in ACTIVE_STATES:
            run.held.clear()

    def _apply(self, run: _Run, event: Event) -> None:
        data, kind = event.data, event.type
        if kind in (EventType.SUBMITTED, EventType.QUEUED, EventType.ADMITTED):
            self._queueing(run, event)
        elif kind is EventType.STARTED:
            self._started(run, event)
        elif kind is EventType.HEARTBEAT and event.attempt in run.running:
            step, att = step_of(data), run.running[event.attempt]
            if step is not None:
                att.first_beat = att.first_beat or (event.ts, step)
                att.last_beat = (event.ts, step)
        elif kind is EventType.REPORTED and data.get("name") == "resumed" and event.attempt in run.running:
            run.running[event.attempt].resume_step = step_of(data.get("data"))
        elif kind is EventType.RESIZED and event.attempt in run.running:
            self._resized(run, event)
        elif kind is EventType.RETRIED:
            self.retries[(text_field(data, "cause", UNKNOWN), run.stage)] += 1
        if kind in (EventType.FAILED, EventType.PREEMPTED):
            key = (text_field(data, "cause", UNKNOWN), run.stage, text_field(data, "pool", run.pool))
            (self.failures if kind is EventType.FAILED else self.preemptions)[key] += 1
        if kind in (EventType.SUCCEEDED, EventType.FAILED, EventType.PREEMPTED, EventType.CANCELLED):
            self._ended(run, event)
        if kind in _ENDS and event.attempt is not None:
            run.held.pop(event.attempt, None)
        elif kind is EventType.SUSPENDED:
            self._ended(run, event)
            run.waiting_since = None

    def _started(self, run: _Run, event: Event) -> None:
        data, part = event.data, event.data.get("part")
        for lost in [n for n, a in run.running.items() if a.part == part]:  # its end never reached the log
            self._close(run, lost, event.ts)
        run.pool = text_field(data, "pool", run.pool)
        run.chips = number_field(data, "chips", run.chips)
        run.cost_per_chip_hour = number_field(data, "cost_per_chip_hour", run.cost_per_chip_hour)
        run.running[event.attempt] = _OpenAttempt(
            pool=run.pool,
            chips=run.chips,
            cost_per_chip_hour=run.cost_per_chip_hour,
            started_ts=event.ts,
            part=part if isinstance(part, str) else None,
        )

    def _resized(self, run: _Run, event: Event) -> None:
        att, chips = run.running[event.attempt], number_field(event.data, "chips", -1.0)
        if chips < 0 or event.ts < att.started_ts or (att.resizes and event.ts < att.resizes[-1][0]):
            return
        att.resizes = [*(att.resizes or ()), (event.ts, chips)]
        if event.attempt is not None and event.attempt in run.held:
            run.held[event.attempt] = (run.held[event.attempt][0], chips)

    def _ended(self, run: _Run, event: Event) -> None:
        """The attempt the end names, or every running one when it names none or ends the run (the parts
        stopped with their pipeline record no end of their own)."""
        ends_run = event.type is not EventType.PREEMPTED and event.data.get("final") is not False
        for number in [n for n in run.running if n == event.attempt or event.attempt is None or ends_run]:
            self._close(run, number, event.ts)

    def _queueing(self, run: _Run, event: Event) -> None:
        """Where a run waits and at what priority, its admissions, the chips they hold and its admission wait."""
        data, kind = event.data, event.type
        if kind in (EventType.SUBMITTED, EventType.QUEUED):
            run.stage, run.team = text_field(data, "stage", run.stage), text_field(data, "team", run.team)
            run.queue = text_field(data, "queue", run.queue)
            if "priority" in data:
                run.priority_class = PRIORITY_CLASS.format(text_field(data, "priority", UNKNOWN))
        if kind is EventType.QUEUED and run.waiting_since is None:
            run.waiting_since = event.ts
        if kind is not EventType.ADMITTED:
            return
        self.admitted[(run.queue, run.priority_class)] += 1
        if event.attempt is not None:
            run.held[event.attempt] = (text_field(data, "pool", UNKNOWN), number_field(data, "chips", 0.0))
        if run.waiting_since is not None:
            wait_s = max(0.0, event.ts - run.waiting_since)
            self.admission_wait[(run.queue, run.stage, run.priority_class)].observe(wait_s)
            run.waiting_since = None

    def _close(self, run: _Run, number: int | None, ts: float) -> None:
        att = run.running.pop(number)
        chip_s = att.chip_s(ts)
        key = (run.team, run.stage, att.pool)
        self.chip_s[key] += chip_s
        self.cost[key] += chip_s / 3600 * att.cost_per_chip_hour
        chips = att.chips
        if att.resizes and att.first_beat is not None and att.last_beat is not None:
            chips = mean_chips(chips, att.started_ts, att.resizes, att.first_beat[0], att.last_beat[0])
        work = step_work(chips, att.first_beat, att.last_beat, att.resume_step, run.high_step)
        if work is not None:
            self.useful_chip_s[key] += work[0]
            self.recompute_chip_s[key] += work[1]
        if att.last_beat is not None:
            run.high_step = max(run.high_step, att.last_beat[1])

    def running_usage(self, now: float) -> dict[tuple[str, str, str], tuple[float, float]]:
        """Chip-seconds and cost of the attempts running at `now`, by (team, stage, pool)."""
        out: dict[tuple[str, str, str], tuple[float, float]] = {}
        for run in self.runs.values():
            for att in run.running.values():
                chip_s = att.chip_s(now)
                s, c = out.get((run.team, run.stage, att.pool), (0.0, 0.0))
                out[(run.team, run.stage, att.pool)] = (s + chip_s, c + chip_s / 3600 * att.cost_per_chip_hour)
        return out

    def runs_by_queue(self, states: frozenset[RunState]) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for run in self.runs.values():
            if run.state in states:
                out[run.queue] += 1
        return out

    def pending_by_status(self, now: float) -> dict[tuple[str, str], int]:
        """Queued runs by (queue, Kueue's status): `inadmissible` while their team's budget holds them (a
        `budget_exceeded` with `hold`, until its period ends), else `active`."""
        out: dict[tuple[str, str], int] = defaultdict(int)
        for run in self.runs.values():
            if run.state in PENDING_STATES:
                held = self.holds.get(run.team, float("-inf")) > now
                out[(run.queue, "inadmissible" if held else "active")] += 1
        return out

    def usage(self) -> dict[tuple[str, str], float]:
        """Chips held now by admitted or running attempts, by (queue, pool)."""
        out: dict[tuple[str, str], float] = defaultdict(float)
        for run in self.runs.values():
            for pool, chips in run.held.values():
                out[(run.queue, pool)] += chips
        return out

    def families(self, now: float, queues: Sequence[str] = (), shape: FleetShape | None = None) -> Iterator[Metric]:
        """The metric families as of `now`; every queue in `queues` (or `shape.queues`) has its gauges, even at 0."""
        shape = shape or FleetShape(tuple(queues))
        queues = shape.queues or tuple(queues)
        yield from self._waits()
        for name, doc, states in (
            ("crossrail_pending_runs", "Runs waiting in their queue", PENDING_STATES),
            ("crossrail_active_runs", "Runs admitted or running", ACTIVE_STATES),
        ):
            gauge = _client().GaugeMetricFamily(name, doc, labels=["queue", "cluster_queue"])
            counts = dict.fromkeys(queues, 0) | self.runs_by_queue(states)
            for queue in sorted(counts):
                gauge.add_metric([queue, queue], counts[queue])
            yield gauge
        yield from self._kueue_named(now, queues, shape)
        yield _counter("crossrail_preemptions", "Attempts preempted", ["reason", "stage", "pool"], self.preemptions)
        yield _counter("crossrail_retries", "Runs put back in their queue to retry", ["reason", "stage"], self.retries)
        yield _counter("crossrail_failures", "Attempts that failed", ["reason", "stage", "pool"], self.failures)
        running = self.running_usage(now)
        chip_s, cost = dict(self.chip_s), dict(self.cost)
        for key, (s, c) in running.items():
            chip_s[key] = chip_s.get(key, 0.0) + s
            cost[key] = cost.get(key, 0.0) + c
        labels = ["team", "stage", "pool"]
        yield _counter("crossrail_chip_seconds", "Chip-seconds of attempts (running ones up to now)", labels, chip_s)
        yield _counter(
            "crossrail_cost", "Cost of attempts at the fleet's prices (running ones up to now)", labels, cost
        )
        yield _counter(
            "crossrail_useful_chip_seconds",
            "Chip-seconds of ended attempts that advanced training to steps not reached before (goodput's numerator)",
            labels,
            self.useful_chip_s,
        )
        yield _counter(
            "crossrail_recompute_chip_seconds",
            "Chip-seconds of ended attempts spent redoing steps an earlier attempt had done (lost work)",
            labels,
            self.recompute_chip_s,
        )

    def _waits(self) -> Iterator[Metric]:
        """The admission wait under its old labels (queue, stage) and Kueue's (cluster_queue, priority_class)."""
        wait = _client().HistogramMetricFamily(
            "crossrail_admission_wait_time_seconds",
            "Seconds a run waited in its queue before it was admitted, per admission",
            labels=["queue", "cluster_queue", "stage", "priority_class"],
        )
        for (queue, stage, priority), h in sorted(self.admission_wait.items()):
            buckets = [(_le(b), float(n)) for b, n in zip(WAIT_BUCKETS_S, h.counts, strict=True)]
            wait.add_metric([queue, queue, stage, priority], [*buckets, ("+Inf", float(h.total))], sum_value=h.sum_s)
        yield wait

    def _kueue_named(self, now: float, queues: Sequence[str], shape: FleetShape) -> Iterator[Metric]:
        """kueue_pending_workloads, kueue_admitted_workloads_total, kueue_admitted_active_workloads,
        kueue_cluster_queue_nominal_quota and kueue_cluster_queue_resource_usage, under crossrail's prefix."""
        pending = _client().GaugeMetricFamily(
            "crossrail_pending_workloads", "Runs waiting in their queue, by status", labels=["cluster_queue", "status"]
        )
        counts = {(q, s): 0 for q in queues for s in ("active", "inadmissible")} | self.pending_by_status(now)
        for (queue, status), n in sorted(counts.items()):
            pending.add_metric([queue, status], n)
        yield pending
        yield _counter(
            "crossrail_admitted_workloads",
            "Attempts admitted (each admission of an attempt or part; a retry is admitted again)",
            ["cluster_queue", "priority_class"],
            self.admitted,
        )
        active = _client().GaugeMetricFamily(
            "crossrail_admitted_active_workloads", "Runs admitted or running now", labels=["cluster_queue"]
        )
        actives = dict.fromkeys(queues, 0) | self.runs_by_queue(ACTIVE_STATES)
        for queue in sorted(actives):
            active.add_metric([queue], actives[queue])
        yield active
        labels = ["cohort", "cluster_queue", "flavor", "resource"]
        quota = _client().GaugeMetricFamily(
            "crossrail_cluster_queue_nominal_quota",
            "Chips of a flavor a queue is guaranteed (its quota)",
            labels=labels,
        )
        for row in shape.quotas:
            quota.add_metric([row.cohort, row.cluster_queue, row.flavor, row.resource], row.nominal)
        yield quota
        usage = dict.fromkeys(((r.cluster_queue, r.flavor, r.resource) for r in shape.quotas), 0.0)
        for (queue, pool), chips in self.usage().items():
            flavor, resource = shape.flavors.get(pool, (pool, UNKNOWN))
            usage[(queue, flavor, resource)] = usage.get((queue, flavor, resource), 0.0) + chips
        used = _client().GaugeMetricFamily(
            "crossrail_cluster_queue_resource_usage",
            "Chips of a flavor held now by a queue's admitted or running attempts",
            labels=labels,
        )
        for (queue, flavor, resource), chips in sorted(usage.items()):
            used.add_metric([shape.cohorts.get(queue, ""), queue, flavor, resource], chips)
        yield used


class EventLogCollector:
    """A collector over a store's event log; thread-safe, so an HTTP server thread may scrape it."""

    def __init__(
        self,
        events_after: Callable[[int], Iterable[Event]],
        now: Callable[[], float],
        queues: Sequence[str] = (),
        shape: FleetShape | None = None,
    ) -> None:
        self._events_after, self._now = events_after, now
        self._shape = shape or FleetShape(tuple(queues))
        self._counters = FleetCounters()
        self._seq = 0
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            for event in self._events_after(self._seq):
                self._counters.add(event)
                self._seq = max(self._seq, event.seq or 0)
            return iter(list(self._counters.families(self._now(), shape=self._shape)))


class BacklogCollector:
    """An RL pipeline's queues as its learner last reported them, for each run with an attempt running now:
    `crossrail_rl_backlog_length` and `crossrail_rl_backlog_age_seconds`, by run and queue (`samples`: made,
    not yet scored; `scored`: scored, not yet learnt from)."""

    QUEUES = ("samples", "scored")

    def __init__(self, store: Any) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        length = _client().GaugeMetricFamily(
            "crossrail_rl_backlog_length",
            "Items waiting in an RL pipeline's queue, as last reported",
            labels=["run", "queue"],
        )
        age = _client().GaugeMetricFamily(
            "crossrail_rl_backlog_age_seconds",
            "Age of the oldest item waiting in an RL pipeline's queue, as last reported",
            labels=["run", "queue"],
        )
        for run in sorted({a.run_id for a in self._store.active_attempts()}):
            for queue in self.QUEUES:
                for family, name in ((length, f"backlog_{queue}_length"), (age, f"backlog_{queue}_age_seconds")):
                    samples = self._store.metric_samples(run, name)
                    if samples:
                        family.add_metric([run, queue], float(samples[-1]["value"]))
        return iter([length, age])


def fleet_shape(fleet: Fleet) -> FleetShape:
    """The queues, quotas and flavors of `fleet`, named as `fleet render --target kueue` names them."""
    flavors = {p.name: (flavor_name(p), accelerator_resource(p) or "cpu") for p in fleet.pools}
    rows = []
    for queue in fleet.queues:
        for pool, chips in sorted(queue.quota.items()):
            flavor, resource = flavors.get(pool, (pool, UNKNOWN))
            rows.append(QuotaRow(queue.cohort or "", queue.name, flavor, resource, float(chips)))
    cohorts = {q.name: q.cohort or "" for q in fleet.queues}
    return FleetShape(tuple(q.name for q in fleet.queues), tuple(rows), flavors, cohorts)


def registry_for(store: Any, clock: Any, fleet: Fleet | None = None) -> CollectorRegistry:
    """A registry holding crossrail's collectors over `store` (a crossrail Store), `clock` and `fleet`."""
    registry: CollectorRegistry = require(
        "prometheus_client.registry", extra="api", needed_for="Prometheus metrics"
    ).CollectorRegistry(auto_describe=False)
    shape = fleet_shape(fleet) if fleet is not None else None
    registry.register(EventLogCollector(lambda seq: store.events(after_seq=seq), clock.now, shape=shape))
    registry.register(BacklogCollector(store))
    return registry


def _counter(name: str, doc: str, labels: list[str], values: dict[Any, Any]) -> CounterMetricFamily:
    family: CounterMetricFamily = _client().CounterMetricFamily(name, doc, labels=labels)
    for key in sorted(values):
        family.add_metric(list(key), float(values[key]))
    return family


def _client() -> ModuleType:
    """prometheus_client's metric families (the api extra), imported on the first scrape."""
    return require("prometheus_client.core", extra="api", needed_for="Prometheus metrics")


def _le(bound: float) -> str:
    return f"{bound:.1f}"  # as prometheus-client writes a bucket bound: 1.0, 2.5, 10240.0
