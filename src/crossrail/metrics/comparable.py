"""Whether two sides of a verdict measured the same work: the differences that confound it, and the fleet's.

A verdict compares runs. It says something about the change it is asked about (a pool, an accelerator, a
policy) only when the runs of the two sides computed the same thing: the same experiment (its work digest,
`crossrail.spec.work_digest`: the spec without name, team, placement, priority, retries, parent, target,
checkpoint directory, commit and dataset version), the same arguments, code commit and dataset version, and
the same framework, unless the framework is the one each side's accelerator implies (JAX on TPU, PyTorch on
GPU: a move to TPU brings its framework with it). Each difference is a **confound**: `compare` and `policy
check` refuse a verdict over one unless asked to allow it, and then name each.

The fleet around the runs is a **warning**, never a refusal: chips on offer or chips in use that differ by
more than FLEET_TOLERANCE between the two sides' windows (first submission to last end) move queue time and
the research cycle with them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from crossrail.core.events import Event, EventType
from crossrail.metrics.runs import RunFacts

IMPLIED_FRAMEWORK = {"tpu": "jax", "gpu": "torch"}
"""The framework an accelerator implies: a framework difference that follows the accelerator is no confound."""
FLEET_TOLERANCE = 0.2
"""Relative difference in mean chips on offer (or in use) between the sides' windows beyond which a verdict warns."""
SHOWN = 3
"""Values of a side named in a difference before `…`."""


@dataclass(frozen=True)
class Difference:
    """One way the two sides differ: what, each side's distinct values, and whether it confounds the verdict."""

    what: str
    before: tuple[str, ...]
    after: tuple[str, ...]
    confound: bool = True
    note: str = ""

    def sentence(self) -> str:
        if self.note:
            return self.note
        verb = "differ" if self.what.endswith("s") else "differs"
        return f"{self.what} {verb}: before {_values(self.before)}, after {_values(self.after)}"

    def as_dict(self) -> dict[str, object]:
        return {
            "what": self.what,
            "before": list(self.before),
            "after": list(self.after),
            "confound": self.confound,
            "sentence": self.sentence(),
        }


def differences(before: Sequence[RunFacts], after: Sequence[RunFacts]) -> list[Difference]:
    """Each confound between the sides: experiment digest, arguments, code commit, dataset version, framework.

    A field is compared only where both sides know it (runs folded from a workspace do; a simulation's
    records know neither commit nor arguments). A side whose runs disagree among themselves differs from the
    other as soon as their value sets differ: pooled runs of two experiments are themselves a confound.
    """
    found = []
    for what, get in (
        ("experiment digest", lambda r: r.work),
        ("arguments", lambda r: " ".join(r.args) if r.args is not None else None),
        ("code commit", lambda r: r.commit),
        ("dataset version", lambda r: r.dataset_version),
    ):
        b, a = _distinct(get(r) for r in before), _distinct(get(r) for r in after)
        if b and a and (b != a or len(b) > 1):
            found.append(Difference(what, b, a))
    framework = _framework(before, after)
    if framework is not None:
        found.append(framework)
    return found


def _framework(before: Sequence[RunFacts], after: Sequence[RunFacts]) -> Difference | None:
    b = _distinct(r.dimension("framework") for r in before if r.dimension("framework") != "-")
    a = _distinct(r.dimension("framework") for r in after if r.dimension("framework") != "-")
    if not b or not a or (b == a and len(b) == 1):
        return None
    implied = all(
        IMPLIED_FRAMEWORK.get(r.dimension("accelerator")) == r.dimension("framework")
        for r in (*before, *after)
        if r.dimension("framework") != "-"
    )
    if implied and len(b) == 1 and len(a) == 1:
        return None  # each side runs the framework its accelerator implies: part of the move being judged
    return Difference("framework", b, a)


