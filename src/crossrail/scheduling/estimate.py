"""Estimates for placement: queue wait, run time, recovery overhead and cost per pool, and start times.

Pure functions over plain data, so the control plane and the simulator call the same code:

  estimate_starts(pending, running, pools, now)     when each pending run is expected to start, and where
  estimate_placements(work, pools, waits)           every pool's terms for one run, and the pick with why

Run time on a pool is the reference duration (`resources.duration`, the run time on a pool of relative
speed 1.0) divided by the pool's relative speed, unless attempts of the same workload measured their
throughput per chip type, at each degree they ran at (see `run_time_s`, and scaling.py for the model
between degrees). Recovery overhead is the expected number of interruptions
(interruptions per chip-hour x chips x hours) times the work each loses since its last checkpoint plus
the restore time; the rate is the pool's declared `interruptions_per_chip_hour`, or the one measured from its
`preempted` events (control.placing.measured_interruptions). Capacity that arrives on demand (a pool with
`provisioning`) adds its expected `provisioning_wait` before the run starts. Cost is chips x hours (run +
recovery) x price per chip-hour. Each candidate names these terms and where they came from (`terms`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from crossrail.core import format_duration, format_money
from crossrail.scheduling.backfill import greedy_starts
from crossrail.scheduling.feasibility import gang_problem
from crossrail.scheduling.scaling import rate_at
from crossrail.scheduling.timeline import Busy as Busy  # noqa: PLC0414  # re-exported: callers import them here
from crossrail.scheduling.timeline import StartEstimate as StartEstimate  # noqa: PLC0414
from crossrail.scheduling.timeline import Waiting as Waiting  # noqa: PLC0414
from crossrail.scheduling.timeline import timelines
from crossrail.spec import Pool

OBJECTIVES = ("time_to_result", "throughput_per_cost", "cost")


@dataclass(frozen=True)
class PoolInfo:
    """One pool as the estimator sees it."""

    name: str
    accelerator: str
    chip_type: str
    capacity: int
    cost_per_chip_hour: float = 0.0
    relative_speed: float = 1.0
    interruptions_per_chip_hour: float = 0.0
    restore_s: float = 0.0
    drained: bool = False
    sizes: frozenset[int] | None = None
    """Chip counts the pool can give one run (a TPU pool: its slice shapes); None: any up to capacity."""
    currency: str = "USD"
    """The fleet's currency, in which a reason quotes this pool's cost."""
    interruption_source: str = "declared (interruptions_per_chip_hour)"
    """Where `interruptions_per_chip_hour` came from: the fleet, or the pool's measured `preempted` events."""
    spot: bool = False
    provisioning: str | None = None
    """`flex-start` or `autoscaled`: capacity that is provisioned when work is admitted."""
    provisioning_wait_s: float = 0.0

    @classmethod
    def from_spec(cls, pool: Pool, currency: str = "USD") -> PoolInfo:
        from crossrail.scheduling.feasibility import allocatable_sizes

        shaped = pool.accelerator == "tpu" and bool(pool.topology_shapes)
        return cls(
            name=pool.name,
            accelerator=str(pool.accelerator),
            chip_type=pool.chip_type,
            capacity=pool.chips,
            cost_per_chip_hour=pool.cost_per_chip_hour,
            relative_speed=pool.relative_speed,
            interruptions_per_chip_hour=pool.interruptions_per_chip_hour,
            restore_s=pool.restore_s,
            drained=pool.drained,
            sizes=frozenset(allocatable_sizes(pool, 1, pool.chips)) if shaped else None,
            currency=currency,
            spot=pool.spot,
            provisioning=pool.provisioning,
            provisioning_wait_s=pool.provisioning_wait_s,
        )

    def measured(self, rate: float, preempted: int, chip_hours: float) -> PoolInfo:
        """This pool with the interruption rate its `preempted` events measured in place of the declared one."""
        source = f"measured ({preempted} preempted events over {chip_hours:.4g} chip-hours)"
        return PoolInfo(**{**self.__dict__, "interruptions_per_chip_hour": rate, "interruption_source": source})

    def terms(self) -> tuple[Term, ...]:
        """The capacity terms placement prices this pool with, each with its source (for `place --explain`)."""
        out = []
        if self.spot or self.interruptions_per_chip_hour > 0:
            name = "spot interruptions" if self.spot else "interruptions"
            value = f"{self.interruptions_per_chip_hour:.4g}/chip-hour, restore {format_duration(self.restore_s)}"
            out.append(Term(name, value, self.interruption_source))
        if self.provisioning is not None:
            value = f"provisioning wait {format_duration(self.provisioning_wait_s)}"
            out.append(Term(self.provisioning, value, "declared (provisioning_wait)"))
        return tuple(out)


