"""Does a request fit one pool now? Gang, slice shape, hosts, quota and reservations, with the reason if not."""

from __future__ import annotations

from typing import NamedTuple

from crossrail.scheduling.pool import NO_PINS, Pins, PoolState
from crossrail.scheduling.reservation import classes_for
from crossrail.scheduling.snapshot import Snapshot
from crossrail.scheduling.types import Hosts, Request

_GENERAL: list[tuple[Pins, str | None]] = [(NO_PINS, None)]


class GangFit(NamedTuple):
    """Where a gang fits (a tuple: a cycle and its trial preemptions make thousands)."""

    pool: str
    chips: int
    hosts: Hosts
    reservation: str | None
    free: int
    """Free chips the pool had before this gang took its share."""


def fit(snap: Snapshot, req: Request, pool: PoolState, grace_s: float) -> GangFit | None:
    """The largest gang of `req` the pool can hold now, or None (`why_not` says why)."""
    low, free = req.low, pool.free_chips
    if pool.drained or free < low:
        return None
    head = snap.quota.headroom(snap.used, snap.excess, req.queue, pool.name)
    general = len(pool.buckets) == 1
    if head < low and general:  # over quota, and no reservation that could take it
        return None
    classes = _GENERAL if general else classes_for(pool, snap.holds, req, snap.now, grace_s)[0]
    most = req.high if req.high < free else free  # min() written out: a cycle's trials fit thousands of times
    unit, find = req.unit, pool.find
    for pins, inside in classes:
        limit = most if inside or most < head else head
        for n in pool.sizes_of(low, limit, unit):
            hosts = find(n, pins, unit)
            if hosts is not None:
                return GangFit(pool.name, n, hosts, inside, free)
    return None


def why_not(snap: Snapshot, req: Request, pool: PoolState, grace_s: float) -> str:
    """Why `fit` found no room for `req` on the pool, most basic reason first."""
    if pool.drained:
        return f"{pool.name} is drained and takes no new work"
    basic = _shape_problem(req, pool) or _chips_problem(req, pool)
    if basic:
        return basic
    low = req.low
    if snap.headroom(req.queue, pool.name) < low:
        quota = snap.quota.describe(snap.used, snap.excess, req.queue, pool.name, low)
        own = [h for h in snap.holds.values() if h.pool == pool.name and h.active(snap.now) and h.owns(req)]
        return f"reservation {own[0].name} has no room for {low} chips; outside it, {quota}" if own else quota
    _, refused = classes_for(pool, snap.holds, req, snap.now, grace_s)
    if refused:
        hold = min(refused, key=lambda h: h.start)
        rule = (
            "only its own runs may use them now"
            if hold.active(snap.now)
            else "only runs expected to end before it starts may use them"
        )
        return (
            f"{pool.name} has {pool.free_chips} free chips, some reserved by {hold.name} "
            f"({hold.describe(snap.now)}); {rule}"
        )
    per = pool.per_host
    rule = f"one host of {per}" if low <= per else f"{low // per} wholly free hosts of {per}"
    if req.unit is not None and pool.shapes is None:
        rule += f", nor room for {low // req.unit} workers of {req.unit} chips on its hosts"
    return f"{pool.name} has {pool.free_chips} free chips, but not {rule} for a {low}-chip gang"


def _chips_problem(req: Request, pool: PoolState) -> str | None:
    if pool.overflow:
        return f"{pool.name} runs {pool.overflow} chips more than its hosts have until some work ends"
    if pool.free_chips < req.low:
        return f"{pool.name} has {pool.free_chips} free chips; needs {_want(req)}"
    return None


def _shape_problem(req: Request, pool: PoolState) -> str | None:
    if pool.capacity < req.low:
        return f"{pool.name} has {pool.capacity} chips; needs {_want(req)}"
    if next(pool.sizes(req.low, req.high, req.unit), None) is not None:
        return None
    if pool.shapes is not None:
        shapes = ", ".join(str(n) for n in pool.shapes)
        return (
            f"no slice shape of {pool.name} fits {_want(req)} chips "
            f"(shapes hold {shapes}; above one host of {pool.per_host}, only whole hosts)"
        )
    return f"{_want(req)} chips span hosts of {pool.per_host} on {pool.name}; above one host request whole hosts"


def _want(req: Request) -> str:
    return str(req.low) if req.low == req.high else f"{req.low}..{req.high}"
