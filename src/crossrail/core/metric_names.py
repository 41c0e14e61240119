"""The one vocabulary of research-cycle metric names: what a placement policy may name and metrics computes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Better = Literal["lower", "higher"]


@dataclass(frozen=True)
class MetricName:
    """A metric a policy may name: its unit, which direction is better, and one line saying what it is."""

    name: str
    unit: str
    better: Better
    summary: str


def _names(*entries: tuple[str, str, Better, str]) -> dict[str, MetricName]:
    return {name: MetricName(name, unit, better, summary) for name, unit, better, summary in entries}


# Definitions and formulas: docs/metrics.md#metrics-by-name. crossrail.metrics.registry computes each one.
METRIC_NAMES: dict[str, MetricName] = _names(
    ("research_cycle_seconds", "s", "lower", "submit to result of runs that succeeded, retries included"),
    ("experiment_queue_seconds", "s", "lower", "time a run waited in its queue, summed over its attempts"),
    ("recovery_seconds", "s", "lower", "failure or preemption to the next attempt's start"),
    ("recompute_seconds", "s", "lower", "time spent redoing steps an earlier attempt had done, per run"),
    ("success_rate", "ratio", "higher", "succeeded / (succeeded + failed)"),
    ("goodput", "ratio", "higher", "chip-hours whose work was kept / chip-hours allocated"),
    ("chip_hours_per_run", "chip-h", "lower", "chip-hours of all attempts per run"),
    ("cost_per_effective_run", "currency", "lower", "cost of all attempts / runs that succeeded"),
    ("tokens_per_second", "tokens/s", "higher", "reported training throughput"),
    ("steps_per_hour", "steps/h", "higher", "steps advanced per running hour, from reports and heartbeats"),
    ("samples_per_second", "samples/s", "higher", "reported RL sample throughput"),
    ("checkpoint_write_seconds", "s", "lower", "reported time to write one checkpoint"),
    ("accelerator_utilization", "ratio", "higher", "model FLOP/s over the chip type's declared peak (MFU)"),
    ("device_busy", "ratio", "higher", "reported share of time the device was busy (NVML)"),
    ("eval_pass_rate", "ratio", "higher", "each run's last reported eval pass rate"),
    ("eval_loss", "loss", "lower", "each run's last reported eval loss"),
    ("learner_idle_seconds", "s", "lower", "reported RL learner idle time per run"),
    ("policy_lag_steps", "steps", "lower", "reported RL policy lag of the samples learnt from"),
    ("backlog_samples_length", "samples", "lower", "reported RL samples waiting to be scored, mean over reports"),
    ("backlog_samples_age_seconds", "s", "lower", "reported age of the oldest sample waiting to be scored"),
    ("backlog_scored_length", "samples", "lower", "reported RL scored samples waiting for the learner"),
    ("backlog_scored_age_seconds", "s", "lower", "reported age of the oldest scored sample waiting for the learner"),
    ("time_to_target_seconds", "s", "lower", "submit to the first time the run's target was met"),
    ("chip_hours_to_target", "chip-h", "lower", "chip-hours spent until the target was met"),
    ("cost_to_target", "currency", "lower", "cost spent until the target was met"),
    ("target_met_rate", "ratio", "higher", "runs that met their target / runs with a target that ended"),
)