@dataclass(frozen=True)
class Term:
    """One named term of a pool's estimate, its value in words and where it came from."""

    name: str
    value: str
    source: str

    def as_dict(self) -> dict[str, str]:
        return {"term": self.name, "value": self.value, "source": self.source}


# --- start times -------------------------------------------------------------------------------


def estimate_starts(
    pending: Iterable[Waiting],
    running: Iterable[Busy],
    pools: Iterable[PoolInfo],
    now: float,
    *,
    unknown_duration_s: float = 3600.0,
    backfill: bool = False,
) -> dict[str, StartEstimate]:
    """Forward-simulate the queues: each pending run's expected start, pool and end.

    1. Every pool starts with its running work, which frees its chips at its expected end (an unknown or
       past end counts as `unknown_duration_s` from now, or as now when it is overdue).
    2. Pending runs go in admission order (priority rank, time queued, run). Each starts at the earliest
       time one of its candidate pools has its chips free, never before a run ahead of it on that pool
       (no backfill past a waiting gang), and holds them for its duration there (unknown: the default).
       With `backfill`, instead, whenever chips free up the first runs in admission order that fit start
       (a small run passes a waiting gang, as heads of other queues and best-effort queues do); see
       backfill.py.
    Drained pools and pools too small for the run are never candidates. Quotas, reservations and
    preemption are not modelled (see docs/scheduling.md for what that means for the estimates).
    """
    lines = timelines(running, pools, now, unknown_duration_s)
    ordered = sorted(pending, key=lambda w: (w.rank, w.queued_at, w.run))
    if backfill:
        return greedy_starts(ordered, lines, now, unknown_duration_s)
    out: dict[str, StartEstimate] = {}
    for wait in ordered:
        by_pool: dict[str, float] = {}
        for name in wait.durations:
            line = lines.get(name)
            at = line.earliest(wait.chips) if line is not None else None
            if at is not None:
                by_pool[name] = at
        pick = _pick(wait, by_pool)
        if pick is None:
            out[wait.run] = StartEstimate(wait.run, None, None, None, by_pool)
            continue
        start = by_pool[pick]
        duration = wait.durations[pick]
        end = start + (duration if duration is not None else unknown_duration_s)
        lines[pick].start(wait.chips, start, end)
        out[wait.run] = StartEstimate(wait.run, pick, start, end, by_pool)
    return out


def _pick(wait: Waiting, by_pool: Mapping[str, float]) -> str | None:
    if wait.pool is not None and wait.pool in by_pool:
        return wait.pool
    best: str | None = None
    for name, at in by_pool.items():  # insertion order: the earlier pool wins a tie
        if best is None or at < by_pool[best]:
            best = name
    return best


# --- one run's terms per pool ------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """What placement needs to know about one run.

    `reference_s` is the expected run time on a pool of relative speed 1.0. `measured` maps chip types to
    the throughput per chip that earlier attempts of the same workload reported there (any one unit of
    work per second); `scaling` maps chip types to that throughput per chip at each degree (the chips an
    attempt held) and, where it has a chip type, is read at the run's chips instead (scaling.py). With
    `work_units` (the total work) it gives run time directly, without it measured chip types are timed
    relative to each other (see `run_time_s`).
    """

    run: str
    chips: int
    stage: str = ""
    reference_s: float | None = None
    prefer: str = "any"
    allow: tuple[str, ...] | None = None
    objective: str = "time_to_result"
    checkpoint_every_s: float | None = None
    measured: Mapping[str, float] = field(default_factory=dict)
    work_units: float | None = None
    current: str | None = None
    avoid: str | None = None
    prefer_source: str = ""
    rank: int = 2
    queued_at: float = 0.0
    pools: frozenset[str] | None = None
    """Pools the run's queue can ever get quota on (None: all), e.g. `QuotaBook.reachable(queue)`."""
    scaling: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    """Chip type -> degree (chips) -> median throughput per chip measured there."""
    parts: tuple[int, ...] = ()
    """A pipeline's chips per part (each part its own allocation); empty: the run is one gang of `chips`."""
    run_times: Mapping[str, Sequence[float]] = field(default_factory=dict)
    """Pool -> run times (s) of successful runs of the same work (`spec.work_digest`) there, newest first."""

    @property
    def gangs(self) -> tuple[int, ...]:
        """What must fit a pool at once: each part of a pipeline, else the whole run."""
        return self.parts or (self.chips,)

    def rate(self, chip_type: str) -> tuple[float, str] | None:
        """Throughput per chip at the run's chips on `chip_type` and how it was found ("" when measured
        without a degree); None when nothing was measured there."""
        rates = self.scaling.get(chip_type)
        found = rate_at(rates, self.chips) if rates else None
        if found is not None:
            return found.per_chip, found.how
        flat = self.measured.get(chip_type)
        return (flat, "") if flat is not None and flat > 0 else None