@dataclass(frozen=True)
class FleetTimeline:
    """The fleet around the runs: chips on offer over time (`capacity_changed` events) and every run's attempts."""

    capacity: Sequence[tuple[float, str, float]]
    """(ts, pool, chips on offer from ts), in time order."""
    everyone: Sequence[RunFacts]

    def offered(self, t0: float, t1: float) -> float | None:
        """Mean chips on offer over [t0, t1]; None when no capacity was recorded by t0."""
        pools: dict[str, float] = {}
        area, at, started = 0.0, t0, False
        for ts, pool, chips in self.capacity:
            if ts > t0 and not started:
                return None  # nothing known at the window's start
            if ts > t0:
                area += sum(pools.values()) * (min(ts, t1) - at)
                at = min(ts, t1)
            started = True
            pools[pool] = chips
            if ts >= t1:
                break
        if not started:
            return None
        area += sum(pools.values()) * max(0.0, t1 - at)
        return area / (t1 - t0) if t1 > t0 else sum(pools.values())

    def busy(self, t0: float, t1: float) -> float:
        """Mean chips in use over [t0, t1], by every run's attempts (not only the compared ones)."""
        if t1 <= t0:
            return 0.0
        area = math.fsum(
            a.chips * max(0.0, min(a.ended_ts if a.ended_ts is not None else r.now, t1) - max(a.started_ts, t0))
            for r in self.everyone
            for a in r.attempts
        )
        return area / (t1 - t0)


def capacity_steps(events: Iterable[Event]) -> list[tuple[float, str, float]]:
    """(ts, pool, chips on offer from then) of every `capacity_changed` event, in time order."""
    steps = [
        (e.ts, str(e.data.get("pool")), float(e.data["chips_after"]))
        for e in events
        if e.type is EventType.CAPACITY_CHANGED and _is_number(e.data.get("chips_after"))
    ]
    return sorted(steps, key=lambda s: s[0])


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def fleet_warnings(before: Sequence[RunFacts], after: Sequence[RunFacts], fleet: FleetTimeline) -> list[Difference]:
    """Capacity or load that differs by more than FLEET_TOLERANCE between the two sides' windows (warnings)."""
    wb, wa = _window(before), _window(after)
    if wb is None or wa is None:
        return []
    found = []
    ob, oa = fleet.offered(*wb), fleet.offered(*wa)
    if ob is not None and oa is not None and _apart(ob, oa):
        note = f"fleet capacity differs: {ob:.3g} chips on offer before, {oa:.3g} after ({_rel(ob, oa)})"
        found.append(Difference("fleet capacity", (f"{ob:.3g}",), (f"{oa:.3g}",), confound=False, note=note))
    bb, ba = fleet.busy(*wb), fleet.busy(*wa)
    if _apart(bb, ba):
        note = f"fleet load differs: {bb:.3g} chips in use before, {ba:.3g} after ({_rel(bb, ba)})"
        found.append(Difference("fleet load", (f"{bb:.3g}",), (f"{ba:.3g}",), confound=False, note=note))
    return found


def virtual(runs: Iterable[RunFacts]) -> bool:
    """Whether any of the runs last ran on a virtual pool: its verdict measures the software path only."""
    return any(r.last is not None and r.last.virtual for r in runs)


def _window(runs: Sequence[RunFacts]) -> tuple[float, float] | None:
    starts = [r.submitted_ts for r in runs if r.submitted_ts is not None]
    ends = [r.ended_ts if r.ended_ts is not None else r.now for r in runs]
    return (min(starts), max(ends)) if starts and ends else None


def _apart(x: float, y: float) -> bool:
    top = max(abs(x), abs(y))
    return top > 0 and abs(x - y) / top > FLEET_TOLERANCE


def _rel(x: float, y: float) -> str:
    return f"{(y / x - 1) * 100:+.0f}%" if x else "from none"


def _distinct(values: Iterable[str | None]) -> tuple[str, ...]:
    return tuple(sorted({v for v in values if v is not None}))


def _values(values: tuple[str, ...]) -> str:
    shown = ", ".join(_short(v) for v in values[:SHOWN])
    return shown + (f", … ({len(values)} in all)" if len(values) > SHOWN else "")


def _short(v: str) -> str:
    return v[:19] if v.startswith("sha256:") else (v if v else "(none)")
