"""The scheduling core's types in one place: requests, running allocations, decisions and configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crossrail.core.attempts import StopReason
from crossrail.core.periods import Period
from crossrail.core.priority import PRIORITY_RANK, UNKNOWN_RANK
from crossrail.spec.fleet import Fleet

Hosts = tuple[tuple[int, int], ...]
"""(host index, chips) of every host an allocation holds chips on."""


__all__ = ["PRIORITY_RANK", "UNKNOWN_RANK"]  # the one priority table lives in crossrail.core; shown here too
__all__ += [
    "Admission",
    "Allocation",
    "BudgetCrossing",
    "CycleResult",
    "Decision",
    "Growth",
    "Hosts",
    "PartRequest",
    "Pending",
    "Preemption",
    "Request",
    "Running",
    "SchedulerConfig",
]


@dataclass(frozen=True)
class Pending:
    """A queued run as the agent reads it from the store, before the core's `Request` adds what it knows."""

    run: str
    queue: str
    priority: str
    queued_at: float
    chips: int
    min_chips: int | None = None
    max_chips: int | None = None
    allow: tuple[str, ...] | None = None
    prefer: str = "any"
    avoid_pool: str | None = None
    prefer_source: str = ""
    workers: int = 1


@dataclass(frozen=True)
class Decision:
    """Admit `run` on `chips` chips of `pool`, and why."""

    run: str
    pool: str
    chips: int
    reason: str


@dataclass(frozen=True)
class PartRequest:
    """One part of a pipeline run (`spec.parts`): `chips` in all, over `workers` whole workers (replicas x
    data-parallel degree), on an accelerator of its own when `prefer` is set (else the pipeline's)."""

    name: str
    chips: int
    workers: int = 1
    prefer: str | None = None
    runs_on: tuple[str, ...] | None = None
    """The only pools whose chips can run this part (a zero rate elsewhere); None: the pipeline's."""


PART_SEP = "/"
"""Joins a run and a part into the key the part's allocation, attempts and decisions go by: `r-12/learner`."""


def part_key(run: str, part: str) -> str:
    return f"{run}{PART_SEP}{part}"