def run_time_s(work: Workload, pool: PoolInfo, pools: Iterable[PoolInfo] = ()) -> tuple[float | None, str]:
    """Expected run time of `work` on `pool`, and where the speed came from.

    - `measured`, with `work_units`: work_units / (throughput per chip there x chips).
    - `measured ratio`, without: the measured chip type with the highest throughput anchors the fleet's
      speeds: run time there is reference / that pool's relative speed (so its source is `relative_speed`),
      and every other measured chip type is slower or faster by its measured throughput ratio to the anchor.
    - `relative_speed`: reference / relative speed, for chip types never measured.
    - `unknown`: no reference duration and nothing measured to go on.
    Throughput per chip is read at the run's chips (`Workload.rate`); where it came from a degree model,
    the source says how after a semicolon: `measured; Amdahl fit over 1, 2, 4 chips (serial 3.0%)`.

    Before all of these, runs of the same work that succeeded on that pool: the median of the newest
    `MEASURED_RUNS`, `measured from N runs` (measured_run_time).
    """
    measured = measured_run_time(work.run_times.get(pool.name, ()))
    if measured is not None:
        return measured
    found = work.rate(pool.chip_type)
    if found is not None:
        rate, how = found
        if work.work_units is not None:
            return work.work_units / (rate * work.chips), _with("measured", how)
        anchor = _anchor(work, pool, pools)
        if anchor is not None and work.reference_s is not None:
            anchor_pool, anchor_rate = anchor
            source = "relative_speed" if anchor_rate == rate else _with("measured ratio", how)
            return work.reference_s / anchor_pool.relative_speed * anchor_rate / rate, source
    if work.reference_s is None:
        return None, "unknown"
    return work.reference_s / pool.relative_speed, "relative_speed"


MEASURED_RUNS = 7
"""How many of the newest successful runs of the same work a run-time estimate takes the median of."""


def measured_run_time(newest_first: Sequence[float]) -> tuple[float, str] | None:
    """The median run time of the newest `MEASURED_RUNS` successful runs and `measured from N runs`; None
    when there are none (the estimate falls back to the declared duration)."""
    taken = [s for s in newest_first if s > 0][:MEASURED_RUNS]
    if not taken:
        return None
    return statistics.median(taken), f"measured from {len(taken)} run{'s' if len(taken) != 1 else ''}"


def _with(source: str, how: str) -> str:
    return f"{source}; {how}" if how else source


Anchor = tuple[PoolInfo, float] | None
_last_anchor: tuple[Workload, object, Anchor] | None = None
"""The last (work, pools, anchor) found: placement asks `run_time_s` once per pool of a run with the same
pools, so the anchor over them is found once per run (one tuple, rebound whole: safe across threads)."""


def _anchor(work: Workload, pool: PoolInfo, pools: Iterable[PoolInfo]) -> Anchor:
    """The measured pool of `pool` and `pools` with the highest throughput per chip (then speed, then name)."""
    global _last_anchor  # noqa: PLW0603 (a one-entry memo; see above)
    last = _last_anchor
    if last is not None and last[0] is work and last[1] is pools:
        best = last[2]
    else:
        best = _best_anchor(work, pools)
        _last_anchor = (work, pools, best)
    return _best_anchor(work, [pool], best)


