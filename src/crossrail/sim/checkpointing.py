"""Checkpoint cost, interval choice (fixed, Young, Daly, adaptive), recovery plans and progress in closed form.

A run computes for tau seconds, writes a blocking checkpoint for delta seconds, and repeats. Nothing here
simulates checkpoints one by one: `Cadence` and `Stretch` say, for any stretch of uninterrupted running,
how much work was computed and how much of it a completed checkpoint covers, so a run that checkpoints
every ten minutes for two months costs the simulator one event per interruption, not one per checkpoint.

Intervals (M: the run's MTBF, delta: the checkpoint cost):
  Young (1974)   tau = sqrt(2 delta M)
  Daly (2006)    tau = sqrt(2 delta M) [1 + (1/3) sqrt(delta/(2M)) + (1/9) delta/(2M)] - delta   for delta < 2M
                 tau = M                                                                         otherwise
                 (J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps",
                 FGCS 22(3), 2006, eq. 37; with delta = 5 min it gives 116.7, 56.7 and 9.14 min for
                 M = 24 h, 6 h and 15 min, the figures of the paper.)
  adaptive       Daly with M re-estimated from the interruptions the run has seen (`MtbfEstimator`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from crossrail.core.renamed import renamed
from crossrail.errors import Problem, ProblemCode, SpecError

IntervalKind = Literal["fixed", "young", "daly", "adaptive"]
_SOURCE = "checkpoint"


@dataclass(frozen=True)
class CheckpointModel:
    """How a run checkpoints and recovers.

    `cost_s` is the blocking checkpoint cost delta; or give `size_bytes` and `bandwidth_bps` (delta = size /
    bandwidth); with neither, checkpoints are free and continuous (nothing is ever lost to a rollback).
    A restart costs detect_s + reschedule_s + restore_s (plus whatever queue wait the simulation measures).
    An elastic run (`SimJob.elastic`, a spec's `resources.min_chips`) that keeps at least its minimum hosts
    shrinks instead: it pauses detect_s + shrink_s, keeps its uncommitted work (the failed host's state is
    rebuilt from its data-parallel peers) and runs at reduced speed until the host returns from repair.
    `assumed_mtbf_s` is the MTBF the chooser believes before it sees any interruption (None: the true
    run MTBF of the failure model); adaptive intervals correct a wrong belief from what they observe.
    """

    cost_s: float | None = None
    size_bytes: float | None = None
    bandwidth_bps: float | None = None
    interval: IntervalKind = "daly"
    interval_s: float | None = None
    restore_s: float = 0.0
    detect_s: float = 0.0
    reschedule_s: float = 0.0
    shrink_s: float = 0.0
    assumed_mtbf_s: float | None = None

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise SpecError(problems)

    @property
    def delta_s(self) -> float:
        """The blocking cost of one checkpoint, in seconds."""
        if self.cost_s is not None:
            return self.cost_s
        if self.size_bytes is not None and self.bandwidth_bps is not None:
            return self.size_bytes / self.bandwidth_bps
        return 0.0

    @property
    def restart_s(self) -> float:
        """Downtime of a restart from the last checkpoint, before any queue wait: detect + reschedule + restore."""
        return self.detect_s + self.reschedule_s + self.restore_s

    @property
    def shrink_pause_s(self) -> float:
        """Downtime of an elastic shrink: detect + reconfigure."""
        return self.detect_s + self.shrink_s


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _nonneg(path: str, value: float | None) -> list[Problem]:
    if value is None or (_number(value) and value >= 0):
        return []
    return [Problem(_SOURCE, path, f"must be a finite number >= 0 (got {value!r})", code=ProblemCode.BAD_VALUE)]


def _problems(spec: CheckpointModel) -> list[Problem]:
    found: list[Problem] = []
    for name in ("cost_s", "size_bytes", "restore_s", "detect_s", "reschedule_s", "shrink_s"):
        found += _nonneg(name, getattr(spec, name))
    for name in ("bandwidth_bps", "interval_s", "assumed_mtbf_s"):
        value = getattr(spec, name)
        if value is not None and not (_number(value) and value > 0):
            found.append(
                Problem(_SOURCE, name, f"must be a finite number > 0 (got {value!r})", code=ProblemCode.BAD_VALUE)
            )
    if spec.cost_s is not None and (spec.size_bytes is not None or spec.bandwidth_bps is not None):
        found.append(
            Problem(
                _SOURCE,
                "cost_s",
                "given together with size_bytes/bandwidth_bps",
                fix="give either cost_s, or size_bytes and bandwidth_bps",
                code=ProblemCode.BAD_VALUE,
            )
        )
    if (spec.size_bytes is None) != (spec.bandwidth_bps is None):
        found.append(
            Problem(
                _SOURCE,
                "size_bytes" if spec.size_bytes is None else "bandwidth_bps",
                "missing",
                fix="checkpoint cost = size_bytes / bandwidth_bps needs both",
                code=ProblemCode.MISSING_FIELD,
            )
        )
    if spec.interval not in ("fixed", "young", "daly", "adaptive"):
        found.append(
            Problem(
                _SOURCE,
                "interval",
                f"unknown interval {spec.interval!r}",
                fix="use 'fixed', 'young', 'daly' or 'adaptive'",
                code=ProblemCode.BAD_VALUE,
            )
        )
    if spec.interval == "fixed" and spec.interval_s is None:
        found.append(
            Problem(
                _SOURCE,
                "interval_s",
                "missing for interval 'fixed'",
                fix="give the seconds of computing between checkpoints",
                code=ProblemCode.MISSING_FIELD,
            )
        )
    return found


def young_interval(delta_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum: sqrt(2 delta M)."""
    _check_interval_inputs(delta_s, mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) if math.isfinite(mtbf_s) else math.inf


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (FGCS 2006, eq. 37); M itself once delta >= 2M."""
    _check_interval_inputs(delta_s, mtbf_s)
    if not math.isfinite(mtbf_s):
        return math.inf
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


def _check_interval_inputs(delta_s: float, mtbf_s: float) -> None:
    if not (math.isfinite(delta_s) and delta_s >= 0):
        raise ValueError(f"checkpoint cost must be a finite number >= 0 (got {delta_s})")
    if not mtbf_s > 0:
        raise ValueError(f"MTBF must be > 0 (got {mtbf_s})")


class MtbfEstimator:
    """Running estimate of a run's MTBF from its exposure (seconds running) and interruptions seen.

    The prior counts as `prior_weight` pseudo-interruptions at the assumed MTBF, so one early failure does
    not swing the interval wildly:  M_hat = (exposure + w * M_prior) / (interruptions + w).
    """

    def __init__(self, prior_mtbf_s: float, prior_weight: float = 1.0) -> None:
        self.prior_mtbf_s = prior_mtbf_s
        self.prior_weight = prior_weight
        self.exposure_s = 0.0
        self.interruptions = 0

    def observe(self, exposure_s: float, interrupted: bool) -> None:
        self.exposure_s += exposure_s
        self.interruptions += int(interrupted)

    def mtbf_s(self) -> float:
        if not math.isfinite(self.prior_mtbf_s):
            return math.inf if self.interruptions == 0 else self.exposure_s / self.interruptions
        return (self.exposure_s + self.prior_weight * self.prior_mtbf_s) / (self.interruptions + self.prior_weight)


class IntervalChooser:
    """Chooses the compute interval between checkpoints for a run of a given MTBF."""

    def __init__(self, spec: CheckpointModel) -> None:
        self.spec = spec

    def delta_s(self) -> float:
        return self.spec.delta_s

    def interval_s(self, run_mtbf_s: float, observed_mtbf_s: float | None = None) -> float:
        """Seconds of computing between checkpoints; 0 when checkpoints are free (continuous)."""
        spec, delta = self.spec, self.spec.delta_s
        if spec.interval == "fixed":
            assert spec.interval_s is not None  # validated
            return spec.interval_s
        if delta == 0:
            return 0.0
        believed = spec.assumed_mtbf_s if spec.assumed_mtbf_s is not None else run_mtbf_s
        if spec.interval == "adaptive" and observed_mtbf_s is not None:
            believed = observed_mtbf_s
        if spec.interval == "young":
            return young_interval(delta, believed)
        return daly_interval(delta, believed)

    def estimator(self, run_mtbf_s: float) -> MtbfEstimator:
        """An estimator seeded with the MTBF this chooser believes before observing anything."""
        prior = self.spec.assumed_mtbf_s if self.spec.assumed_mtbf_s is not None else run_mtbf_s
        return MtbfEstimator(prior)


@dataclass(frozen=True)
class Recovery:
    """What a run does after an interruption."""

    kind: Literal["restart", "shrink"]
    downtime_s: float
    """Pause before computing again, not counting any queue wait the simulation measures."""
    keeps_uncommitted: bool
    """Shrink keeps the work computed since the last checkpoint; a restart loses it."""
    hosts_after: int


def plan_recovery(spec: CheckpointModel, hosts: int, hosts_lost: int, min_hosts: int = 1, *, elastic: bool) -> Recovery:
    """Shrink and continue when the run is `elastic` and keeps at least `min_hosts`; else restart."""
    left = hosts - hosts_lost
    if elastic and left >= max(min_hosts, 1):
        return Recovery("shrink", spec.shrink_pause_s, True, left)
    return Recovery("restart", spec.restart_s, False, hosts)


@dataclass(frozen=True)
class Cadence:
    """The repeating pattern: `tau_s` seconds of computing, then `delta_s` of blocking checkpoint.

    Positions are wall seconds from the start of a cycle; tau = inf never checkpoints, tau = 0 (with
    delta = 0) checkpoints continuously.
    """

    tau_s: float
    delta_s: float

    def __post_init__(self) -> None:
        if not (self.tau_s >= 0 and math.isfinite(self.delta_s) and self.delta_s >= 0):
            raise ValueError(f"bad cadence tau={self.tau_s}, delta={self.delta_s}")
        if self.tau_s == 0 and self.delta_s > 0:
            raise ValueError("an interval of 0 needs a checkpoint cost of 0")

    @property
    def period_s(self) -> float:
        return self.tau_s + self.delta_s

    def checkpoints_by(self, position_s: float) -> int:
        """Checkpoints completed by `position_s`."""
        if not math.isfinite(self.tau_s) or self.tau_s == 0:
            return 0
        return math.floor(position_s / self.period_s)

    def compute_by(self, position_s: float) -> float:
        """Seconds of computing done by `position_s`."""
        if not math.isfinite(self.tau_s) or self.delta_s == 0:
            return position_s
        k = self.checkpoints_by(position_s)
        return k * self.tau_s + min(position_s - k * self.period_s, self.tau_s)

    def committed_by(self, position_s: float) -> float:
        """Seconds of computing covered by a checkpoint completed by `position_s`."""
        if self.tau_s == 0:
            return position_s
        return self.checkpoints_by(position_s) * self.tau_s

    def position_of(self, compute_s: float) -> float:
        """The first position at which `compute_s` seconds of computing are done."""
        if compute_s <= 0 or not math.isfinite(self.tau_s) or self.delta_s == 0:
            return max(compute_s, 0.0)
        k = math.ceil(compute_s / self.tau_s) - 1
        return k * self.period_s + (compute_s - k * self.tau_s)


@dataclass(frozen=True)
class StretchState:
    """Where an uninterrupted stretch stands after some elapsed time."""

    computed_work_s: float
    """Work computed during the stretch (work-seconds: wall seconds times speed)."""
    checkpoints: int
    """Checkpoints completed during the stretch."""
    committed_work_s: float
    """Work of the stretch covered by its last completed checkpoint (0 when none completed)."""
    checkpoint_s: float
    """Wall seconds the stretch spent writing checkpoints."""
    phase_s: float
    """Position in the cycle at the end (to continue at another speed without losing the cycle)."""


@dataclass(frozen=True)
class Stretch:
    """Running uninterrupted at `speed` work-seconds per second, from position `phase_s` of a cadence."""

    cadence: Cadence
    speed: float = 1.0
    phase_s: float = 0.0

    def finish_in_s(self, work_s: float) -> float:
        """Wall seconds until `work_s` more work is computed (the run ends there; no final checkpoint)."""
        if work_s <= 0:
            return 0.0
        if self.speed <= 0:
            return math.inf
        c = self.cadence
        return c.position_of(c.compute_by(self.phase_s) + work_s / self.speed) - self.phase_s

    def at(self, elapsed_s: float) -> StretchState:
        c, p0, p1 = self.cadence, self.phase_s, self.phase_s + elapsed_s
        computed = c.compute_by(p1) - c.compute_by(p0)
        checkpoints = c.checkpoints_by(p1) - c.checkpoints_by(p0)
        committed = c.committed_by(p1) - c.compute_by(p0) if checkpoints > 0 or c.tau_s == 0 else 0.0
        return StretchState(
            computed_work_s=computed * self.speed,
            checkpoints=checkpoints,
            committed_work_s=max(committed, 0.0) * self.speed,
            checkpoint_s=elapsed_s - computed,
            phase_s=p1 - c.checkpoints_by(p1) * c.period_s if math.isfinite(c.tau_s) and c.tau_s > 0 else 0.0,
        )


__getattr__ = renamed(__name__, {"CheckpointSpec": "CheckpointModel"}, globals())