@dataclass(frozen=True)
class Request:
    """A run waiting for chips: how many, from which queue and team, and where it would rather run.

    `duration_s` is the expected run time (None: unknown, which never backfills a reservation);
    `reservation` names a reservation the run may use besides those held for its team; `pool` is the
    pool the estimates picked for it (`pool_reason` says why): tried first, the others only after
    `fallback_wait_s`.
    """

    run: str
    queue: str
    chips: int
    priority: str = "normal"
    queued_at: float = 0.0
    team: str | None = None
    min_chips: int | None = None
    max_chips: int | None = None
    duration_s: float | None = None
    allow: tuple[str, ...] | None = None
    prefer: str = "any"
    prefer_source: str = ""
    avoid_pool: str | None = None
    reservation: str | None = None
    pool: str | None = None
    pool_reason: str = field(default="", compare=False)
    runs_on: tuple[str, ...] | None = None
    """The only pools whose chips can run it (a zero rate elsewhere); None: every pool `allow` admits."""
    attained_s: float = 0.0
    """Chip-seconds of service the run's earlier attempts received (`las` orders by it)."""
    attained_by_type: tuple[tuple[str, float], ...] = ()
    """`attained_s` split by chip type (hetero policies count service at its worth); empty: not split."""
    throughput: tuple[tuple[str, float], ...] = ()
    """The run's whole-gang rate on each chip type (work units per second, 0: cannot run there), as measured
    or traced; empty: unknown, and heterogeneity-aware policies treat every chip type alike."""
    remaining: float | None = None
    """Work units left (the units of `throughput`; seconds at speed 1 without it); None: unknown."""
    workers: int = 1
    """Data-parallel workers (`spec.parallelism.data`): one gang, all admitted or none."""
    parts: tuple[PartRequest, ...] = ()
    """A pipeline's parts: linked allocations admitted together (all or none), each under `part_key(run, name)`."""
    part: str | None = None
    """The part of a pipeline this request is for (`run` is then `part_key(pipeline, part)`), e.g. a retry."""

    low: int = field(init=False, repr=False, compare=False)
    """The fewest chips the run accepts."""
    high: int = field(init=False, repr=False, compare=False)
    """The most chips the run can use."""
    rank: int = field(init=False, repr=False, compare=False)
    tenant: str = field(init=False, repr=False, compare=False)
    """Whom fair share counts this run against: its team, else its queue."""
    unit: int | None = field(init=False, repr=False, compare=False)
    """Chips per worker when the run's chips split evenly over several workers: the gang may then spread
    over hosts in whole workers (pool.py); None: one gang of whole hosts."""

    def __post_init__(self) -> None:
        # Derived once: the cycle reads these for every head it tries.
        derived = {
            "low": self.min_chips or self.chips,
            "high": max(self.max_chips or self.chips, self.chips),
            "rank": PRIORITY_RANK.get(self.priority, UNKNOWN_RANK),
            "tenant": f"team {self.team}" if self.team else f"queue {self.queue}",
            "unit": self.chips // self.workers if self.workers > 1 and self.chips % self.workers == 0 else None,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @classmethod
    def from_pending(
        cls, p: Pending, *, team: str | None = None, duration_s: float | None = None, reservation: str | None = None
    ) -> Request:
        """The request for a `Pending` run, with what the store record adds."""
        return cls(
            run=p.run,
            queue=p.queue,
            chips=p.chips,
            priority=p.priority,
            queued_at=p.queued_at,
            team=team,
            min_chips=p.min_chips,
            max_chips=p.max_chips,
            duration_s=duration_s,
            allow=p.allow,
            prefer=p.prefer,
            prefer_source=p.prefer_source,
            avoid_pool=p.avoid_pool,
            reservation=reservation,
            workers=p.workers,
        )


@dataclass(frozen=True)
class Running:
    """A run that holds chips, as the store knows it (used to rebuild or sync the scheduler)."""

    request: Request
    pool: str
    chips: int
    started_at: float
    checkpointed_at: float | None = None


@dataclass
class Allocation:
    """Chips a run holds on one pool's hosts. The cache owns these; a cycle's snapshot only reads them."""

    request: Request
    pool: str
    chips: int
    hosts: Hosts
    started_at: float
    checkpointed_at: float | None = None
    reservation: str | None = None
    evicting: bool = False
    overflow: int = 0
    run: str = field(init=False)
    queue: str = field(init=False)

    def __post_init__(self) -> None:
        self.run = self.request.run
        self.queue = self.request.queue

    @property
    def expected_end(self) -> float | None:
        duration = self.request.duration_s
        return None if duration is None else self.started_at + duration

    def lost_work_s(self, now: float) -> float:
        """Work lost if the run stopped now: time since its last committed checkpoint, or since it started."""
        started = self.started_at
        since = self.checkpointed_at or started
        lost = now - (since if since > started else started)  # max() written out: preemption keys every run
        return 0.0 if lost < 0.0 else lost


@dataclass(frozen=True)
class Admission(Decision):
    """A run admitted on `pool` with `chips` (a `Decision`, so the agent's admit path takes it as is)."""

    hosts: Hosts = ()
    borrowed: int = 0
    reservation: str | None = None
    part: str | None = None
    """The part of a pipeline run this admits (then `run` is `part_key(pipeline, part)`); None: a whole run."""


@dataclass(frozen=True)
class Preemption:
    """Stop `run` within `grace_s` (time to checkpoint); its chips are free once `finished(run)` is told."""

    run: str
    pool: str
    chips: int
    grace_s: float
    reason: str
    for_run: str | None = None
    stop: StopReason = "preempted"
    """What the executor is told: `drained` when the run leaves a drained or shrinking pool (no back-off either way)."""


@dataclass(frozen=True)
class Growth:
    """A proposal: the elastic `run` could grow from `chips_from` to `chips_to` on its pool now."""

    run: str
    pool: str
    chips_from: int
    chips_to: int
    reason: str


@dataclass(frozen=True)
class BudgetCrossing:
    """`team` spent `spent` of its `amount` in the period starting at `period_start`: a `budget_exceeded`."""

    team: str
    amount: float
    spent: float
    period: Period
    period_start: float
    period_end: float
    hold: bool

    def as_dict(self) -> dict[str, Any]:
        """The `budget_exceeded` event's data (docs/events.md)."""
        return {
            "team": self.team,
            "amount": self.amount,
            "spent": round(self.spent, 6),
            "period": self.period,
            "period_start": self.period_start,
            "period_end": self.period_end,
            "hold": self.hold,
        }


@dataclass
class CycleResult:
    """What one cycle decided. `blocked` holds the queue heads it tried and could not admit, with why."""

    admitted: list[Admission] = field(default_factory=list)
    preempted: list[Preemption] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)
    grown: list[Growth] = field(default_factory=list)
    budget_exceeded: list[BudgetCrossing] = field(default_factory=list)
    """Team budgets first seen crossed this period (once per team and period)."""
    held_until: float | None = None
    """The earliest time a head held by its team's budget may be admitted again (its period's end)."""


@dataclass(frozen=True)
class SchedulerConfig:
    """Knobs of the scheduling core; `from_fleet` reads the fleet's `preemption` and `fair_share` sections."""

    fallback_wait_s: float = 60.0
    grace_s: float = 300.0
    max_preemptions: int = 2
    preemption_window_s: float = 3600.0
    half_life_s: float = 3600.0
    preempt_on_drain: bool = False
    best_effort_tries: int = 8
    """Heads a best-effort queue may try in one cycle before the rest wait for the next."""
    policy: str = "priority"
    """The admission order among pending runs (crossrail.scheduling.policies; the fleet's `scheduling.policy`)."""
    round_s: float = 360.0

    @classmethod
    def from_fleet(cls, fleet: Fleet, *, fallback_wait_s: float = 60.0, best_effort_tries: int = 8) -> SchedulerConfig:
        pre, fair = fleet.spec.preemption, fleet.spec.fair_share
        return cls(
            fallback_wait_s=fallback_wait_s,
            grace_s=pre.grace_s,
            max_preemptions=pre.max_per_window,
            preemption_window_s=pre.window_s,
            half_life_s=fair.half_life_s,
            preempt_on_drain=pre.on_drain == "preempt",
            best_effort_tries=best_effort_tries,
            policy=fleet.spec.scheduling.policy,
            round_s=fleet.spec.scheduling.round_s,
        )
