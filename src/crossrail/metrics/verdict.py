"""Before/after verdicts: bootstrap intervals over runs, and how many runs a change needs to be seen.

Method (stated in every verdict): each metric is a ratio of per-run sums (crossrail.metrics.registry); the
relative change `after / before − 1` is recomputed on RESAMPLES resamples of the runs of each side, drawn
with replacement from a fixed seed, and the 95% interval is the bias-corrected and accelerated (BCa) one:
the percentile interval corrected for the resamples' median bias and for the skew a jackknife over the runs
measures, which keeps its coverage on the few runs a side a verdict usually has (Efron 1987). A change is
significant when the interval excludes 0. Below MIN_RUNS succeeded runs a side no verdict is given. Runs
needed per side come from a normal-approximation power calculation (80% power, two-sided alpha 0.05) with
the observed spread of each side's linearised per-run values and the observed effect:
n = (z₀.₉₇₅ + z₀.₈)² (s_before² + s_after²) / (after − before)²; the smallest change detectable with the
runs at hand is (z₀.₉₇₅ + z₀.₈) √(s_before²/n_before + s_after²/n_after) / before.

Before any of this, the two sides must have measured the same work (crossrail.metrics.comparable): a
verdict over confounded sides is refused unless `allow_confounds`, and then names each confound.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from crossrail.core.quantities import format_duration
from crossrail.metrics.comparable import Difference, FleetTimeline, differences, fleet_warnings, virtual
from crossrail.metrics.distribution import percentile
from crossrail.metrics.registry import METRICS, Metric, Pair, ratio
from crossrail.metrics.runs import RunFacts

RESAMPLES = 2000
SEED = 0
ALPHA = 0.05
POWER = 0.8
MIN_RUNS = 3
"""Succeeded runs a side below which no verdict is given: two runs cannot show a spread worth an interval."""
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
        f"bootstrap over runs, {resamples:,} resamples, seed {seed}, 95% BCa interval of the relative change"
        f" (bias-corrected and accelerated, fit for few runs); at least {MIN_RUNS} succeeded runs a side;"
        f" runs needed and smallest detectable change: normal approximation, {POWER:.0%} power at alpha {ALPHA}"
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
    detectable: float | None = None
    """The smallest relative change these runs detect at 80% power (alpha 0.05); None without a spread."""

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
            "detectable_change": self.detectable,
            "before_text": format_value(self.metric, self.before),
            "after_text": format_value(self.metric, self.after),
        }


@dataclass(frozen=True)
class Verdict:
    """Research cycle time's change, in words, with the other metrics as explanation."""

    sentence: str
    cycle: Change
    explain: list[Change] = field(default_factory=list)
    method: str = ""
    confounds: list[Difference] = field(default_factory=list)
    """What differs between the sides' work; a verdict with any is refused unless confounds were allowed."""
    warnings: list[Difference] = field(default_factory=list)
    """The fleet around the runs differing between the sides: capacity, load."""
    refused: bool = False
    software_path_only: bool = False
    """Some runs ran on virtual local pools: the verdict measures crossrail's path, not the accelerators."""
    cycle_definition: str = ""
    """Which research cycle the verdict measured: submission to an evaluation's result, or to success."""
    cost_basis: str = ""
    """Which cost the verdict used: allocated chip-hours, or the fleet's with its idle share."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.sentence,
            "refused": self.refused,
            "confounds": [d.as_dict() for d in self.confounds],
            "warnings": [d.as_dict() for d in self.warnings],
            "software_path_only": self.software_path_only,
            "cycle_definition": self.cycle_definition,
            "cost_basis": self.cost_basis,
            "min_runs": MIN_RUNS,
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
    scale: tuple[float, float] = (1.0, 1.0),
) -> Change:
    """One metric's change from `before` to `after` with a bootstrap interval (deterministic for a seed);
    `scale` multiplies each side's per-run numerators (a cost with the fleet's idle share)."""
    m = METRICS[metric] if isinstance(metric, str) else metric
    b = [(n * scale[0], d) for n, d in m.pairs(before)]
    a = [(n * scale[1], d) for n, d in m.pairs(after)]
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
            ci = _bca(draws, rel, b, a)
    known = vb is not None and va is not None
    needed = _needed(b, a) if known else None
    detectable = _detectable(b, a) if known else None
    return Change(m.name.name, vb, va, len(b), len(a), rel, ci, needed, m.higher_is_better, detectable)


def _bca(draws: list[float], rel: float, b: Sequence[Pair], a: Sequence[Pair]) -> tuple[float, float]:
    """The 95% BCa interval of the relative change: percentiles of the draws moved by bias z0 and skew acc.

    z0 = Φ⁻¹(share of draws below the estimate, ties halved); acc = Σ U³ / (6 (Σ U²)^1.5) over the jackknife
    influence values U = (n_g − 1)(mean_g − θ₍g,i₎) of each side g. Without a usable correction (every draw
    on one side of the estimate, no spread in the jackknife) it is the percentile interval.
    """
    below = sum(1 for d in draws if d < rel) + 0.5 * sum(1 for d in draws if d == rel)
    share = below / len(draws)
    if not 0 < share < 1:
        return (percentile(draws, 2.5), percentile(draws, 97.5))
    normal = NormalDist()
    z0 = normal.inv_cdf(share)
    influence = _influence(b, a, side=0) + _influence(a, b, side=1)
    sq = math.fsum(u * u for u in influence)
    acc = math.fsum(u**3 for u in influence) / (6 * sq**1.5) if sq > 0 else 0.0
    bounds = []
    for q in (ALPHA / 2, 1 - ALPHA / 2):
        z = z0 + normal.inv_cdf(q)
        denominator = 1 - acc * z
        level = normal.cdf(z0 + z / denominator) if denominator > 0 else (1.0 if q > 0.5 else 0.0)
        bounds.append(percentile(draws, min(100.0, max(0.0, level * 100))))
    return (bounds[0], bounds[1])


def _influence(own: Sequence[Pair], other: Sequence[Pair], *, side: int) -> list[float]:
    """Jackknife influence values of one side's runs on the relative change (the other side held whole)."""
    n_sum, d_sum = math.fsum(n for n, _ in own), math.fsum(d for _, d in own)
    fixed = ratio(other)
    thetas = []
    for n, d in own:
        rest_d = d_sum - d
        if rest_d == 0 or fixed is None:
            return []
        r = (n_sum - n) / rest_d
        base, new = (r, fixed) if side == 0 else (fixed, r)
        if not base:
            return []
        thetas.append(new / base - 1)
    mean = math.fsum(thetas) / len(thetas)
    return [(len(thetas) - 1) * (mean - t) for t in thetas]


