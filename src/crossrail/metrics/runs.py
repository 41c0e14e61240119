"""Per-run facts folded from the event log and reported metric samples: the unit verdicts resample."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from crossrail.core.events import Event, EventType
from crossrail.metrics.progress import chip_seconds, mean_chips, step_of, step_work
from crossrail.metrics.report import NO_POOL, UNKNOWN_STAGE

OPS = ("<=", "<", ">=", ">", "==")
ENDS = {
    EventType.SUCCEEDED: "succeeded",
    EventType.FAILED: "failed",
    EventType.PREEMPTED: "preempted",
    EventType.CANCELLED: "cancelled",
    EventType.SUSPENDED: "suspended",
}


@dataclass(frozen=True)
class Sample:
    """One metric value a run's training code reported (the store's metric samples)."""

    run: str
    attempt: int | None
    ts: float
    name: str
    value: float
    step: int | None = None


@dataclass(frozen=True)
class QualityTarget:
    """`spec.target`: the quality a run aims at, met on its own samples or (`via: eval`) its eval children's."""

    metric: str
    op: str
    value: float
    via: str = "self"

    def met_by(self, value: float) -> bool:
        return {
            "<=": value <= self.value,
            "<": value < self.value,
            ">=": value >= self.value,
            ">": value > self.value,
            "==": value == self.value,
        }[self.op]

    @classmethod
    def of(cls, data: Any) -> QualityTarget | None:
        """The target a `submitted` event carries, or None when it carries none (or an unreadable one)."""
        if not isinstance(data, Mapping):
            return None
        metric, op, value = data.get("metric"), data.get("op", "<="), data.get("value")
        if not isinstance(metric, str) or op not in OPS or not _is_number(value):
            return None
        via = data.get("via") or "self"
        return cls(metric, str(op), float(value), str(via))

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "op": self.op, "value": self.value, "via": self.via}


@dataclass
class AttemptFacts:
    """One attempt: where it ran, on what, from when to when, and how it ended."""

    number: int
    pool: str
    started_ts: float
    chips: float = 0.0
    cost_per_chip_hour: float = 0.0
    accelerator: str = "-"
    chip_type: str = "-"
    queue_s: float | None = None
    ended_ts: float | None = None
    end: str | None = None
    """succeeded, failed, preempted, cancelled, suspended; None while running (or when its end is missing)."""
    useful_chip_s: float | None = None
    framework: str = "-"
    precision: str = "-"
    first_beat: tuple[float, int] | None = None
    last_beat: tuple[float, int] | None = None
    measured_peak_flops: float | None = None
    """The peak FLOP/s of all its devices as its trainer measured them (`started` report: peak_flops × degree)."""
    resume_step: int | None = None
    """The step its training resumed from (the runtime's `resumed` report); None when it started afresh."""
    recompute_chip_s: float | None = None
    """Chip-seconds spent redoing steps an earlier attempt had already done (lost work); None when unknown."""
    virtual: bool = False
    """Ran on a virtual pool (local chips standing in for accelerators): its timings measure the software path."""
    peak_tflops: Mapping[str, float] | None = None
    """Its pool's declared peak TFLOP/s per chip and precision (the fleet's `peak_tflops`); None: the vendors' table."""
    part: str | None = None
    """The pipeline part it ran (its `started` event's `part`); None for a run of one part."""
    resizes: list[tuple[float, float]] | None = None
    """(ts, chips after) of each `resized` event while it ran; `chips` is what it started with."""

    def seconds(self, until: float) -> float:
        end = self.ended_ts if self.ended_ts is not None else until
        return max(0.0, min(end, until) - self.started_ts)

    def chip_hours(self, until: float) -> float:
        if not self.resizes:
            return self.chips * self.seconds(until) / 3600
        end = self.ended_ts if self.ended_ts is not None else until
        return chip_seconds(self.chips, self.started_ts, self.resizes, self.started_ts, min(end, until)) / 3600

    def mean_chips(self) -> float:
        """Its chips averaged over the span its steps were measured in (its chips when never resized)."""
        if not self.resizes or self.first_beat is None or self.last_beat is None:
            return self.chips
        return mean_chips(self.chips, self.started_ts, self.resizes, self.first_beat[0], self.last_beat[0])

    def cost(self, until: float) -> float:
        return self.chip_hours(until) * self.cost_per_chip_hour


