"""The pool to place a run on under its objective, with the reason: the preferred accelerator as a strong
prior, and hysteresis before a placed run moves (`estimate_placements`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from crossrail.core import format_duration, format_money
from crossrail.scheduling.scoring import Candidate, PlacementWork, PoolInfo, candidates


@dataclass(frozen=True)
class Choice:
    """The pool picked for a run, why, and every candidate (best first)."""

    pool: str | None
    reason: str
    candidates: tuple[Candidate, ...]
    objective: str
    moved: bool = False

    def candidate(self, pool: str) -> Candidate | None:
        return next((c for c in self.candidates if c.pool == pool), None)

    def as_dict(self) -> dict[str, object]:
        return {
            "pool": self.pool,
            "reason": self.reason,
            "objective": self.objective,
            "moved": self.moved,
            "candidates": [c.as_dict() for c in self.candidates],
        }


def estimate_placements(
    work: PlacementWork,
    pools: Iterable[PoolInfo],
    waits: Mapping[str, float],
    *,
    hysteresis: float = 0.1,
    min_gain_s: float = 0.0,
    prefer_margin: float = 0.25,
) -> Choice:
    """Every pool's terms for `work` and the pool to place it on under its objective, with the reason.

    `waits` holds the predicted queue wait per pool (pools absent cannot hold it now). The preferred
    accelerator (`prefer` tpu/gpu/cpu) is a strong prior: another pool wins only when its score beats the
    best preferred pool's by more than `prefer_margin` (a fraction) and it finishes at least `min_gain_s`
    sooner or costs less. A run already placed (`current`) moves only when another pool beats it by more
    than `hysteresis` under the same rule, or when its pool can no longer hold it. `mixed` behaves like
    `any` for a single-part run.
    """
    ranked = candidates(work, pools, waits)
    eligible = [c for c in ranked if c.eligible]
    retry = ""
    if work.avoid is not None and any(c.pool != work.avoid for c in eligible):
        if any(c.pool == work.avoid for c in eligible):
            retry = f"retry moved off {work.avoid}, where the previous attempt ended; "
        eligible = [c for c in eligible if c.pool != work.avoid]
    objective = work.objective
    if not eligible:
        why = "; ".join(f"{c.pool}: {c.note}" for c in ranked) or "the fleet has no pools"
        return Choice(None, f"no pool can take the run ({why})", tuple(ranked), objective, work.current is not None)
    best = eligible[0]
    current = next((c for c in eligible if c.pool == work.current), None)
    if current is not None:
        margin = (prefer_margin, _preferred(work, eligible))
        return _stay_or_move(
            work, best, current, tuple(ranked), hysteresis=hysteresis, margin=margin, min_gain_s=min_gain_s
        )
    if work.current is not None:
        gone = next((c for c in ranked if c.pool == work.current), None)
        why = gone.note if gone is not None and gone.note else "no longer in the fleet"
        if work.current == work.avoid:
            why = "the previous attempt ended there"
        reason = f"re-placed from {work.current} ({why}): {_terms(best)}"
        return Choice(best.pool, reason, tuple(ranked), objective, True)
    prior = _preferred(work, eligible)
    if not prior:
        lead = f"no other {work.prefer} pool" if retry else f"no {work.prefer} pool can take it"
        lead = f"{retry}{lead}; " if work.prefer in ("tpu", "gpu", "cpu") else retry
        reason = f"{lead}best {_objective_words(objective)}: {_terms(best)}"
        return Choice(best.pool, reason, tuple(ranked), objective)
    kept = prior[0]
    if best is not kept and _clearly_better(best, kept, prefer_margin, min_gain_s):
        reason = (
            f"{retry}left preferred {work.prefer}{work.prefer_source}: {best.pool} {_gain(best, kept, objective)} "
            f"than {kept.pool} ({_terms(best)} vs {_terms(kept)})"
        )
        return Choice(best.pool, reason, tuple(ranked), objective)
    reason = f"{retry}{work.prefer} preferred{work.prefer_source}: {_terms(kept)}"
    if best is not kept:
        reason += f"; {best.pool} gains less than the {prefer_margin:.0%} margin ({_terms(best)})"
    return Choice(kept.pool, reason, tuple(ranked), objective)


def _preferred(work: PlacementWork, eligible: list[Candidate]) -> list[Candidate]:
    """The eligible pools of the preferred accelerator, best first; none when the run prefers none."""
    return [c for c in eligible if c.accelerator == work.prefer] if work.prefer in ("tpu", "gpu", "cpu") else []


def _stay_or_move(
    work: PlacementWork,
    best: Candidate,
    current: Candidate,
    ranked: tuple[Candidate, ...],
    *,
    hysteresis: float,
    margin: tuple[float, list[Candidate]],
    min_gain_s: float,
) -> Choice:
    """The rule at every re-placement (resume, retry without fault, replan), as at first placement:

    1. leaving the preferred accelerator needs the `prefer_margin` over the best preferred pool; a pool
       that gains less is not a target, and the best preferred pool is;
    2. any move needs the hysteresis over the pool the run holds.
    """
    objective = work.objective
    prefer_margin, prior = margin
    target, held = best, ""
    if prior and best.accelerator != work.prefer and not _clearly_better(best, prior[0], prefer_margin, min_gain_s):
        target = prior[0]
        held = f"; {best.pool} gains less than the {prefer_margin:.0%} margin for leaving preferred {work.prefer}"
        held += f" ({_terms(best)})"
    if target is not current and _clearly_better(target, current, hysteresis, min_gain_s):
        rule = f"beyond the {hysteresis:.0%} hysteresis"
        if current.accelerator == work.prefer and target.accelerator != work.prefer:
            rule += f" and the {prefer_margin:.0%} margin for leaving preferred {work.prefer}"
        reason = (
            f"re-placed from {current.pool}: {target.pool} {_gain(target, current, objective)} "
            f"({_terms(target)} vs {_terms(current)}; {rule})"
        )
        return Choice(target.pool, reason, ranked, objective, True)
    reason = f"stays on {current.pool}: {_terms(current)}{held}"
    if target is not current:
        reason += f"; {target.pool} gains less than the {hysteresis:.0%} hysteresis ({_terms(target)})"
    return Choice(current.pool, reason, ranked, objective)


def _clearly_better(new: Candidate, old: Candidate, hysteresis: float, min_gain_s: float) -> bool:
    """`new` beats `old` by more than the hysteresis, and finishes `min_gain_s` sooner or costs less."""
    a, b = new.score, old.score
    if a == b == 0.0:  # free pools: time decides where price does not
        a, b = new.total_s, old.total_s
    if a is None or b is None or a >= b * (1.0 - hysteresis):
        return False
    sooner = (old.total_s or 0.0) - (new.total_s or 0.0)
    cheaper = (old.cost or 0.0) - (new.cost or 0.0)
    return sooner >= min_gain_s or cheaper > 0


def _objective_words(objective: str) -> str:
    return {"cost": "cost", "throughput_per_cost": "throughput per cost"}.get(objective, "time to result")


def _terms(c: Candidate) -> str:
    """`pool result in T (wait W, run R[, recovery V]), $C`: the terms a reason quotes."""
    recovery = f", recovery {_hours(c.recovery_s)}" if c.recovery_s >= 0.5 else ""
    arrives = f", provisioning {_hours(c.provisioning_s)}" if c.provisioning_s >= 0.5 else ""
    price = format_money(c.cost, c.currency) if c.cost is not None else "?"
    run = f"run {_hours(c.run_s)}{recovery}"
    return f"{c.pool} result in {_hours(c.total_s)} (wait {_hours(c.wait_s)}{arrives}, {run}), {price}"


def _gain(new: Candidate, old: Candidate, objective: str) -> str:
    sooner = (old.total_s or 0.0) - (new.total_s or 0.0)
    cheaper = (old.cost or 0.0) - (new.cost or 0.0)
    parts = []
    if sooner > 0:
        parts.append(f"finishes {_hours(sooner)} sooner")
    if cheaper > 0:
        parts.append(f"costs {format_money(cheaper, new.currency)} less")
    if not parts:
        parts.append(f"scores better on {_objective_words(objective)}")
    return " and ".join(parts)


def _hours(seconds: float | None) -> str:
    return "?" if seconds is None else format_duration(seconds)