def _detectable(b: Sequence[Pair], a: Sequence[Pair]) -> float | None:
    """The smallest relative change the runs at hand detect at 80% power, two-sided alpha 0.05."""
    sb, sa, vb = _spread(b), _spread(a), ratio(b)
    if sb is None or sa is None or not vb:
        return None
    z = NormalDist().inv_cdf(1 - ALPHA / 2) + NormalDist().inv_cdf(POWER)
    return z * math.sqrt(sb**2 / len(b) + sa**2 / len(a)) / abs(vb)


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
    fleet: FleetTimeline | None = None,
    allow_confounds: bool = False,
    cost: str = "allocated",
) -> Verdict:
    """Did research cycle time change from `before` to `after`? One sentence, with the evidence.

    Sides that differ in their work (`comparable.differences`) are refused: the sentence says what differs
    and no metric is judged, unless `allow_confounds`, when the verdict is given and names each confound.
    A fleet whose capacity or load differs between the sides' windows is a warning named in the sentence.
    """
    confounds = differences(before, after)
    warnings = fleet_warnings(before, after, fleet) if fleet is not None else []
    software = virtual(before) or virtual(after)
    if confounds and not allow_confounds:
        empty = Change(CYCLE, None, None, len(before), len(after), None, None, None, False)
        what = "; ".join(d.sentence() for d in confounds)
        sentence = (
            f"refused: the sides did not measure the same work ({what}); select runs of one experiment on each"
            " side, or pass --allow-confounds to judge anyway"
        )
        return Verdict(
            sentence,
            empty,
            [],
            method(resamples, seed),
            confounds,
            warnings,
            True,
            software,
            cycle_definition(before, after),
        )
    scale, basis = cost_basis(before, after, fleet, cost)
    cycle = change(CYCLE, before, after, resamples=resamples, seed=seed)
    others = [
        change(name, before, after, resamples=resamples, seed=seed, scale=scale if name.startswith("cost") else (1, 1))
        for name in explain
    ]
    shown = [c for c in others if c.before is not None and c.after is not None]
    sentence = _sentence(cycle, {c.metric: c for c in shown})
    if confounds:
        sentence += f" (confounded: the sides differ in {', '.join(d.what for d in confounds)})"
    if warnings:
        sentence += f"; warning: {'; '.join(d.sentence() for d in warnings)}"
    if software:
        sentence += "; software path only: virtual local pools time crossrail's path, not the accelerators"
    definition = cycle_definition(before, after)
    return Verdict(
        sentence, cycle, shown, method(resamples, seed), confounds, warnings, False, software, definition, basis
    )


COSTS = ("allocated", "fleet")


def cost_basis(
    before: Sequence[RunFacts], after: Sequence[RunFacts], fleet: FleetTimeline | None, cost: str
) -> tuple[tuple[float, float], str]:
    """Each side's cost multiplier and the sentence saying which cost a verdict used.

    `allocated` (the default): the chip-hours the runs held at their prices. `fleet`: the fleet's idle share
    included, each side's cost × chips on offer / chips in use over its window (first submission to last end).
    """
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {', '.join(COSTS)} (got {cost!r})")
    if cost == "allocated":
        return (1.0, 1.0), "cost: the chip-hours the runs were allocated, at their pools' prices"
    factors = [fleet_factor(side, fleet) for side in (before, after)]
    if factors[0] is None or factors[1] is None:
        return (1.0, 1.0), "cost: allocated chip-hours (the fleet's capacity was not recorded over both windows)"
    fb, fa = factors[0], factors[1]
    return (fb, fa), f"cost: the fleet's, idle share included (before ×{fb:.2f}, after ×{fa:.2f} the allocated cost)"


