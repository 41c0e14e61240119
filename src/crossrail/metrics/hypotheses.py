"""A placement policy's preferred accelerators as hypotheses, checked against the runs that measured them.

For each stage whose policy prefers `tpu` or `gpu`, the runs of that stage are split by the accelerator their
last attempt ran on: the preferred one, and the other that ran most of the rest. Each metric the policy names
(plus research cycle time and cost per effective run, and cost to target where runs have targets) is compared
with `verdict.change` (bootstrap over runs). Significant differences all in favour of the preferred side support
the hypothesis; all against it contradict it; none (or both ways) cannot tell yet.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crossrail.metrics.comparable import differences, virtual
from crossrail.metrics.registry import METRICS
from crossrail.metrics.runs import RunFacts
from crossrail.metrics.verdict import RESAMPLES, SEED, Change, change, method
from crossrail.spec.policy import PlacementPolicy

ALWAYS = ("research_cycle_seconds", "cost_per_effective_run", "cost_to_target")
SUPPORTED, CONTRADICTED, CANNOT_TELL, UNTESTED = "supported", "contradicted", "cannot tell yet", "no hypothesis"
NOT_COMPARABLE = "not comparable"


@dataclass(frozen=True)
class Finding:
    """What the runs say about one stage's preferred accelerator."""

    stage: str
    preferred: str
    other: str | None
    status: str
    sentence: str
    n_preferred: int = 0
    n_other: int = 0
    changes: tuple[Change, ...] = ()
    """Each metric from the preferred side (before) to the other (after)."""
    runs_needed: int | None = None
    notes: tuple[str, ...] = ()
    """What the finding leaves out or rests on: confounds allowed, metrics not measured and why, virtual pools."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "preferred": self.preferred,
            "other": self.other,
            "status": self.status,
            "sentence": self.sentence,
            "runs": {"preferred": self.n_preferred, "other": self.n_other},
            "runs_needed": self.runs_needed,
            "metrics": [c.as_dict() for c in self.changes],
            "notes": list(self.notes),
        }


def check(
    policy: PlacementPolicy,
    runs: Sequence[RunFacts],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    allow_confounds: bool = False,
) -> list[Finding]:
    """One finding per stage the policy names, in the policy's order."""
    return [
        check_stage(
            str(stage),
            w.preferred_accelerator,
            w.metrics,
            runs,
            resamples=resamples,
            seed=seed,
            allow_confounds=allow_confounds,
        )
        for stage, w in policy.workloads.items()
    ]


def check_stage(
    stage: str,
    preferred: str,
    metrics: Sequence[str],
    runs: Sequence[RunFacts],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    allow_confounds: bool = False,
) -> Finding:
    if preferred not in ("tpu", "gpu"):
        return Finding(stage, preferred, None, UNTESTED, f"{stage} prefers {preferred}: no one accelerator to test")
    mine = [r for r in runs if r.stage == stage and r.last is not None and r.last.accelerator != "-"]
    on_pref = [r for r in mine if r.dimension("accelerator") == preferred]
    others = Counter(r.dimension("accelerator") for r in mine if r.dimension("accelerator") != preferred)
    if not others or not on_pref:
        absent = preferred if not on_pref else ("gpu" if preferred == "tpu" else "tpu")
        none = f"no {stage} runs have run yet" if not mine else f"no {stage} runs on {absent}"
        sentence = f"{stage} on {preferred}: cannot tell yet: {none}; run some on both to compare"
        return Finding(stage, preferred, None, CANNOT_TELL, sentence, len(on_pref), 0)
    other = others.most_common(1)[0][0]
    on_other = [r for r in mine if r.dimension("accelerator") == other]
    confounds = differences(on_pref, on_other)
    notes = [f"confound allowed: {d.sentence()}" for d in confounds]
    if confounds and not allow_confounds:
        what = "; ".join(d.sentence() for d in confounds)
        sentence = (
            f"{stage} on {preferred} vs {other}: not comparable ({what}); run one experiment on both, or pass"
            " --allow-confounds to judge anyway"
        )
        return Finding(stage, preferred, other, NOT_COMPARABLE, sentence, len(on_pref), len(on_other))
    names = [n for n in dict.fromkeys([*metrics, *ALWAYS]) if n in METRICS]
    changes = [change(n, on_pref, on_other, resamples=resamples, seed=seed) for n in names]
    measured = [c for c in changes if _measured(c)]
    for c in changes:
        if not _measured(c) and c.metric in metrics:
            side = preferred if c.before is None else other
            notes.append(f"{c.metric} left out: no {stage} run on {side} has a value for it")
    if virtual(on_pref) or virtual(on_other):
        notes.append("software path only: virtual local pools time crossrail's path, not the accelerators")
    found = _judge(stage, preferred, other, on_pref, on_other, measured)
    return dataclasses.replace(found, notes=tuple(notes))


