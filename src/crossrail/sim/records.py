"""What a simulation returns: one `SimRunRecord` per job and the `SimResult` around them, built from metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from crossrail.core.renamed import renamed
from crossrail.metrics import GroupMetrics, Report


@dataclass
class SimRunRecord:
    """What happened to one job over all its attempts (seconds; chip-seconds where named)."""

    name: str
    stage: str
    chips: int
    submit_s: float
    first_start_s: float | None = None
    end_s: float | None = None
    outcome: str = "pending"
    """pending, running, succeeded (a job is retried after every interruption until it succeeds)."""
    pool: str | None = None
    attempts: int = 0
    interruptions: int = 0
    preemptions: int = 0
    checkpoints: int = 0
    useful_s: float = 0.0
    """Seconds of computing, at the speed of all the run's hosts, whose work was kept."""
    useful_chip_s: float = 0.0
    allocated_chip_s: float = 0.0
    lost_s: float = 0.0
    """Compute seconds lost to rollbacks (work since the last committed checkpoint)."""
    checkpoint_s: float = 0.0
    restore_s: float = 0.0
    paused_s: float = 0.0
    queue_s: float | None = None
    """Wait from submission to the first start."""

    @property
    def jct_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.submit_s

    @property
    def ettr(self) -> float | None:
        """Effective training time ratio: useful compute time over wall time since the first start."""
        if self.end_s is None or self.first_start_s is None or self.end_s <= self.first_start_s:
            return None
        return self.useful_s / (self.end_s - self.first_start_s)

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "jct_s": self.jct_s, "ettr": self.ettr}


@dataclass(frozen=True)
class SimStageStats:
    """One stage's numbers, over all pools (from `MetricsAccumulator.stage_totals`)."""

    stage: str
    jobs: int
    finished: int
    avg_jct_s: float | None
    p95_jct_s: float | None
    queue_p50_s: float | None
    queue_p95_s: float | None
    avg_queue_s: float | None
    goodput: float | None
    chip_hours: float
    cost: float
    cost_per_effective_run: float | None
    success_rate: float | None
    recoveries: int
    recovery_p50_s: float | None

    @classmethod
    def of(cls, g: GroupMetrics) -> SimStageStats:
        return cls(
            stage=g.stage,
            jobs=g.runs,
            finished=g.succeeded,
            avg_jct_s=g.jct.mean,
            p95_jct_s=g.jct.p95,
            queue_p50_s=g.queue_time.p50,
            queue_p95_s=g.queue_time.p95,
            avg_queue_s=g.queue_time.mean,
            goodput=g.goodput,
            chip_hours=g.chip_hours,
            cost=g.cost,
            cost_per_effective_run=g.cost_per_effective_run,
            success_rate=g.success_rate,
            recoveries=g.recoveries,
            recovery_p50_s=g.recovery_time.p50,
        )


@dataclass
class SimResult:
    """Outcome of one simulation; numbers come from the metrics `Report` of the events it produced."""

    policy: str
    seed: int
    report: Report
    stages: list[SimStageStats]
    runs: dict[str, SimRunRecord]
    wall_s: float
    events: int
    cycles: int
    end_s: float
    fleet: str = ""
    chips: int = 0
    notes: list[str] = field(default_factory=list)
    measured: frozenset[str] | None = None
    """The jobs measured (a generated workload's window); None: every job. JCT figures are over these."""

    @property
    def jobs(self) -> int:
        return len(self.runs)

    @property
    def finished(self) -> int:
        return self.report.totals.succeeded

    @property
    def avg_jct_s(self) -> float | None:
        if self.measured is not None:
            jcts = [j for run in self.measured if run in self.runs and (j := self.runs[run].jct_s) is not None]
            return math.fsum(jcts) / len(jcts) if jcts else None  # exact: a set's order moves a plain sum
        return self.report.totals.jct.mean

    @property
    def p95_jct_s(self) -> float | None:
        return self.report.totals.jct.p95

    @property
    def makespan_s(self) -> float | None:
        return self.report.makespan_s

    @property
    def avg_queue_s(self) -> float | None:
        return self.report.totals.queue_time.mean

    @property
    def goodput(self) -> float | None:
        return self.report.totals.goodput

    @property
    def utilization(self) -> float | None:
        return self.report.utilization

    @property
    def per_stage(self) -> dict[str, SimStageStats]:
        return {s.stage: s for s in self.stages}

    @property
    def interruptions(self) -> int:
        return sum(r.interruptions for r in self.runs.values())

    def record(self, name: str) -> SimRunRecord:
        return self.runs[name]

    def to_json(self, *, runs: bool = False) -> dict[str, Any]:
        """The JSON `crossrail simulate --json` prints (`runs=True` adds every job's record)."""
        totals = self.report.totals
        out: dict[str, Any] = {
            "policy": self.policy,
            "seed": self.seed,
            "fleet": self.fleet,
            "chips": self.chips,
            "jobs": self.jobs,
            "finished": self.finished,
            "avg_jct_s": self.avg_jct_s,
            "measured_jobs": len(self.measured) if self.measured is not None else None,
            "p95_jct_s": self.p95_jct_s,
            "makespan_s": self.makespan_s,
            "avg_queue_s": self.avg_queue_s,
            "p95_queue_s": totals.queue_time.p95,
            "goodput": self.goodput,
            "utilization": self.utilization,
            "success_rate": totals.success_rate,
            "cost": totals.cost,
            "cost_per_effective_run": totals.cost_per_effective_run,
            "interruptions": self.interruptions,
            "recoveries": totals.recoveries,
            "recovery_p50_s": totals.recovery_time.p50,
            "recovery_p95_s": totals.recovery_time.p95,
            "wall_s": self.wall_s,
            "events": self.events,
            "events_per_s": self.events / self.wall_s if self.wall_s > 0 else None,
            "cycles": self.cycles,
            "end_s": self.end_s,
            "per_stage": {s.stage: s.__dict__ for s in self.stages},
            "notes": self.notes,
        }
        if runs:
            out["runs"] = [r.as_dict() for r in self.runs.values()]
        return out


__getattr__ = renamed(__name__, {"RunRecord": "SimRunRecord", "StageStats": "SimStageStats"}, globals())
