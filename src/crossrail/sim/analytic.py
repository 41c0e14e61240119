"""Closed-form useful fraction of one run under exponential failures, checkpoints and restarts.

Model (the one the simulator implements): the run computes tau seconds, checkpoints for delta, repeats.
Interruptions arrive at rate 1/M while it computes or checkpoints; each one loses the work since the last
completed checkpoint and costs R seconds (detect + reschedule + restore) during which nothing fails
(the failure clock starts again when the run computes again). Renewal-reward over one segment of length
s = tau + delta: the number of failed tries is geometric with success probability e^(-s/M), so

    E[time per segment] = s + (e^(s/M) - 1) (R + E[X | X < s])
                        = (M + R) (e^(s/M) - 1)                               (exact)

    goodput = tau / ((M + R) (e^((tau+delta)/M) - 1))                         `expected_goodput`

Expanding e^(s/M) - 1 = s/M (1 + s/(2M) + ...) gives the first-order model

    goodput ~ tau/(tau+delta) * (1 - (tau+delta)/(2M) - R/M)                   `first_order_goodput`

whose optimum over tau is Young's sqrt(2 delta M). Daly's model also lets failures strike during the
restart, which multiplies the exact denominator by M e^(R/M) / (M + R) (1.000 4 for R = 300 s, M = 3.1 h);
`daly_goodput` gives it for comparison. An elastic run that shrinks instead of restarting loses no work,
pauses P per interruption and runs without the failed hosts for their repair time:

    goodput ~ tau/(tau+delta) * M/(M+P) * (1 - lost_hosts * repair / (M * hosts))      `elastic_goodput`

For a run of N chips with per-chip MTBF m, M = m / N, so the best interval is near sqrt(2 delta m / N).

Where no closed form exists (Weibull gaps, whose age restarts with the run), `renewal_goodput` draws the same
model gap by gap, with checkpoints in closed form between interruptions (`checkpointing.Stretch`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crossrail.sim.checkpointing import Cadence, Stretch
from crossrail.sim.failures import FailureModel


def _check(tau_s: float, delta_s: float, mtbf_s: float, restart_s: float) -> None:
    if not (tau_s > 0 and delta_s >= 0 and mtbf_s > 0 and restart_s >= 0):
        raise ValueError(
            f"need tau > 0, delta >= 0, MTBF > 0, restart >= 0 (got tau={tau_s}, delta={delta_s}, "
            f"M={mtbf_s}, R={restart_s})"
        )


def expected_goodput(tau_s: float, delta_s: float, mtbf_s: float, restart_s: float) -> float:
    """Exact useful fraction of wall time under exponential failures (renewal-reward, see module doc)."""
    _check(tau_s, delta_s, mtbf_s, restart_s)
    if math.isinf(mtbf_s):
        return tau_s / (tau_s + delta_s) if math.isfinite(tau_s) else 1.0
    if math.isinf(tau_s):
        return 0.0
    return tau_s / ((mtbf_s + restart_s) * math.expm1((tau_s + delta_s) / mtbf_s))


def first_order_goodput(tau_s: float, delta_s: float, mtbf_s: float, restart_s: float) -> float:
    """The first-order model tau/(tau+delta) * (1 - (tau+delta)/(2M) - R/M), floored at 0."""
    _check(tau_s, delta_s, mtbf_s, restart_s)
    s = tau_s + delta_s
    return max(tau_s / s * (1.0 - s / (2.0 * mtbf_s) - restart_s / mtbf_s), 0.0)


def daly_goodput(tau_s: float, delta_s: float, mtbf_s: float, restart_s: float) -> float:
    """Daly's exact model, in which failures may also strike during the restart."""
    _check(tau_s, delta_s, mtbf_s, restart_s)
    return tau_s / (mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1((tau_s + delta_s) / mtbf_s))


def elastic_goodput(
    tau_s: float, delta_s: float, mtbf_s: float, pause_s: float, *, hosts: int = 1, lost_hosts: int = 0,
    repair_s: float = 0.0,
) -> float:  # fmt: skip
    """Useful fraction of an elastic run that shrinks and continues (no rollback), see module doc."""
    _check(tau_s, delta_s, mtbf_s, pause_s)
    away = min(lost_hosts * repair_s / (mtbf_s * hosts), 1.0) if hosts > 0 else 0.0
    return tau_s / (tau_s + delta_s) * mtbf_s / (mtbf_s + pause_s) * (1.0 - away)


def renewal_goodput(
    failures: FailureModel, chips: int, hosts: int, *, tau_s: float, delta_s: float, restart_s: float, work_s: float
) -> float:
    """Monte-Carlo useful fraction of one rigid run of `work_s` work under any failure law of `failures`.

    Each attempt computes from its last checkpoint with age 0; an interruption after `gap` keeps the work of
    the checkpoints completed by then and costs `restart_s` during which nothing fails. O(interruptions).
    """
    if not (work_s > 0 and restart_s >= 0):
        raise ValueError(f"need work > 0 and restart >= 0 (got work={work_s}, restart={restart_s})")
    cadence, done, wall = Cadence(tau_s, delta_s), 0.0, 0.0
    while True:
        stretch = Stretch(cadence)
        finish = stretch.finish_in_s(work_s - done)
        gap = failures.next_interruption_s(chips, hosts)
        if gap >= finish:
            return work_s / (wall + finish)
        done += stretch.at(gap).committed_work_s
        wall += gap + restart_s


def best_tau_first_order(delta_s: float, mtbf_s: float) -> float:
    """Where the first-order model peaks: sqrt(2 delta M) (Young)."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


@dataclass(frozen=True)
class PublishedRun:
    """A training run's reported scale and interruptions, from which its job MTBF follows."""

    name: str
    chips: int
    days: float
    interruptions: int
    source: str

    @property
    def duration_s(self) -> float:
        return self.days * 86_400.0

    @property
    def mtbf_s(self) -> float:
        """Job MTBF: wall time / unexpected interruptions."""
        return self.duration_s / self.interruptions

    @property
    def chip_mtbf_s(self) -> float:
        """Per-chip MTBF that gives this job MTBF (exponential: chips / M_chip = 1 / M_job)."""
        return self.mtbf_s * self.chips


LLAMA3_405B = PublishedRun(
    name="Llama 3 405B pre-training",
    chips=16_384,
    days=54.0,
    interruptions=419,
    source="The Llama 3 Herd of Models (Meta, 2024), section 3.3.4: 419 unexpected interruptions in a "
    "54-day snapshot on 16,384 H100 GPUs; >90% effective training time",
)