def _best_anchor(work: Workload, pools: Iterable[PoolInfo], best: Anchor = None) -> Anchor:
    rates: dict[str, tuple[float, str] | None] = {}
    for pool in pools:
        if pool.chip_type not in rates:
            rates[pool.chip_type] = work.rate(pool.chip_type)
        found = rates[pool.chip_type]
        if found is None:
            continue
        rate = found[0]
        key = (rate, pool.relative_speed, pool.name)
        if best is None or key > (best[1], best[0].relative_speed, best[0].name):
            best = (pool, rate)
    return best


def recovery_s(chips: int, run_s: float, pool: PoolInfo, checkpoint_every_s: float | None) -> float:
    """Expected time lost to interruptions: interruptions x (work lost since checkpoint + restore).

    Interruptions = interruptions per chip-hour x chips x run hours; each loses half a checkpoint
    interval on average (half the run when it never checkpoints) and then restores.
    """
    interruptions = pool.interruptions_per_chip_hour * chips * run_s / 3600.0
    lost = (checkpoint_every_s if checkpoint_every_s is not None else run_s) / 2.0
    return interruptions * (lost + pool.restore_s)


def cost(chips: int, seconds: float, pool: PoolInfo) -> float:
    """chips x hours x price per chip-hour."""
    return chips * seconds / 3600.0 * pool.cost_per_chip_hour


@dataclass(frozen=True)
class Candidate:
    """One pool's terms for one run; `score` is smaller-is-better under the run's objective."""

    pool: str
    accelerator: str
    chip_type: str
    wait_s: float | None
    run_s: float | None
    recovery_s: float
    total_s: float | None
    cost: float | None
    speed_source: str
    score: float | None
    note: str
    currency: str = "USD"
    provisioning_s: float = 0.0
    """The expected wait for capacity provisioned on admission (flex-start, autoscaled), part of total_s."""
    terms: tuple[Term, ...] = ()

    @property
    def eligible(self) -> bool:
        return self.score is not None

    def as_dict(self) -> dict[str, object]:
        return {
            "pool": self.pool,
            "accelerator": self.accelerator,
            "chip_type": self.chip_type,
            "wait_s": _round(self.wait_s),
            "run_s": _round(self.run_s),
            "recovery_s": _round(self.recovery_s),
            "total_s": _round(self.total_s),
            "cost": _round(self.cost, 4),
            "speed_source": self.speed_source,
            "score": _round(self.score, 6),
            "note": self.note,
            "provisioning_s": _round(self.provisioning_s),
            "terms": [t.as_dict() for t in self.terms],
        }


@dataclass(frozen=True)
class Choice:
    """The pool picked for a run, why, and every candidate (best first)."""

    pool: str | None
    reason: str
    candidates: tuple[Candidate, ...]
    objective: str
    moved: bool = False

    def candidate(self, pool: str) -> Candidate | None:
        return next((c for c in self.candidates if c.pool == pool), None)

    def as_dict(self) -> dict[str, object]:
        return {
            "pool": self.pool,
            "reason": self.reason,
            "objective": self.objective,
            "moved": self.moved,
            "candidates": [c.as_dict() for c in self.candidates],
        }


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def candidates(work: Workload, pools: Iterable[PoolInfo], waits: Mapping[str, float]) -> list[Candidate]:
    """Every pool's terms for `work`, best score first; pools it cannot use are last, with why."""
    pools = list(pools)
    out = [_candidate(work, pool, pools, waits) for pool in pools]
    return sorted(out, key=lambda c: (c.score is None, c.score or 0.0, c.total_s or math.inf, c.pool))


def _candidate(work: Workload, pool: PoolInfo, pools: list[PoolInfo], waits: Mapping[str, float]) -> Candidate:
    run_s, source = run_time_s(work, pool, pools)
    wait = waits.get(pool.name)
    note = _ineligible(work, pool, run_s, wait)
    recovery = recovery_s(work.chips, run_s, pool, work.checkpoint_every_s) if run_s is not None else 0.0
    arrives = pool.provisioning_wait_s if pool.provisioning is not None else 0.0
    total = wait + arrives + run_s + recovery if wait is not None and run_s is not None else None
    spent = cost(work.chips, run_s + recovery, pool) if run_s is not None else None
    score = None if note else _score(work.objective, total, spent, work.chips, pool)
    return Candidate(
        pool.name, pool.accelerator, pool.chip_type, wait, run_s, recovery, total, spent, source, score, note,
        pool.currency, arrives, pool.terms(),
    )  # fmt: skip