def _measured(c: Change) -> bool:
    return c.before is not None and c.after is not None and c.change is not None


def _judge(  # noqa: PLR0917 (a finding's parts)
    stage: str, preferred: str, other: str, on_pref: list[RunFacts], on_other: list[RunFacts], cs: list[Change]
) -> Finding:
    n = len(on_pref) + len(on_other)
    for_other = [c for c in cs if c.better is True]
    for_pref = [c for c in cs if c.better is False]
    parts = (stage, preferred, other)
    counts = (len(on_pref), len(on_other), tuple(cs))
    if for_other and not for_pref:
        c = _headline(for_other)
        sentence = f"{stage} on {other} {_phrase(c, preferred)} over {n} runs; consider preferring {other}"
        return Finding(*parts, CONTRADICTED, sentence, *counts)
    if for_pref and not for_other:
        c = _headline(for_pref)
        sentence = f"{stage} prefers {preferred} and the runs agree: on {other} {_phrase(c, preferred)} over {n} runs"
        return Finding(*parts, SUPPORTED, sentence, *counts)
    needed = [c.needed for c in cs if c.needed is not None and not c.significant]
    most = min(needed) if needed else None
    more = f"; about {most} runs on each would tell" if most is not None else ""
    mixed = " (the metrics disagree)" if for_pref and for_other else ""
    sentence = f"{stage} on {preferred} vs {other}: cannot tell yet over {n} runs{mixed}{more}"
    return Finding(*parts, CANNOT_TELL, sentence, *counts, runs_needed=most)


def _headline(changes: list[Change]) -> Change:
    """Cost to target, research cycle, cost per effective run first (what the articles judge by); else the largest."""
    for name in ("cost_to_target", "research_cycle_seconds", "cost_per_effective_run"):
        found = next((c for c in changes if c.metric == name), None)
        if found is not None:
            return found
    return max(changes, key=_strength)


def _strength(c: Change) -> float:
    r = c.ratio() or 1.0
    return max(r, 1 / r) if r > 0 else 0.0


def _phrase(c: Change, preferred: str) -> str:
    """`cost_to_target 1.4× lower than on gpu (95% CI 1.2–1.7×)`, as a ratio of the other side to the preferred."""
    r = c.ratio() or 1.0
    up = r >= 1
    factor = r if up else 1 / r
    ci = ""
    if c.ci is not None:
        lo, hi = sorted((1 + c.ci[0], 1 + c.ci[1]))
        lo, hi = (lo, hi) if up else (1 / hi, 1 / lo)
        ci = f" (95% CI {lo:.2f}–{hi:.2f}×)"
    if c.metric == "cost_to_target":
        return f"reached target {factor:.1f}× {'dearer' if up else 'cheaper'} than on {preferred}{ci}"
    return f"had {c.metric} {factor:.1f}× {'higher' if up else 'lower'} than on {preferred}{ci}"


def describe_method(resamples: int = RESAMPLES, seed: int = SEED) -> str:
    return method(resamples, seed)