@dataclass
class RunFacts:
    """What one run did over all its attempts, as of `now` (seconds; chip-hours; the fleet's currency)."""

    id: str
    now: float
    stage: str = UNKNOWN_STAGE
    team: str = "-"
    experiment: str = "-"
    parent_run: str | None = None
    submitted_ts: float | None = None
    ended_ts: float | None = None
    outcome: str = "active"
    attempts: list[AttemptFacts] = field(default_factory=list)
    recovery_s: list[float] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    target: QualityTarget | None = None
    target_met_ts: float | None = None
    credited: list[Sample] = field(default_factory=list)
    """Scores of evals of this run's checkpoints (`evaluated` events), in time order: credited to it."""
    work: str | None = None
    """The run's work digest (`crossrail.spec.work_digest`): runs with equal ones computed the same thing."""
    args: tuple[str, ...] | None = None
    commit: str | None = None
    dataset_version: str | None = None
    _by_name: dict[str, list[float]] | None = field(default=None, repr=False, compare=False)

    # -- where it ran ------------------------------------------------------------------------------

    @property
    def last(self) -> AttemptFacts | None:
        return self.attempts[-1] if self.attempts else None

    def dimension(self, name: str) -> str:
        """The run's value of a grouping dimension: its own (stage, team, ...) or its last attempt's (pool, ...)."""
        if name in ("stage", "team", "experiment", "outcome"):
            return str(getattr(self, name))
        last = self.last
        return str(getattr(last, name)) if last is not None else NO_POOL

    # -- what it cost ------------------------------------------------------------------------------

    @property
    def chip_hours(self) -> float:
        return math.fsum(a.chip_hours(self.now) for a in self.attempts)

    @property
    def cost(self) -> float:
        return math.fsum(a.cost(self.now) for a in self.attempts)

    @property
    def cycle_s(self) -> float | None:
        """Submit to result of a succeeded run, every attempt, wait and recovery included: to the first
        evaluation of what it produced where it was evaluated (the loop train → evaluate), else to its success."""
        end = self.cycle_end_ts
        if end is None or self.submitted_ts is None:
            return None
        return max(0.0, end - self.submitted_ts)

    @property
    def cycle_end_ts(self) -> float | None:
        """The first eval result at or after its success, else its success; None unless it succeeded."""
        if self.outcome != "succeeded" or self.ended_ts is None:
            return None
        done = self.ended_ts
        return next((s.ts for s in self.credited if s.ts >= done), done)

    @property
    def evaluated(self) -> bool:
        """Whether its cycle closes at an evaluation's result (rather than at its own success)."""
        return self.ended_ts is not None and self.cycle_end_ts not in (None, self.ended_ts)

    @property
    def recompute_s(self) -> float | None:
        """Wall seconds its attempts spent redoing steps an earlier attempt had done; None when unmeasured."""
        chips = [(a.recompute_chip_s, a.mean_chips()) for a in self.attempts if a.recompute_chip_s is not None]
        lost = [chip_s / n for chip_s, n in chips if n]
        return math.fsum(lost) if lost else None

    @property
    def queue_s(self) -> float | None:
        waits = [a.queue_s for a in self.attempts if a.queue_s is not None]
        return math.fsum(waits) if waits else None

    @property
    def useful_chip_hours(self) -> float | None:
        useful = [a.useful_chip_s for a in self.attempts if a.useful_chip_s is not None]
        return math.fsum(useful) / 3600 if useful else None

    # -- reported samples --------------------------------------------------------------------------

    def values(self, name: str) -> list[float]:
        """The run's reported values of `name`, in time order (indexed once; samples are not added later)."""
        if self._by_name is None:
            self._by_name = {}
            for s in self.samples:
                self._by_name.setdefault(s.name, []).append(s.value)
        return self._by_name.get(name, [])

    def last_value(self, name: str) -> float | None:
        values = self.values(name)
        return values[-1] if values else None

    def score(self, name: str) -> float | None:
        """Its last own value of `name`, else the last an eval of its checkpoints credited to it."""
        own = self.last_value(name)
        if own is not None:
            return own
        return next((s.value for s in reversed(self.credited) if s.name == name), None)

    # -- the target --------------------------------------------------------------------------------

    @property
    def time_to_target_s(self) -> float | None:
        if self.target_met_ts is None or self.submitted_ts is None:
            return None
        return max(0.0, self.target_met_ts - self.submitted_ts)

    @property
    def chip_hours_to_target(self) -> float | None:
        met = self.target_met_ts
        return None if met is None else math.fsum(a.chip_hours(met) for a in self.attempts if a.started_ts < met)

    @property
    def cost_to_target(self) -> float | None:
        met = self.target_met_ts
        return None if met is None else math.fsum(a.cost(met) for a in self.attempts if a.started_ts < met)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "now": self.now,
            "stage": self.stage,
            "team": self.team,
            "experiment": self.experiment,
            "parent_run": self.parent_run,
            "submitted_ts": self.submitted_ts,
            "ended_ts": self.ended_ts,
            "outcome": self.outcome,
            "attempts": [a.__dict__ for a in self.attempts],
            "recovery_s": self.recovery_s,
            "samples": [s.__dict__ for s in self.samples],
            "credited": [s.__dict__ for s in self.credited],
            "target": self.target.as_dict() if self.target else None,
            "target_met_ts": self.target_met_ts,
            "work": self.work,
            "args": list(self.args) if self.args is not None else None,
            "commit": self.commit,
            "dataset_version": self.dataset_version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunFacts:
        """A record written by `as_dict` (e.g. `simulate --json --records`)."""
        fields = dict(data)
        attempts = [AttemptFacts(**{**a, **_beats(a)}) for a in fields.pop("attempts", [])]
        samples = [Sample(**s) for s in fields.pop("samples", [])]
        fields["credited"] = [Sample(**s) for s in fields.pop("credited", None) or []]
        target = QualityTarget.of(fields.pop("target", None))
        args = fields.pop("args", None)
        args = tuple(str(a) for a in args) if isinstance(args, list | tuple) else None
        return cls(**fields, attempts=attempts, samples=samples, target=target, args=args)


