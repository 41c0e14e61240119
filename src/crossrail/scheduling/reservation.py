"""Reservations: chips of one pool held from a start time for a duration, pinned to whole hosts.

Before the start, only runs expected to end by `start - grace` (time known, `now + duration_s`) are
backfilled onto the held hosts; from `start - grace` anything still there is preempted, so the owners
find every held chip free at the start. While active, the held hosts take only the owners' runs (the
reservation's team, or runs that name it), and those chips do not count against queue quotas. When the
reservation ends its hosts return to everyone and its runs count against their queues again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from crossrail.core import format_duration
from crossrail.scheduling.pool import Pins, PoolState
from crossrail.scheduling.types import Allocation, Request
from crossrail.spec.fleet import ReservationSpec


@dataclass
class Hold:
    name: str
    pool: str
    chips: int
    start: float
    end: float
    team: str | None = None
    hosts: list[int] = field(default_factory=list)
    claimed: bool = False
    """Whether the backfill on its hosts has been preempted for the start."""
    opened: bool = False
    """Whether a cycle has seen it start (its owners' set-aside runs then get another try)."""

    @classmethod
    def from_spec(cls, spec: ReservationSpec) -> Hold:
        return cls(spec.name, spec.pool, spec.chips, spec.start_s, spec.end_s, spec.team)

    def owns(self, req: Request) -> bool:
        return req.reservation == self.name or (self.team is not None and req.team == self.team)

    def active(self, now: float) -> bool:
        return self.start <= now < self.end

    def overlaps(self, other: Hold) -> bool:
        return self.start < other.end and other.start < self.end

    def describe(self, now: float) -> str:
        whose = f"team {self.team}" if self.team else f"runs naming {self.name}"
        if now < self.start:
            return f"{self.chips} chips held for {whose} starting in {format_duration(self.start - now)}"
        return f"{self.chips} chips held for {whose} for {format_duration(max(self.end - now, 1))} more"


def usable(pins: Pins, holds: Mapping[str, Hold], req: Request, now: float, grace_s: float) -> tuple[bool, str | None]:
    """Whether `req` may run now on hosts pinned by `pins`, and the reservation it then runs in."""
    inside = None
    for name in pins:
        hold = holds[name]
        if hold.active(now):
            if not hold.owns(req):
                return False, None
            inside = name
        elif now < hold.start:
            duration = req.duration_s
            if duration is None or now + duration > hold.start - grace_s:
                return False, None
    return True, inside


def classes_for(
    pool: PoolState, holds: Mapping[str, Hold], req: Request, now: float, grace_s: float
) -> tuple[list[tuple[Pins, str | None]], list[Hold]]:
    """Host classes `req` may use on `pool`, its own active reservations first; and the holds that keep it out."""
    own: list[tuple[Pins, str | None]] = []
    rest: list[tuple[Pins, str | None]] = []
    refused: list[Hold] = []
    for pins in pool.classes:
        if not pins:
            rest.insert(0, (pins, None))
            continue
        ok, inside = usable(pins, holds, req, now, grace_s)
        if not ok:
            refused += [holds[name] for name in pins]
        elif inside is not None:
            own.append((pins, inside))
        else:
            rest.append((pins, None))
    return own + rest, refused


def choose_hosts(
    pool: PoolState, hold: Hold, holds: Iterable[Hold], allocations: Iterable[Allocation], grace_s: float
) -> list[int]:
    """Hosts for `hold` to pin, as many as it lacks: free ones first, then those whose work ends in time."""
    exclude = {h.name for h in holds if h.pool == hold.pool and h.name != hold.name and h.overlaps(hold)}
    kept = [h for h in hold.hosts if h < len(pool.state) and pool.state[h] == 0]
    need = hold.chips // pool.per_host - len(kept)
    late: dict[int, int] = {}
    for alloc in allocations:
        end = alloc.expected_end
        if end is None or end > hold.start - grace_s:
            for h, chips in alloc.hosts:
                late[h] = late.get(h, 0) + chips
    taken = set(kept)
    candidates = [h for h in pool.pinnable(exclude) if h not in taken]
    candidates.sort(key=lambda h: (late.get(h, 0), pool.per_host - pool.free[h], -h))
    return kept + candidates[: max(need, 0)]
