"""Which pools a request may try now, in order, and why: the placement rule of scheduling v0.

On a retry the pools other than the one the previous attempt ended on come first. A request the
estimates placed (`Request.pool`, see estimate.py) tries that pool first and the others only after
`fallback_wait_s` in the queue; otherwise the preferred accelerator's pools come first and the others
only after `fallback_wait_s`. Within each group, the cheapest pool per unit of work goes first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from crossrail.core import format_duration
from crossrail.scheduling.pool import PoolState
from crossrail.scheduling.types import Request

Ranked = list[tuple[PoolState, str]]
"""Pools in the order to try them, each with why it is tried (a kind `Placement.reason` spells out)."""


class Placement:
    """Ranks pools for requests at one time; requests of the same shape share one ranking."""

    def __init__(self, by_cost: Sequence[PoolState], now: float, fallback_wait_s: float) -> None:
        self.by_cost = list(by_cost)
        self.now = now
        self.fallback_wait_s = fallback_wait_s
        self._ranked: dict[tuple[object, ...], Ranked] = {}
        self._positions: dict[int, dict[str, int]] = {}

    def ranked(self, req: Request) -> Ranked:
        """The pools `req` may try now, best first."""
        waited = self.now - req.queued_at >= self.fallback_wait_s
        key = (req.allow, req.runs_on, req.prefer, req.avoid_pool, req.pool, waited)
        ranked = self._ranked.get(key)
        if ranked is None:
            ranked = self._ranked[key] = self._rank(req, waited)
        return ranked

    def positions(self, ranked: Ranked) -> dict[str, int]:
        """Pool name -> its place in `ranked` (one of this object's rankings)."""
        found = self._positions.get(id(ranked))
        if found is None:
            found = self._positions[id(ranked)] = {p.name: i for i, (p, _) in enumerate(ranked)}
        return found

    def _rank(self, req: Request, waited: bool) -> Ranked:
        allowed = self._allowed(req)
        if req.avoid_pool is not None:
            away = [(p, "away") for p in allowed if p.name != req.avoid_pool]
            away.sort(key=lambda item: item[0].name != req.pool)  # the estimate's pick first (stable)
            return away + [(p, "same") for p in allowed if p.name == req.avoid_pool]
        if req.pool is not None and any(p.name == req.pool for p in allowed):
            estimated = [(p, "estimated") for p in allowed if p.name == req.pool]
            others = [(p, "fallback-estimated") for p in allowed if p.name != req.pool] if waited else []
            return estimated + others
        if req.prefer in ("any", "mixed"):
            return [(p, "any") for p in allowed]
        preferred = [(p, "preferred") for p in allowed if p.accelerator == req.prefer]
        if preferred and not waited:
            return preferred
        kind = "fallback" if preferred else "not-allowed"
        return preferred + [(p, kind) for p in allowed if p.accelerator != req.prefer]

    def _allowed(self, req: Request) -> list[PoolState]:
        return [
            p
            for p in self.by_cost
            if (req.allow is None or p.accelerator in req.allow) and (req.runs_on is None or p.name in req.runs_on)
        ]

    def reason(self, req: Request, kind: str) -> str:
        """Why `req` was placed on a pool of this kind, in words."""
        return _REASONS.get(kind, _not_allowed)(self, req)

    def waited(self, req: Request) -> str:
        return format_duration(self.now - req.queued_at)

    def fallback_at(self, req: Request) -> float | None:
        """When more pools open to `req` by waiting, or None when waiting opens none."""
        if req.avoid_pool is not None:
            return None
        allowed = self._allowed(req)
        if req.pool is not None and any(p.name == req.pool for p in allowed):
            return req.queued_at + self.fallback_wait_s if len(allowed) > 1 else None
        if req.prefer in ("any", "mixed"):
            return None
        others = any(p.accelerator != req.prefer for p in allowed)
        preferred = any(p.accelerator == req.prefer for p in allowed)
        return req.queued_at + self.fallback_wait_s if preferred and others else None


def _not_allowed(_: Placement, req: Request) -> str:
    return f"no {req.prefer} pool is allowed for this run"


_REASONS: dict[str, Callable[[Placement, Request], str]] = {
    # Only the sentence for the kind is built: every admission of a cycle asks for one.
    "away": lambda _, req: f"retry moved off {req.avoid_pool}, where the previous attempt ended",
    "same": lambda _, req: "retry on the same pool",
    "estimated": lambda _, req: req.pool_reason or f"placed on {req.pool} by the estimates",
    "fallback-estimated": lambda at, req: (
        f"fell back after waiting {at.waited(req)} for {req.pool}, the estimates' pick"
    ),
    "any": lambda _, req: f"no accelerator preference ({req.prefer}); cheapest pool with room",
    "preferred": lambda _, req: f"{req.prefer} preferred{req.prefer_source}",
    "fallback": lambda at, req: f"fell back after waiting {at.waited(req)} for a {req.prefer} pool",
}
