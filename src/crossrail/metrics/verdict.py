"""Before/after verdicts: bootstrap intervals over runs, and how many runs a change needs to be seen.

Method (stated in every verdict): each metric is a ratio of per-run sums (crossrail.metrics.registry); the
relative change `after / before − 1` is recomputed on RESAMPLES resamples of the runs of each side, drawn
with replacement from a fixed seed, and its 2.5th and 97.5th percentiles are the 95% interval. A change
is significant when the interval excludes 0. Runs needed per side come from a normal-approximation power
calculation (80% power, two-sided alpha 0.05) with the observed spread of each side's linearised per-run
values and the observed effect: n = (z₀.₉₇₅ + z₀.₈)² (s_before² + s_after²) / (after − before)².
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from crossrail.metrics.distribution import percentile
from crossrail.metrics.registry import METRICS, Metric, Pair, ratio
from crossrail.metrics.runs import RunFacts

RESAMPLES = 2000
SEED = 0
ALPHA = 0.05
POWER = 0.8
CYCLE = "research_cycle_seconds"
EXPLAIN = (
    "experiment_queue_seconds",
    "tokens_per_second",
    "steps_per_hour",
    "recovery_seconds",
    "success_rate",
    "goodput",
    "cost_per_effective_run",
    "cost_to_target",
)
"""Shown beside research cycle time, with their intervals, to explain it."""
THROUGHPUT = ("tokens_per_second", "steps_per_hour", "samples_per_second")


def method(resamples: int = RESAMPLES, seed: int = SEED) -> str:
    return (
        f"bootstrap over runs, {resamples:,} resamples, seed {seed}, 95% percentile interval of the relative change;"
        f" runs needed: normal approximation, {POWER:.0%} power at alpha {ALPHA}"
    )


@dataclass(frozen=True)
class Change:
    """One metric before and after: values, relative change with its 95% interval, and runs behind each side."""

    metric: str
    before: float | None
    after: float | None
    n_before: int
    n_after: int
    change: float | None
    """after / before − 1; None when either side has no value (or before is 0)."""
    ci: tuple[float, float] | None
    needed: int | None
    """Runs per side the observed effect needs to be significant; None when it cannot be said."""
    higher_is_better: bool

    @property
    def significant(self) -> bool:
        return self.ci is not None and (self.ci[0] > 0 or self.ci[1] < 0)

    @property
    def better(self) -> bool | None:
        """Whether after is better than before, when the change is significant."""
        if not self.significant or self.change is None:
            return None
        return (self.change > 0) == self.higher_is_better

    @property
    def n(self) -> int:
        return min(self.n_before, self.n_after)

    def ratio(self) -> float | None:
        return None if self.change is None else 1 + self.change

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "before": self.before,
            "after": self.after,
            "n_before": self.n_before,
            "n_after": self.n_after,
            "change": self.change,
            "ci95": list(self.ci) if self.ci is not None else None,
            "significant": self.significant,
            "better": self.better,
            "runs_needed": self.needed,
        }


@dataclass(frozen=True)
class Verdict:
    """Research cycle time's change, in words, with the other metrics as explanation."""

    sentence: str
    cycle: Change
    explain: list[Change] = field(default_factory=list)
    method: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.sentence,
            "research_cycle": self.cycle.as_dict(),
            "explain": [c.as_dict() for c in self.explain],
            "method": self.method,
        }