def _ineligible(work: Workload, pool: PoolInfo, run_s: float | None, wait: float | None) -> str:
    gangs = gang_problem(work.gangs, pool.capacity, pool.sizes)
    checks = (
        (work.allow is not None and pool.accelerator not in work.allow, f"{pool.accelerator} is not allowed"),
        (work.pools is not None and pool.name not in work.pools, "the run's queue has no quota there, own or borrowed"),
        (pool.drained, "drained: takes no new work"),
        (gangs is not None, gangs or ""),
        (wait is None, "cannot hold the run"),
        (run_s is None, "no duration and no measured throughput to estimate the run time"),
    )
    return next((why for failed, why in checks if failed), "")


def _score(objective: str, total: float | None, spent: float | None, chips: int, pool: PoolInfo) -> float | None:
    if total is None or spent is None:
        return None
    if objective == "cost":
        return spent
    if objective == "throughput_per_cost":  # 1 / (work per time-to-result / price of the chips per hour)
        return total * chips * pool.cost_per_chip_hour / 3600.0
    return total


# --- the choice --------------------------------------------------------------------------------


def estimate_placements(
    work: Workload,
    pools: Iterable[PoolInfo],
    waits: Mapping[str, float],
    *,
    hysteresis: float = 0.1,
    min_gain_s: float = 0.0,
    prefer_margin: float = 0.25,
) -> Choice:
    """Every pool's terms for `work` and the pool to place it on under its objective, with the reason.

    `waits` holds the predicted queue wait per pool (pools absent cannot hold it now). The preferred
    accelerator (`prefer` tpu/gpu/cpu) is a strong prior: another pool wins only when its score beats the
    best preferred pool's by more than `prefer_margin` (a fraction) and it finishes at least `min_gain_s`
    sooner or costs less. A run already placed (`current`) moves only when another pool beats it by more
    than `hysteresis` under the same rule, or when its pool can no longer hold it. `mixed` behaves like
    `any` for a single-part run.
    """
    ranked = candidates(work, pools, waits)
    eligible = [c for c in ranked if c.eligible]
    retry = ""
    if work.avoid is not None and any(c.pool != work.avoid for c in eligible):
        if any(c.pool == work.avoid for c in eligible):
            retry = f"retry moved off {work.avoid}, where the previous attempt ended; "
        eligible = [c for c in eligible if c.pool != work.avoid]
    objective = work.objective
    if not eligible:
        why = "; ".join(f"{c.pool}: {c.note}" for c in ranked) or "the fleet has no pools"
        return Choice(None, f"no pool can take the run ({why})", tuple(ranked), objective, work.current is not None)
    best = eligible[0]
    current = next((c for c in eligible if c.pool == work.current), None)
    if current is not None:
        margin = (prefer_margin, _preferred(work, eligible))
        return _stay_or_move(
            work, best, current, tuple(ranked), hysteresis=hysteresis, margin=margin, min_gain_s=min_gain_s
        )
    if work.current is not None:
        gone = next((c for c in ranked if c.pool == work.current), None)
        why = gone.note if gone is not None and gone.note else "no longer in the fleet"
        if work.current == work.avoid:
            why = "the previous attempt ended there"
        reason = f"re-placed from {work.current} ({why}): {_terms(best)}"
        return Choice(best.pool, reason, tuple(ranked), objective, True)
    prior = _preferred(work, eligible)
    if not prior:
        lead = f"no other {work.prefer} pool" if retry else f"no {work.prefer} pool can take it"
        lead = f"{retry}{lead}; " if work.prefer in ("tpu", "gpu", "cpu") else retry
        reason = f"{lead}best {_objective_words(objective)}: {_terms(best)}"
        return Choice(best.pool, reason, tuple(ranked), objective)
    kept = prior[0]
    if best is not kept and _clearly_better(best, kept, prefer_margin, min_gain_s):
        reason = (
            f"{retry}left preferred {work.prefer}{work.prefer_source}: {best.pool} {_gain(best, kept, objective)} "
            f"than {kept.pool} ({_terms(best)} vs {_terms(kept)})"
        )
        return Choice(best.pool, reason, tuple(ranked), objective)
    reason = f"{retry}{work.prefer} preferred{work.prefer_source}: {_terms(kept)}"
    if best is not kept:
        reason += f"; {best.pool} gains less than the {prefer_margin:.0%} margin ({_terms(best)})"
    return Choice(kept.pool, reason, tuple(ranked), objective)