def _beats(a: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: tuple(a[k]) if a.get(k) is not None else None for k in ("first_beat", "last_beat")}
    if a.get("resizes"):
        out["resizes"] = [(float(ts), float(chips)) for ts, chips in a["resizes"]]
    return out


class _Fold:
    """Events in log order -> RunFacts; a terminal run accepts no further change (as MetricsAccumulator)."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.runs: dict[str, RunFacts] = {}
        self.waiting: dict[str, float] = {}
        self.recovering: dict[str, float] = {}
        self.placement: dict[str, dict[str, Any]] = {}
        self.chips: dict[str, float] = {}
        self.runtime: dict[tuple[str, int | None], dict[str, Any]] = {}
        self.credits: dict[str, list[Sample]] = {}

    def add(self, e: Event) -> None:
        if e.run is None:
            return
        if e.type is EventType.EVALUATED:
            self._evaluated(e)
            return
        run = self.runs.get(e.run)
        if run is None:
            run = self.runs[e.run] = RunFacts(id=e.run, now=self.now)
        if run.outcome != "active":
            return
        if e.type is EventType.SUBMITTED:
            self._submitted(run, e)
        elif e.type is EventType.QUEUED:  # after submission, a retry or a resume
            self._queued(run, e)
        elif e.type is EventType.PLACED:
            self.placement[run.id] = e.data
        elif e.type is EventType.STARTED:
            self._started(run, e)
        elif e.type is EventType.HEARTBEAT:
            self._beat(run, e)
        elif e.type is EventType.REPORTED:
            self._reported(run, e)
        elif e.type is EventType.RESIZED:
            self._resized(run, e)
        elif e.type in ENDS:
            self._ended(run, e)

    def _submitted(self, run: RunFacts, e: Event) -> None:
        d = e.data
        run.stage = _text(d, "stage", run.stage)
        run.team = _text(d, "team", run.team)
        run.experiment = _text(d, "experiment", run.experiment)
        run.parent_run = d.get("parent_run") if isinstance(d.get("parent_run"), str) else None
        run.target = QualityTarget.of(d.get("target"))
        self.chips[run.id] = _number(d, "chips", 0.0)
        if run.submitted_ts is None:
            run.submitted_ts = e.ts

    def _queued(self, run: RunFacts, e: Event) -> None:
        if run.stage == UNKNOWN_STAGE and not run.attempts:
            run.stage = _text(e.data, "stage", run.stage)
        if run.team == "-":
            run.team = _text(e.data, "team", run.team)
        if run.submitted_ts is None:
            run.submitted_ts = e.ts
        self.waiting.setdefault(run.id, e.ts)  # a repeated `queued` does not restart the wait

    def _started(self, run: RunFacts, e: Event) -> None:
        number = e.attempt if e.attempt is not None else len(run.attempts) + 1
        last = run.last
        if last is not None and number <= last.number:
            return
        part = e.data.get("part") if isinstance(e.data.get("part"), str) else None
        for lost in run.attempts:  # the same part's earlier attempt: its end never reached the log
            if lost.ended_ts is None and lost.part == part:
                lost.ended_ts = e.ts
        placed = self.placement.get(run.id, {})
        waited = self.waiting.pop(run.id, None)
        attempt = AttemptFacts(
            number=number,
            pool=_text(e.data, "pool", _text(placed, "pool", NO_POOL)),
            started_ts=e.ts,
            chips=_number(e.data, "chips", _number(placed, "chips", self.chips.get(run.id, 0.0))),
            cost_per_chip_hour=_number(e.data, "cost_per_chip_hour", _number(placed, "cost_per_chip_hour", 0.0)),
            accelerator=_text(e.data, "accelerator", _text(placed, "accelerator", "-")),
            chip_type=_text(e.data, "chip_type", _text(placed, "chip_type", "-")),
            queue_s=max(0.0, e.ts - waited) if waited is not None else None,
            part=part,
        )
        run.attempts.append(attempt)
        self._describe(run, number)
        since = self.recovering.pop(run.id, None)
        if since is not None:
            run.recovery_s.append(max(0.0, e.ts - since))

    def _describe(self, run: RunFacts, number: int | None) -> None:
        last = run.last
        info = self.runtime.get((run.id, number))
        if last is None or info is None or last.number != number:
            return
        last.framework = _text(info, "framework", last.framework)
        last.precision = _text(info, "precision", _text(info, "dtype", last.precision))
        peak = info.get("peak_flops")
        if _is_number(peak) and peak > 0:
            last.measured_peak_flops = float(peak) * _number(info, "degree", 1.0)

    def _beat(self, run: RunFacts, e: Event) -> None:
        last, step = run.last, e.data.get("step")
        if last is None or last.number != e.attempt or not isinstance(step, int) or isinstance(step, bool):
            return
        if last.first_beat is None:
            last.first_beat = (e.ts, step)
        last.last_beat = (e.ts, step)

    def _evaluated(self, e: Event) -> None:
        """An eval's score, credited to the run it evaluated (whatever state that run is in by now)."""
        target, metric, value = e.data.get("evaluated_run"), e.data.get("metric"), e.data.get("value")
        if isinstance(target, str) and isinstance(metric, str) and _is_number(value):
            step = e.data.get("step") if isinstance(e.data.get("step"), int) else None
            self.credits.setdefault(target, []).append(Sample(target, None, e.ts, metric, float(value), step))

    def _reported(self, run: RunFacts, e: Event) -> None:
        if e.data.get("name") in ("runtime", "started"):
            self.runtime[(run.id, e.attempt)] = e.data.get("data") or {}
            self._describe(run, e.attempt)
        elif e.data.get("name") == "resumed":
            self._resumed(run, e)

    def _resumed(self, run: RunFacts, e: Event) -> None:
        last, step = run.last, step_of(e.data.get("data"))
        if last is not None and last.number == e.attempt and step is not None:
            last.resume_step = step

    def _resized(self, run: RunFacts, e: Event) -> None:
        """A running attempt's chips changed from now on (an elastic growth or shrink, a part resized)."""
        chips = _number(e.data, "chips", -1.0)
        for att in run.attempts:
            if att.number != e.attempt or att.ended_ts is not None or chips < 0 or e.ts < att.started_ts:
                continue
            if not att.resizes or e.ts >= att.resizes[-1][0]:
                att.resizes = [*(att.resizes or ()), (e.ts, chips)]

    def _ended(self, run: RunFacts, e: Event) -> None:
        # The attempt it names (a pipeline's parts run at once), or, naming none, every attempt still open.
        named = run.attempts if e.attempt is None else [a for a in run.attempts if a.number == e.attempt]
        for att in named:
            if att.ended_ts is None:
                att.ended_ts, att.end = e.ts, ENDS[e.type]
                useful = e.data.get("useful_chip_s")
                if _is_number(useful):
                    att.useful_chip_s = max(float(useful), 0.0)
        if e.type in (EventType.PREEMPTED, EventType.FAILED) and e.data.get("final") is False:
            self.recovering[run.id] = e.ts
            return
        if e.type is EventType.SUCCEEDED and e.data.get("final") is False:  # a part's; its pipeline runs on
            return
        if e.type is EventType.SUSPENDED:
            self.waiting.pop(run.id, None)
            return
        run.outcome = ENDS[e.type]
        run.ended_ts = e.ts
        for other in run.attempts:  # the parts stopped with their run record no end of their own
            if other.ended_ts is None:
                other.ended_ts = e.ts
        self.waiting.pop(run.id, None)