def change(
    metric: Metric | str,
    before: Sequence[RunFacts],
    after: Sequence[RunFacts],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Change:
    """One metric's change from `before` to `after` with a bootstrap interval (deterministic for a seed)."""
    m = METRICS[metric] if isinstance(metric, str) else metric
    b, a = m.pairs(before), m.pairs(after)
    vb, va = ratio(b), ratio(a)
    rel = va / vb - 1 if vb and va is not None else None
    ci = None
    if rel is not None and len(b) > 1 and len(a) > 1:
        rng = random.Random(seed)
        draws = []
        for _ in range(resamples):
            rb, ra = ratio(rng.choices(b, k=len(b))), ratio(rng.choices(a, k=len(a)))
            if rb and ra is not None:
                draws.append(ra / rb - 1)
        if draws:
            ci = (percentile(draws, 2.5), percentile(draws, 97.5))
    needed = _needed(b, a) if vb is not None and va is not None else None
    return Change(m.name.name, vb, va, len(b), len(a), rel, ci, needed, m.higher_is_better)


def _needed(b: Sequence[Pair], a: Sequence[Pair]) -> int | None:
    """Runs per side for 80% power at alpha 0.05, from each side's spread and the observed effect."""
    sb, sa = _spread(b), _spread(a)
    vb, va = ratio(b), ratio(a)
    if sb is None or sa is None or vb is None or va is None:
        return None
    effect = va - vb
    if effect == 0:
        return None
    z = NormalDist().inv_cdf(1 - ALPHA / 2) + NormalDist().inv_cdf(POWER)
    return max(2, math.ceil(z**2 * (sb**2 + sa**2) / effect**2))


def _spread(pairs: Sequence[Pair]) -> float | None:
    """Standard deviation of the linearised per-run values (n_i − R d_i) / mean(d) of a ratio R = Σn / Σd."""
    r = ratio(pairs)
    if r is None or len(pairs) < 2:
        return None
    mean_d = math.fsum(d for _, d in pairs) / len(pairs)
    z = [(n - r * d) / mean_d for n, d in pairs]
    mean_z = math.fsum(z) / len(z)
    return math.sqrt(math.fsum((v - mean_z) ** 2 for v in z) / (len(z) - 1))


def compare(
    before: Sequence[RunFacts],
    after: Sequence[RunFacts],
    *,
    explain: Sequence[str] = EXPLAIN,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Verdict:
    """Did research cycle time change from `before` to `after`? One sentence, with the evidence."""
    cycle = change(CYCLE, before, after, resamples=resamples, seed=seed)
    others = [change(name, before, after, resamples=resamples, seed=seed) for name in explain]
    shown = [c for c in others if c.before is not None and c.after is not None]
    return Verdict(_sentence(cycle, {c.metric: c for c in shown}), cycle, shown, method(resamples, seed))


def _sentence(cycle: Change, others: dict[str, Change]) -> str:
    if cycle.before is None or cycle.after is None or cycle.change is None:
        side = "before" if cycle.before is None else "after"
        return f"cannot judge the research cycle: no run {side} succeeded (n too small: 0 runs; need at least 2 a side)"
    queue = others.get("experiment_queue_seconds")
    queue_rose = queue is not None and queue.significant and (queue.change or 0) > 0
    if cycle.significant:
        lo, hi = sorted((abs(cycle.ci[0]), abs(cycle.ci[1]))) if cycle.ci else (0.0, 0.0)
        word = "shorter" if cycle.change < 0 else "longer"
        text = f"research cycle {word} by {_pct(abs(cycle.change))} (95% CI {lo * 100:.0f}–{_pct(hi)})"
        if word == "longer" and queue_rose and queue is not None:
            text += f": queue time rose {_times(queue)}"
        return text
    faster = next((others[t] for t in THROUGHPUT if t in others and others[t].better), None)
    if faster is not None and faster.change is not None:
        why = f": queue time rose {_times(queue)}" if queue_rose and queue is not None else ""
        return f"throughput up {_pct(faster.change)} but cycle not shorter{why}"
    interval = f", 95% CI {_pct(cycle.ci[0], sign=True)} to {_pct(cycle.ci[1], sign=True)}" if cycle.ci else ""
    text = f"no significant change in research cycle ({_pct(cycle.change, sign=True)}{interval})"
    if cycle.n < 2:
        text += f" (n too small: {cycle.n} runs; need at least 2 a side to measure a spread)"
    elif cycle.needed is not None and cycle.needed > cycle.n:
        text += f" (n too small: {cycle.n} runs; need about {cycle.needed})"
    return text


def _pct(x: float, *, sign: bool = False) -> str:
    return f"{x * 100:+.0f}%" if sign else f"{abs(x) * 100:.0f}%"


def _times(c: Change) -> str:
    r = c.ratio()
    return f"{r:.1f}×" if r is not None else "?"
