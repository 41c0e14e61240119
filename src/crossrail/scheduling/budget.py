"""Team budgets in the scheduling core: what each budgeted team has spent this period, when it first
crossed its budget (announced once per period), and the hold a `hold: true` budget puts on its admissions.

Spend is priced as the metrics price it (docs/metrics.md): chips x hours x the pool's `cost_per_chip_hour`,
counted from an allocation's start (or the period's start) to its end, or to `now` while it runs. The core
charges allocations as they leave it; a caller that starts afresh mid-period (the agent) seeds what ended
before with `seed`, from the event log.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from crossrail.core.periods import Period, format_period, period_bounds
from crossrail.scheduling.types import Allocation, BudgetCrossing
from crossrail.spec import Fleet


@dataclass(frozen=True)
class Budget:
    team: str
    amount: float
    period: Period
    hold: bool


@dataclass
class _Spent:
    period_start: float = float("-inf")
    cost: float = 0.0


@dataclass
class BudgetBook:
    budgets: dict[str, Budget] = field(default_factory=dict)
    prices: dict[str, float] = field(default_factory=dict)
    """cost_per_chip_hour by pool."""
    closed: dict[str, _Spent] = field(default_factory=dict)
    """Each budgeted team's spend this period on allocations that ended."""
    billed_to: dict[str, float] = field(default_factory=dict)
    """Runs whose allocation was charged up to this time already (an elastic resize keeps its start)."""
    announced: set[tuple[str, float]] = field(default_factory=set)
    """(team, period start) of every crossing already announced."""

    @classmethod
    def from_fleet(cls, fleet: Fleet) -> BudgetBook:
        book = cls()
        book.configure(fleet)
        return book

    def configure(self, fleet: Fleet) -> None:
        """Take a fleet's budgets and prices; spend so far and announcements are kept."""
        self.budgets = {b.team: Budget(b.team, b.amount, b.period, b.hold) for b in fleet.spec.budgets}
        self.prices = {p.name: p.cost_per_chip_hour for p in fleet.spec.pools}

    def __bool__(self) -> bool:
        return bool(self.budgets)

    # --- spend ---------------------------------------------------------------------------------

    def charge(self, alloc: Allocation, end: float) -> None:
        """An allocation left the core at `end`: what it cost this period is the team's for good."""
        budget = self.budgets.get(alloc.request.team or "")
        if budget is not None:
            start, _ = period_bounds(budget.period, end)
            spent = self._closed(budget.team, start)
            spent.cost += self._cost(alloc, start, end)
            self.billed_to[alloc.run] = end

    def forget(self, run: str) -> None:
        self.billed_to.pop(run, None)

    def seed(self, team: str, cost: float, at: float) -> None:
        """Add `cost` the team spent earlier in the period holding `at` (ended before the core knew it)."""
        budget = self.budgets.get(team)
        if budget is not None:
            self._closed(team, period_bounds(budget.period, at)[0]).cost += cost

    def spend(self, allocs: Iterable[Allocation], now: float) -> dict[str, float]:
        """Each budgeted team's spend in its period holding `now`, running allocations up to `now`."""
        starts = {team: period_bounds(b.period, now)[0] for team, b in self.budgets.items()}
        out = {team: self._closed(team, start).cost for team, start in starts.items()}
        for alloc in allocs:
            team = alloc.request.team
            if team in out:
                out[team] += self._cost(alloc, starts[team], now)
        return out

    def _closed(self, team: str, period_start: float) -> _Spent:
        spent = self.closed.get(team)
        if spent is None or spent.period_start < period_start:  # a new period starts from nothing
            spent = self.closed[team] = _Spent(period_start)
        return spent

    def _cost(self, alloc: Allocation, period_start: float, end: float) -> float:
        since = max(alloc.started_at, self.billed_to.get(alloc.run, alloc.started_at), period_start)
        return alloc.chips * self.prices.get(alloc.pool, 0.0) * max(end - since, 0.0) / 3600

    # --- the cycle's step ------------------------------------------------------------------------

    def crossings(self, spent: dict[str, float], now: float) -> list[BudgetCrossing]:
        """Budgets crossed this period and not announced yet (each is announced once per period)."""
        out = []
        for team in sorted(spent):
            budget = self.budgets[team]
            start, end = period_bounds(budget.period, now)
            if spent[team] >= budget.amount and (team, start) not in self.announced:
                self.announced.add((team, start))
                out.append(BudgetCrossing(team, budget.amount, spent[team], budget.period, start, end, budget.hold))
        return out

    def hold(self, team: str | None, spent: dict[str, float], now: float) -> tuple[str, float] | None:
        """(why, until when) a run of `team` is not admitted now, or None when its budget lets it in."""
        budget = self.budgets.get(team or "")
        if budget is None or not budget.hold or spent.get(budget.team, 0.0) < budget.amount:
            return None
        start, end = period_bounds(budget.period, now)
        label = format_period(budget.period, start)
        why = (
            f"held: team {budget.team} spent {spent[budget.team]:,.2f} of its {budget.amount:,.2f} "
            f"{budget.period} budget ({label}); admitted again when the period ends "
            f"or the fleet's budget is raised"
        )
        return why, end
