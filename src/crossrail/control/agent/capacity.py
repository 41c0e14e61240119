"""The fleet's capacity as events: what the agent records when it starts and when the fleet file changed under it,
so that utilization has its denominator (metrics/usage.py)."""

from __future__ import annotations

from crossrail.core import Event, EventType
from crossrail.spec import Fleet
from crossrail.store import Store


def record_capacity(store: Store, fleet: Fleet, now: float) -> list[Event]:
    """Record each pool whose usable chips differ from the store's last `capacity_changed` for it: the fleet's
    initial state in a new store (or in a store older than these records, from the first pass after the
    upgrade: utilization counts from then, and says so), and a fleet file edited by hand. Pools the store
    recorded that the fleet no longer has go to 0. The events appended, none when all agree."""
    last: dict[str, float] = {}
    for e in store.events(types=[str(EventType.CAPACITY_CHANGED)]):
        pool, chips = e.data.get("pool"), e.data.get("chips_after")
        if isinstance(pool, str) and isinstance(chips, int | float) and not isinstance(chips, bool):
            last[pool] = float(chips)
    usable = {p.name: 0 if p.drained else p.chips for p in fleet.spec.pools}
    events = []
    for pool in sorted(usable.keys() | last.keys()):
        chips = usable.get(pool, 0)
        if last.get(pool) == chips or (pool not in usable and not last.get(pool)):
            continue
        why = "the fleet's capacity when first recorded" if pool not in last else "the fleet file as it now is"
        data = {"pool": pool, "chips_before": last.get(pool, 0), "chips_after": chips, "reason": f"recorded: {why}"}
        events.append(Event(EventType.CAPACITY_CHANGED, now, None, None, data))
    if events:
        store.append_events(events)
    return events
