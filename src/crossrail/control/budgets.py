"""Team budgets between the store and the scheduling core: what a fresh core must know of the period so far,
the `budget_exceeded` events it announces, and the hold `crossrail queue` shows."""

from __future__ import annotations

from typing import Any

from crossrail.core import Event, EventType
from crossrail.core.periods import Period, period_bounds
from crossrail.metrics.usage import by_team, usage
from crossrail.scheduling import Scheduler
from crossrail.scheduling.budget import BudgetBook
from crossrail.scheduling.types import CycleResult
from crossrail.spec import Fleet
from crossrail.store import Store

USAGE_EVENTS = [
    EventType.SUBMITTED,
    EventType.QUEUED,
    EventType.PLACED,
    EventType.STARTED,
    EventType.SUCCEEDED,
    EventType.FAILED,
    EventType.PREEMPTED,
    EventType.CANCELLED,
    EventType.SUSPENDED,
    EventType.RESIZED,
]
ATTEMPT_EVENTS = [str(t) for t in USAGE_EVENTS if t not in (EventType.SUBMITTED, EventType.QUEUED)]
"""What a team's spend is read from, beside each started run's team: queued runs' events are never read."""


def seed(store: Store, scheduler: Scheduler, now: float) -> None:
    """Tell a core made mid-period what budgeted teams spent on attempts that ended earlier in their period,
    and which crossings the log already announced (so none is announced twice)."""
    book = scheduler.budgets
    if not book:
        return
    ended = _period_spend(book, store, now, running=False)
    for team, cost in ended.items():
        book.seed(team, cost, now)
    for e in store.events(types=[str(EventType.BUDGET_EXCEEDED)]):
        named, start = e.data.get("team"), e.data.get("period_start")
        if isinstance(named, str) and isinstance(start, int | float):
            book.announced.add((named, float(start)))


def record(store: Store, result: CycleResult, now: float) -> None:
    """The cycle's `budget_exceeded` announcements, as fleet-wide events."""
    if result.budget_exceeded:
        store.append_events(
            [Event(EventType.BUDGET_EXCEEDED, now, None, None, c.as_dict()) for c in result.budget_exceeded]
        )


def holds(store: Store, fleet: Fleet, now: float) -> dict[str, str]:
    """Why each team a holding budget stops is not admitted now (team -> reason); {} when none is held."""
    book = BudgetBook.from_fleet(fleet)
    if not any(b.hold for b in book.budgets.values()):
        return {}
    spent = _period_spend(book, store, now, running=True)
    out = {}
    for team in book.budgets:
        held = book.hold(team, spent, now)
        if held is not None:
            out[team] = held[0]
    return out


def _period_spend(book: BudgetBook, store: Store, now: float, *, running: bool) -> dict[str, float]:
    """Each budgeted team's cost in its period holding `now`."""
    events = store.events(types=ATTEMPT_EVENTS)
    started = {e.run for e in events if e.type is EventType.STARTED and e.run is not None}
    teams_of = dict(store.event_values([str(EventType.SUBMITTED)], "team", runs=started))
    out: dict[str, float] = {}
    periods: dict[Period, list[str]] = {}
    for team, budget in book.budgets.items():
        periods.setdefault(budget.period, []).append(team)
    for period, teams in periods.items():
        start, _ = period_bounds(period, now)
        spent = by_team(usage(events, now, start, running=running, teams_of=teams_of))
        for team in teams:
            out[team] = spent.get(team, (0.0, 0.0))[1]
    return out


def status(store: Store, fleet: Fleet, now: float) -> list[dict[str, Any]]:
    """Each budget of the fleet with what its team spent in the period holding `now`, and its state
    (`ok`, `exceeded`, or `held` for a budget that holds)."""
    book = BudgetBook.from_fleet(fleet)
    if not book:
        return []
    spent = _period_spend(book, store, now, running=True)
    rows = []
    for b in book.budgets.values():
        start, end = period_bounds(b.period, now)
        over = spent[b.team] >= b.amount
        rows.append(
            {
                "team": b.team,
                "amount": b.amount,
                "period": b.period,
                "period_start": start,
                "period_end": end,
                "spent": spent[b.team],
                "hold": b.hold,
                "state": ("held" if b.hold else "exceeded") if over else "ok",
            }
        )
    return rows
