"""Team budgets in the core: spend this period, one crossing per period, and the hold on new admissions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crossrail.core.periods import period_bounds
from crossrail.errors import SpecError
from crossrail.scheduling import Scheduler

from .builders import HOUR, T0, fleet, gpu, queue, req, scheduler

# 8 chips at 2.0 an hour: a full pool costs 16.0 an hour.
POOLS = [gpu("gpu", chips=16, cost_per_chip_hour=2.0)]
QUEUES = [queue("a", {"gpu": 16}), queue("b", {"gpu": 16})]


def budgeted(hold: bool = True, period: str = "day", amount: float = 20.0, **queue_fields: Any) -> Scheduler:
    queues = [queue("a", {"gpu": 16}, **queue_fields), queue("b", {"gpu": 16})]
    return scheduler(POOLS, queues, spec={"budgets": [{"team": "a", "amount": amount, "period": period, "hold": hold}]})


def test_a_team_over_its_holding_budget_waits_and_other_teams_go_ahead() -> None:
    sched = budgeted()
    sched.submitted(req("a1", "a", 8))
    assert [x.run for x in sched.cycle(T0).admitted] == ["a1"]
    sched.finished("a1", T0 + 2 * HOUR)  # 8 chips x 2 h x 2.0 = 32.0 > 20.0
    sched.submitted(req("a2", "a", 8, queued_at=T0 + 2 * HOUR))
    sched.submitted(req("b1", "b", 8, queued_at=T0 + 2 * HOUR))

    result = sched.cycle(T0 + 2 * HOUR)

    assert [x.run for x in result.admitted] == ["b1"]
    assert result.blocked["a2"] == (
        "held: team a spent 32.00 of its 20.00 day budget (2026-01-01); "
        "admitted again when the period ends or the fleet's budget is raised"
    )
    assert result.held_until == T0 + 24 * HOUR
    (crossing,) = result.budget_exceeded
    assert (crossing.team, crossing.spent, crossing.period_start) == ("a", 32.0, T0)


def test_running_work_counts_up_to_now_and_the_crossing_is_announced_once_per_period() -> None:
    sched = budgeted()
    sched.submitted(req("a1", "a", 8))
    sched.cycle(T0)

    before = sched.cycle(T0 + 1 * HOUR)  # 16.0 spent so far
    crossed = sched.cycle(T0 + 1.5 * HOUR)  # 24.0
    sched.submitted(req("a2", "a", 8, queued_at=T0 + 1.5 * HOUR))
    again = sched.cycle(T0 + 3 * HOUR)
    next_day = sched.cycle(T0 + 24 * HOUR)  # a1 still runs, but nothing is spent yet in the new day
    sched.finished("a1", T0 + 27 * HOUR)
    sched.finished("a2", T0 + 27 * HOUR)
    sched.submitted(req("a3", "a", 8, queued_at=T0 + 27 * HOUR))
    day_two = sched.cycle(T0 + 27 * HOUR)  # 2 runs x 8 chips x 3 h x 2.0 = 96.0 in day two

    assert before.budget_exceeded == []
    assert [(c.team, c.spent) for c in crossed.budget_exceeded] == [("a", 24.0)]
    assert again.budget_exceeded == []
    assert again.blocked["a2"].startswith("held: team a spent 48.00")
    assert [x.run for x in next_day.admitted] == ["a2"]
    assert next_day.budget_exceeded == []
    assert [(c.period_start, c.spent) for c in day_two.budget_exceeded] == [(T0 + 24 * HOUR, 96.0)]
    assert day_two.blocked["a3"].startswith("held: team a spent 96.00")


def test_a_budget_without_hold_is_announced_but_admits() -> None:
    sched = budgeted(hold=False)
    sched.submitted(req("a1", "a", 8))
    sched.cycle(T0)
    sched.finished("a1", T0 + 2 * HOUR)
    sched.submitted(req("a2", "a", 8, queued_at=T0 + 2 * HOUR))

    result = sched.cycle(T0 + 2 * HOUR)

    assert [x.run for x in result.admitted] == ["a2"]
    assert [c.hold for c in result.budget_exceeded] == [False]


def test_a_strict_fifo_queue_shared_by_teams_lets_the_next_team_pass_a_held_head() -> None:
    budgets = [{"team": "a", "amount": 1.0, "period": "day", "hold": True}]
    shared = [{"name": "shared", "stage": "experiment", "team": "a", "quota": {"gpu": 16}}, queue("b")]
    sched = scheduler(POOLS, shared, spec={"budgets": budgets})
    sched.budgets.seed("a", 5.0, T0)
    sched.submitted(req("a1", "shared", 8, team="a"))
    sched.submitted(req("b1", "shared", 8, team="b", queued_at=T0 + 1))

    result = sched.cycle(T0 + 2)

    assert [x.run for x in result.admitted] == ["b1"]
    assert result.blocked["a1"].startswith("held: team a spent 5.00 of its 1.00 day budget")


def test_raising_the_budget_in_the_fleet_releases_the_hold_at_once() -> None:
    sched = budgeted(amount=1.0)
    sched.budgets.seed("a", 5.0, T0)
    sched.submitted(req("a1", "a", 8))
    assert "a1" in sched.cycle(T0).blocked

    raised = fleet(POOLS, QUEUES, budgets=[{"team": "a", "amount": 100.0, "period": "day", "hold": True}])
    sched.apply_fleet(raised)

    assert [x.run for x in sched.cycle(T0 + 1).admitted] == ["a1"]


def test_an_elastic_resize_is_not_charged_twice() -> None:
    sched = budgeted(hold=False, amount=1000.0)
    sched.started(req("b1", "b", 8), "gpu", 8, T0)
    sched.submitted(req("a1", "a", 8, min_chips=8, max_chips=16))
    assert [(x.run, x.chips) for x in sched.cycle(T0).admitted] == [("a1", 8)]
    sched.finished("b1", T0 + HOUR)
    sched.resized("a1", 16, T0 + HOUR)  # 8 chips for 1 h: 16.0
    spent = sched.budgets.spend(sched.cache.allocs.values(), T0 + 2 * HOUR)  # + 16 chips for 1 h: 32.0

    assert spent == {"a": 48.0}


@pytest.mark.parametrize(
    ("period", "ts", "start", "end"),
    [
        pytest.param("day", "2026-03-10T13:00:00+00:00", "2026-03-10", "2026-03-11", id="day"),
        pytest.param("week", "2026-03-12T13:00:00+00:00", "2026-03-09", "2026-03-16", id="week-from-monday"),
        pytest.param("month", "2026-12-31T23:59:59+00:00", "2026-12-01", "2027-01-01", id="december"),
    ],
)
def test_periods_are_utc_calendar_periods(period: Any, ts: str, start: str, end: str) -> None:
    from datetime import datetime

    def epoch(text: str) -> float:
        return datetime.fromisoformat(text if "T" in text else f"{text}T00:00:00+00:00").timestamp()

    assert period_bounds(period, epoch(ts)) == (epoch(start), epoch(end))


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        pytest.param(
            {"team": "c", "amount": 10}, "unknown team 'c'; teams the fleet names are a, b", id="unknown-team"
        ),
        pytest.param(
            {"team": "a", "amount": 10, "period": "year"}, "'year' is not one of day, week, month", id="period"
        ),
        pytest.param({"team": "a", "amount": 0}, "must be > 0", id="amount"),
    ],
)
def test_a_bad_budget_is_a_clear_fleet_error(budget: dict[str, Any], message: str) -> None:
    from crossrail.spec import parse_document
    from crossrail.spec.validate import parse_fleet

    with pytest.raises(SpecError) as err:
        parse_fleet(parse_document(fleet_text([budget]), "fleet.yaml"))
    assert message in str(err.value)


def fleet_text(budgets: list[dict[str, Any]]) -> str:
    import json

    doc = fleet(POOLS, QUEUES).model_dump(by_alias=True, mode="json", exclude_defaults=True)
    doc["spec"]["budgets"] = budgets
    return json.dumps(doc)


def test_a_budget_may_name_a_team_that_only_a_queues_teams_list_names() -> None:
    """Also when another problem makes the checks run on the unvalidated document."""
    from crossrail.spec import parse_document
    from crossrail.spec.validate import parse_fleet

    doc = fleet(POOLS, QUEUES).model_dump(by_alias=True, mode="json", exclude_defaults=True)
    doc["spec"]["queues"].append({"name": "shared", "stage": "eval", "teams": ["x", "y"]})
    good = {**doc, "spec": {**doc["spec"], "budgets": [{"team": "y", "amount": 5}]}}
    bad = {**doc, "spec": {**doc["spec"], "budgets": [{"team": "y", "amount": 5}, {"team": "a", "amount": 0}]}}

    loaded = parse_fleet(parse_document(json.dumps(good), "fleet.yaml"))
    with pytest.raises(SpecError) as err:
        parse_fleet(parse_document(json.dumps(bad), "fleet.yaml"))

    assert [b.team for b in loaded.spec.budgets] == ["y"]
    assert "budgets[1].amount" in str(err.value)
    assert "unknown team" not in str(err.value)


@pytest.mark.parametrize("policy", ["fifo", "las", "max_min_fairness_hetero"])
def test_a_simulation_applies_the_fleets_budgets_under_every_policy(policy: str) -> None:
    """Every policy admits through the scheduling core, so a team's held budget holds its runs in simulation too."""
    from crossrail.sim.simulation import Simulation
    from crossrail.sim.workload import SimJob

    budgets = [{"team": "a", "amount": 1.0, "period": "day", "hold": True}]
    jobs = [SimJob(f"j{i}", "experiment", 8, work_s=600.0, team="a") for i in range(3)]

    result = Simulation(fleet(POOLS, QUEUES, budgets=budgets), jobs, policy=policy, record_events=True).run()

    assert not any("budget" in note for note in result.notes)
    assert result.finished == 3
    starts = sorted(r.first_start_s for r in result.runs.values() if r.first_start_s is not None)
    assert starts[-1] >= 86_400.0, f"{policy}: a run started at {starts[-1]} s, before the held budget's next day"
