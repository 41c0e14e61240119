"""One run's terms on each pool and their score: run time, recovery overhead, cost and wait, per pool.

Run time on a pool is the reference duration (`resources.duration`, the run time on a pool of relative
speed 1.0) divided by the pool's relative speed, unless attempts of the same workload measured their
throughput per chip type, at each degree they ran at (see `run_time_s`, and scaling.py for the model
between degrees). Recovery overhead is the expected number of interruptions
(interruptions per chip-hour x chips x hours) times the work each loses since its last checkpoint plus
the restore time; the rate is the pool's declared `interruptions_per_chip_hour`, or the one measured from its
`preempted` events (control.placing.measured_interruptions). Capacity that arrives on demand (a pool with
`provisioning`) adds its expected `provisioning_wait` before the run starts. Cost is chips x hours (run +
recovery) x price per chip-hour. Each candidate names these terms and where they came from (`terms`); the
pick among them is choice.py's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from crossrail.core import format_duration
from crossrail.scheduling.feasibility import gang_problem
from crossrail.scheduling.scaling import rate_at
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


@dataclass(frozen=True)
class PlacementWork:
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


def run_time_s(work: PlacementWork, pool: PoolInfo, pools: Iterable[PoolInfo] = ()) -> tuple[float | None, str]:
    """Expected run time of `work` on `pool`, and where the speed came from.

    - `measured`, with `work_units`: work_units / (throughput per chip there x chips).
    - `measured ratio`, without: the measured chip type with the highest throughput anchors the fleet's
      speeds: run time there is reference / that pool's relative speed (so its source is `relative_speed`),
      and every other measured chip type is slower or faster by its measured throughput ratio to the anchor.
    - `relative_speed`: reference / relative speed, for chip types never measured.
    - `unknown`: no reference duration and nothing measured to go on.
    Throughput per chip is read at the run's chips (`PlacementWork.rate`); where it came from a degree model,
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
_last_anchor: tuple[PlacementWork, object, Anchor] | None = None
"""The last (work, pools, anchor) found: placement asks `run_time_s` once per pool of a run with the same
pools, so the anchor over them is found once per run (one tuple, rebound whole: safe across threads)."""


def _anchor(work: PlacementWork, pool: PoolInfo, pools: Iterable[PoolInfo]) -> Anchor:
    """The measured pool of `pool` and `pools` with the highest throughput per chip (then speed, then name)."""
    global _last_anchor  # noqa: PLW0603 (a one-entry memo; see above)
    last = _last_anchor
    if last is not None and last[0] is work and last[1] is pools:
        best = last[2]
    else:
        best = _best_anchor(work, pools)
        _last_anchor = (work, pools, best)
    return _best_anchor(work, [pool], best)


def _best_anchor(work: PlacementWork, pools: Iterable[PoolInfo], best: Anchor = None) -> Anchor:
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


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def candidates(work: PlacementWork, pools: Iterable[PoolInfo], waits: Mapping[str, float]) -> list[Candidate]:
    """Every pool's terms for `work`, best score first; pools it cannot use are last, with why."""
    pools = list(pools)
    out = [_candidate(work, pool, pools, waits) for pool in pools]
    return sorted(out, key=lambda c: (c.score is None, c.score or 0.0, c.total_s or math.inf, c.pool))


def _candidate(work: PlacementWork, pool: PoolInfo, pools: list[PoolInfo], waits: Mapping[str, float]) -> Candidate:
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


def _ineligible(work: PlacementWork, pool: PoolInfo, run_s: float | None, wait: float | None) -> str:
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
