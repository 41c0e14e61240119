"""What changes between two versions of a fleet, as `crossrail fleet apply` would show and apply it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from crossrail.core import format_duration
from crossrail.spec import Fleet, Pool

ChangeKind = Literal[
    "pool_added",
    "pool_removed",
    "capacity",
    "drain",
    "undrain",
    "pool_settings",
    "queues",
    "reservation_added",
    "reservation_removed",
    "policy",
]

_SETTINGS = (
    "accelerator",
    "chip_type",
    "topologies",
    "cost_per_chip_hour",
    "relative_speed",
    "node_labels",
    "backend",
    "time_sliced",
)


@dataclass(frozen=True)
class FleetChange:
    kind: ChangeKind
    name: str
    detail: str

    def __str__(self) -> str:
        return f"{self.name}: {self.detail}"


def fleet_changes(old: Fleet, new: Fleet) -> list[FleetChange]:
    """Every difference the scheduler reacts to, pools first, then queues, reservations and policy."""
    changes: list[FleetChange] = []
    before = {p.name: p for p in old.spec.pools}
    after = {p.name: p for p in new.spec.pools}
    for name, pool in after.items():
        if name not in before:
            changes.append(FleetChange("pool_added", name, f"new pool of {pool.chips} {pool.chip_type} chips"))
        else:
            changes += _pool_changes(before[name], pool)
    for name in before.keys() - after.keys():
        changes.append(FleetChange("pool_removed", name, "removed; running work finishes, no new work starts"))
    if old.spec.queues != new.spec.queues:
        names = sorted({q.name for q in old.spec.queues} ^ {q.name for q in new.spec.queues})
        changed = sorted(q.name for q in new.spec.queues if any(o.name == q.name and o != q for o in old.spec.queues))
        detail = ", ".join([*(f"{n} added or removed" for n in names), *(f"{n} changed" for n in changed)])
        changes.append(FleetChange("queues", "queues", detail or "reordered"))
    changes += _reservation_changes(old, new)
    if (old.spec.fair_share, old.spec.preemption, old.spec.scheduling) != (
        new.spec.fair_share,
        new.spec.preemption,
        new.spec.scheduling,
    ):
        changes.append(FleetChange("policy", "policy", "fair share, preemption or scheduling settings changed"))
    return changes


def _pool_changes(old: Pool, new: Pool) -> list[FleetChange]:
    out: list[FleetChange] = []
    if old.chips_per_host != new.chips_per_host:
        detail = f"chips_per_host {old.chips_per_host} -> {new.chips_per_host}"
        out.append(FleetChange("pool_settings", new.name, detail))
    if old.chips != new.chips:
        hosts = new.chips // new.chips_per_host - old.chips // old.chips_per_host
        verb = f"{hosts} hosts join" if hosts > 0 else f"{-hosts} hosts leave"
        out.append(FleetChange("capacity", new.name, f"{old.chips} -> {new.chips} chips ({verb})"))
    if old.drained != new.drained:
        kind: ChangeKind = "drain" if new.drained else "undrain"
        detail = "drained: takes no new work" if new.drained else "undrained: takes new work again"
        out.append(FleetChange(kind, new.name, detail))
    moved = [key for key in _SETTINGS if getattr(old, key) != getattr(new, key)]
    if moved:
        out.append(FleetChange("pool_settings", new.name, f"{', '.join(moved)} changed"))
    return out


def _reservation_changes(old: Fleet, new: Fleet) -> list[FleetChange]:
    before = {r.name: r for r in old.spec.reservations}
    after = {r.name: r for r in new.spec.reservations}
    out = []
    for name in sorted(before):
        if before[name] != after.get(name):
            out.append(FleetChange("reservation_removed", name, f"releases {before[name].chips} chips"))
    for name in sorted(after):
        r = after[name]
        if before.get(name) != r:
            detail = f"holds {r.chips} chips of {r.pool} from {r.start.isoformat()} for {format_duration(r.duration_s)}"
            out.append(FleetChange("reservation_added", name, detail))
    return out