def _preferred(work: Workload, eligible: list[Candidate]) -> list[Candidate]:
    """The eligible pools of the preferred accelerator, best first; none when the run prefers none."""
    return [c for c in eligible if c.accelerator == work.prefer] if work.prefer in ("tpu", "gpu", "cpu") else []


def _stay_or_move(
    work: Workload,
    best: Candidate,
    current: Candidate,
    ranked: tuple[Candidate, ...],
    *,
    hysteresis: float,
    margin: tuple[float, list[Candidate]],
    min_gain_s: float,
) -> Choice:
    """The rule at every re-placement (resume, retry without fault, replan), as at first placement:

    1. leaving the preferred accelerator needs the `prefer_margin` over the best preferred pool; a pool
       that gains less is not a target, and the best preferred pool is;
    2. any move needs the hysteresis over the pool the run holds.
    """
    objective = work.objective
    prefer_margin, prior = margin
    target, held = best, ""
    if prior and best.accelerator != work.prefer and not _clearly_better(best, prior[0], prefer_margin, min_gain_s):
        target = prior[0]
        held = f"; {best.pool} gains less than the {prefer_margin:.0%} margin for leaving preferred {work.prefer}"
        held += f" ({_terms(best)})"
    if target is not current and _clearly_better(target, current, hysteresis, min_gain_s):
        rule = f"beyond the {hysteresis:.0%} hysteresis"
        if current.accelerator == work.prefer and target.accelerator != work.prefer:
            rule += f" and the {prefer_margin:.0%} margin for leaving preferred {work.prefer}"
        reason = (
            f"re-placed from {current.pool}: {target.pool} {_gain(target, current, objective)} "
            f"({_terms(target)} vs {_terms(current)}; {rule})"
        )
        return Choice(target.pool, reason, ranked, objective, True)
    reason = f"stays on {current.pool}: {_terms(current)}{held}"
    if target is not current:
        reason += f"; {target.pool} gains less than the {hysteresis:.0%} hysteresis ({_terms(target)})"
    return Choice(current.pool, reason, ranked, objective)


def _clearly_better(new: Candidate, old: Candidate, hysteresis: float, min_gain_s: float) -> bool:
    """`new` beats `old` by more than the hysteresis, and finishes `min_gain_s` sooner or costs less."""
    a, b = new.score, old.score
    if a == b == 0.0:  # free pools: time decides where price does not
        a, b = new.total_s, old.total_s
    if a is None or b is None or a >= b * (1.0 - hysteresis):
        return False
    sooner = (old.total_s or 0.0) - (new.total_s or 0.0)
    cheaper = (old.cost or 0.0) - (new.cost or 0.0)
    return sooner >= min_gain_s or cheaper > 0


def _objective_words(objective: str) -> str:
    return {"cost": "cost", "throughput_per_cost": "throughput per cost"}.get(objective, "time to result")


def _terms(c: Candidate) -> str:
    """`pool result in T (wait W, run R[, recovery V]), $C`: the terms a reason quotes."""
    recovery = f", recovery {_hours(c.recovery_s)}" if c.recovery_s >= 0.5 else ""
    arrives = f", provisioning {_hours(c.provisioning_s)}" if c.provisioning_s >= 0.5 else ""
    price = format_money(c.cost, c.currency) if c.cost is not None else "?"
    run = f"run {_hours(c.run_s)}{recovery}"
    return f"{c.pool} result in {_hours(c.total_s)} (wait {_hours(c.wait_s)}{arrives}, {run}), {price}"


def _gain(new: Candidate, old: Candidate, objective: str) -> str:
    sooner = (old.total_s or 0.0) - (new.total_s or 0.0)
    cheaper = (old.cost or 0.0) - (new.cost or 0.0)
    parts = []
    if sooner > 0:
        parts.append(f"finishes {_hours(sooner)} sooner")
    if cheaper > 0:
        parts.append(f"costs {format_money(cheaper, new.currency)} less")
    if not parts:
        parts.append(f"scores better on {_objective_words(objective)}")
    return " and ".join(parts)


def _hours(seconds: float | None) -> str:
    return "?" if seconds is None else format_duration(seconds)