def fleet_factor(runs: Sequence[RunFacts], fleet: FleetTimeline | None) -> float | None:
    """Chips on offer / chips in use over the runs' window (≥ 1); None when either is unknown."""
    starts = [r.submitted_ts for r in runs if r.submitted_ts is not None]
    if fleet is None or not starts:
        return None
    t0, t1 = min(starts), max(r.ended_ts if r.ended_ts is not None else r.now for r in runs)
    offered, busy = fleet.offered(t0, t1), fleet.busy(t0, t1)
    if offered is None or busy <= 0:
        return None
    return max(1.0, offered / busy)


def cycle_definition(before: Sequence[RunFacts], after: Sequence[RunFacts]) -> str:
    """Which research cycle applied: submission → evaluation result where runs were evaluated, else → success."""
    parts = []
    for side, runs in (("before", before), ("after", after)):
        done = [r for r in runs if r.cycle_s is not None]
        evaluated = sum(1 for r in done if r.evaluated)
        if evaluated == len(done):
            how = "submission → evaluation result" if done else "no succeeded run"
        elif evaluated == 0:
            how = "submission → success (no run evaluated)"
        else:
            how = f"submission → evaluation result for {evaluated} of {len(done)} runs, → success for the rest"
        parts.append(f"{side}: {how}")
    return "research cycle: " + "; ".join(parts)


def _sentence(cycle: Change, others: dict[str, Change]) -> str:
    if cycle.before is None or cycle.after is None or cycle.change is None:
        side = "before" if cycle.before is None else "after"
        return (
            f"cannot judge the research cycle: no run {side} succeeded"
            f" (n too small: 0 runs; need at least {MIN_RUNS} a side)"
        )
    if cycle.n < MIN_RUNS:
        return (
            f"cannot judge the research cycle: n too small ({cycle.n_before} succeeded runs before,"
            f" {cycle.n_after} after; need at least {MIN_RUNS} a side)"
        )
    queue = others.get("experiment_queue_seconds")
    queue_rose = queue is not None and queue.significant and (queue.change or 0) > 0
    if cycle.significant:
        lo, hi = sorted((abs(cycle.ci[0]), abs(cycle.ci[1]))) if cycle.ci else (0.0, 0.0)
        word = "shorter" if cycle.change < 0 else "longer"
        text = f"research cycle {word} by {_pct(abs(cycle.change))} (95% CI {lo * 100:.0f}–{_pct(hi)})"
        text += f", {format_value(CYCLE, cycle.before)} → {format_value(CYCLE, cycle.after)}"
        if word == "longer" and queue_rose and queue is not None:
            text += f": queue time rose {_times(queue)}"
        return text
    faster = next((others[t] for t in THROUGHPUT if t in others and others[t].better), None)
    if faster is not None and faster.change is not None:
        why = f": queue time rose {_times(queue)}" if queue_rose and queue is not None else ""
        return f"throughput up {_pct(faster.change)} but cycle not shorter{why}"
    interval = f", 95% CI {_pct(cycle.ci[0], sign=True)} to {_pct(cycle.ci[1], sign=True)}" if cycle.ci else ""
    text = f"no significant change in research cycle ({_pct(cycle.change, sign=True)}{interval})"
    if cycle.needed is not None and cycle.needed > cycle.n:
        text += f" (n too small: {cycle.n} runs; need about {cycle.needed})"
    if cycle.detectable is not None:
        text += f"; these runs detect a change of {_pct(cycle.detectable)} or more"
    return text


def _pct(x: float, *, sign: bool = False) -> str:
    return f"{x * 100:+.0f}%" if sign else f"{abs(x) * 100:.0f}%"


def _times(c: Change) -> str:
    r = c.ratio()
    return f"{r:.1f}×" if r is not None else "?"


RATES = ("success_rate", "goodput", "target_met_rate", "eval_pass_rate", "accelerator_utilization", "device_busy")


def format_value(metric: str, x: float | None) -> str:
    """A metric's value for people: durations as `1h05m`, costs with two decimals, shares as percentages."""
    if x is None:
        return "-"
    if metric.endswith("_seconds"):
        return format_duration(x)
    if metric.startswith("cost"):
        return f"{x:,.2f}"
    if metric in RATES:
        return f"{x * 100:.1f}%"
    if metric.startswith("chip_hours"):
        return f"{x:,.3g} chip-h" if abs(x) < 1000 else f"{x:,.0f} chip-h"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
