"""Every metric a placement policy may name, as a ratio of per-run sums over a group of runs.

A metric is `Σ numerator(run) / Σ denominator(run)` over the runs that contribute to it (a run returns None
when it has nothing to say, e.g. no cycle time before it succeeded). A mean per run is `(value, 1)`; a rate
is `(successes, tries)`. Because every metric has this shape, a bootstrap over runs only resamples pairs.
Definitions: docs/metrics.md#metrics-by-name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from crossrail.core.metric_names import METRIC_NAMES, MetricName
from crossrail.core.peaks import peak_flops
from crossrail.metrics.runs import AttemptFacts, RunFacts

Pair = tuple[float, float]
PerRun = Callable[[RunFacts], Pair | None]


@dataclass(frozen=True)
class Metric:
    """A metric of the vocabulary and how one run contributes to it."""

    name: MetricName
    per_run: PerRun

    @property
    def higher_is_better(self) -> bool:
        return self.name.better == "higher"

    def pairs(self, runs: Sequence[RunFacts]) -> list[Pair]:
        return [p for r in runs if (p := self.per_run(r)) is not None]

    def value(self, runs: Sequence[RunFacts]) -> float | None:
        """The metric over `runs`, or None when no run contributes (or the denominator is 0)."""
        return ratio(self.pairs(runs))


def ratio(pairs: Sequence[Pair]) -> float | None:
    den = math.fsum(d for _, d in pairs)
    return math.fsum(n for n, _ in pairs) / den if pairs and den > 0 else None


BACKLOG = (
    "backlog_samples_length", "backlog_samples_age_seconds", "backlog_scored_length", "backlog_scored_age_seconds",
)  # fmt: skip
"""An RL pipeline's queues as its learner reports them each step: length and age of the oldest item."""


def _mean(value: Callable[[RunFacts], float | None]) -> PerRun:
    def per_run(run: RunFacts) -> Pair | None:
        v = value(run)
        return None if v is None else (v, 1.0)

    return per_run


def _reported(name: str) -> PerRun:
    """Every sample a run reported counts once: the mean over all reports of the group."""

    def per_run(run: RunFacts) -> Pair | None:
        values = run.values(name)
        return (math.fsum(values), float(len(values))) if values else None

    return per_run


def _summed(name: str) -> PerRun:
    """Each report is an amount since the previous one: a run's total, averaged over runs."""

    def per_run(run: RunFacts) -> Pair | None:
        values = run.values(name)
        return (math.fsum(values), 1.0) if values else None

    return per_run


def _recovery(run: RunFacts) -> Pair | None:
    return (math.fsum(run.recovery_s), float(len(run.recovery_s))) if run.recovery_s else None


def _success(run: RunFacts) -> Pair | None:
    if run.outcome not in ("succeeded", "failed"):
        return None
    return (1.0 if run.outcome == "succeeded" else 0.0, 1.0)


def _goodput(run: RunFacts) -> Pair | None:
    useful = run.useful_chip_hours
    return None if useful is None else (useful, run.chip_hours)


def _chip_hours(run: RunFacts) -> Pair | None:
    return (run.chip_hours, 1.0) if run.attempts else None


def _cost_per_effective_run(run: RunFacts) -> Pair | None:
    if not run.attempts and run.outcome != "succeeded":
        return None
    return (run.cost, 1.0 if run.outcome == "succeeded" else 0.0)


def _steps_per_hour(run: RunFacts) -> Pair | None:
    """Reported `steps_per_hour` where the run reports it, else steps advanced between heartbeats."""
    reported = _reported("steps_per_hour")(run)
    if reported is not None:
        return reported
    steps = hours = 0.0
    for a in run.attempts:
        if a.first_beat is not None and a.last_beat is not None and a.last_beat[0] > a.first_beat[0]:
            steps += max(0, a.last_beat[1] - a.first_beat[1])
            hours += (a.last_beat[0] - a.first_beat[0]) / 3600
    return (steps, hours) if hours > 0 else None