def fold_runs(events: Iterable[Event], samples: Iterable[Sample] = (), *, now: float) -> list[RunFacts]:
    """Every run of the log with its attempts, samples and target (met or not) as of `now`, sorted by id.

    Samples after `now` are left out; each run's are sorted by time. A target is met at the first sample
    of its metric that satisfies it: the run's own, or with `via: eval` those of runs whose parent it is.
    """
    fold = _Fold(now)
    for event in events:
        if event.ts <= now:
            fold.add(event)
    runs = fold.runs
    for run in runs.values():
        _measure_progress(run)
    for rid, credited in fold.credits.items():
        if rid in runs:
            runs[rid].credited = sorted(credited, key=lambda s: s.ts)
    for s in samples:
        if s.run in runs and s.ts <= now and math.isfinite(s.value):
            runs[s.run].samples.append(s)
    children: dict[str, list[RunFacts]] = {}
    for run in runs.values():
        run.samples.sort(key=lambda s: (s.ts, s.step if s.step is not None else -1))
        if run.parent_run is not None:
            children.setdefault(run.parent_run, []).append(run)
    for run in runs.values():
        run.target_met_ts = _target_met(run, children.get(run.id, []))
    return [runs[k] for k in sorted(runs)]


def _measure_progress(run: RunFacts) -> None:
    """Useful and recomputed chip-seconds of each attempt from the steps it reported (`progress.step_work`);
    an end event that carries `useful_chip_s` (the simulator's) keeps it."""
    high = 0
    for a in run.attempts:
        work = step_work(a.mean_chips(), a.first_beat, a.last_beat, a.resume_step, high)
        if work is not None:
            if a.useful_chip_s is None:
                a.useful_chip_s = work[0]
            a.recompute_chip_s = work[1]
        if a.last_beat is not None:
            high = max(high, a.last_beat[1])


def _target_met(run: RunFacts, children: list[RunFacts]) -> float | None:
    target = run.target
    if target is None:
        return None
    sources = children if target.via == "eval" else [run]
    met = [s.ts for r in sources for s in r.samples if s.name == target.metric and target.met_by(s.value)]
    return min(met) if met else None


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _number(data: Mapping[str, Any], key: str, default: float) -> float:
    value = data.get(key)
    return float(value) if _is_number(value) else default


def _text(data: Mapping[str, Any], key: str, default: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) and value else default