def _utilization(run: RunFacts) -> Pair | None:
    """Model FLOP/s achieved over the declared peak of its chips at its precision (MFU, one peak per chip type);
    on a virtual local pool, over the host peak its trainer measured (`utilization_peak` says which)."""
    last = run.last
    achieved = run.values("model_flops_per_second")
    peak = utilization_peak(last)[0] if last is not None else None
    if not achieved or peak is None:
        return None
    return (math.fsum(achieved) / peak, float(len(achieved)))


def utilization_peak(attempt: AttemptFacts) -> tuple[float | None, str]:
    """(peak FLOP/s of the attempt's chips, where it comes from): the chip type's declared peak × chips (its pool's
    `peak_tflops` where the fleet declares one, else the vendors' table); on a virtual pool the host's peak as the
    trainer measured it; None when neither is known."""
    if attempt.virtual:
        return attempt.measured_peak_flops, "host-measured peak (virtual pool)"
    per_chip = peak_flops(attempt.chip_type, attempt.precision, attempt.peak_tflops)
    if per_chip is None or attempt.chips <= 0:
        return None, f"no declared peak for chip type {attempt.chip_type}"
    by = f"pool {attempt.pool}'s peak_tflops" if attempt.peak_tflops else f"declared peak of {attempt.chip_type}"
    return per_chip * attempt.chips, f"{by} at {attempt.precision}"


def _last(name: str) -> PerRun:
    """Each run's last own value, else the last an eval of its checkpoints credited to it."""
    return _mean(lambda run: run.score(name))


def _target_met(run: RunFacts) -> Pair | None:
    if run.target is None:
        return None
    if run.target_met_ts is not None:
        return (1.0, 1.0)
    return (0.0, 1.0) if run.outcome != "active" else None


_PER_RUN: dict[str, PerRun] = {
    "research_cycle_seconds": _mean(lambda run: run.cycle_s),
    "experiment_queue_seconds": _mean(lambda run: run.queue_s),
    "recovery_seconds": _recovery,
    "recompute_seconds": _mean(lambda run: run.recompute_s),
    "success_rate": _success,
    "goodput": _goodput,
    "chip_hours_per_run": _chip_hours,
    "cost_per_effective_run": _cost_per_effective_run,
    "tokens_per_second": _reported("tokens_per_second"),
    "steps_per_hour": _steps_per_hour,
    "samples_per_second": _reported("samples_per_second"),
    "checkpoint_write_seconds": _reported("checkpoint_write_seconds"),
    "accelerator_utilization": _utilization,
    "device_busy": _reported("device_busy"),
    "eval_pass_rate": _last("eval_pass_rate"),
    "eval_loss": _last("eval_loss"),
    "learner_idle_seconds": _summed("learner_idle_seconds"),
    "policy_lag_steps": _reported("policy_lag_steps"),
    **{name: _reported(name) for name in BACKLOG},
    "time_to_target_seconds": _mean(lambda run: run.time_to_target_s),
    "chip_hours_to_target": _mean(lambda run: run.chip_hours_to_target),
    "cost_to_target": _mean(lambda run: run.cost_to_target),
    "target_met_rate": _target_met,
}

SAMPLE_NAMES = frozenset(
    {
        "tokens_per_second", "steps_per_hour", "samples_per_second", "checkpoint_write_seconds",
        "model_flops_per_second", "device_busy", "eval_pass_rate", "eval_loss", "learner_idle_seconds",
        "policy_lag_steps", *BACKLOG,
    }
)  # fmt: skip
"""The reported metrics these computations read (besides each run's target metric)."""

METRICS: dict[str, Metric] = {name: Metric(METRIC_NAMES[name], per_run) for name, per_run in _PER_RUN.items()}
"""The registry: metric name -> Metric, exactly the names of crossrail.core.metric_names.METRIC_NAMES."""

assert METRICS.keys() == METRIC_NAMES.keys(), "every metric name has one computation, and no other"
