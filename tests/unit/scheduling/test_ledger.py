"""Gavel's round mechanics for the max-min fairness policies (`policies.ledger.RoundLedger`), on small cases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from crossrail.scheduling.policies import JobView, PoolView, get_policy, level_of
from crossrail.scheduling.policies.ledger import RESOLVE_S, RoundLedger, _take

DATA = Path(__file__).resolve().parents[3] / "data" / "gavel"
V100 = PoolView("v100", "v100", 1, 1)
ROUND = 360.0


def job(run: str, **fields: Any) -> JobView:
    base: dict[str, Any] = {"queue": "q", "priority": level_of("normal"), "submitted_at": 0.0, "chips": 1}
    return JobView(run=run, **{"attained_s": 0.0, "throughput": {}, **base, **fields})


def ledger(*runs: str) -> RoundLedger:
    policy = get_policy("max_min_fairness")
    book = policy.ledger(ROUND)  # type: ignore[attr-defined]
    assert isinstance(book, RoundLedger)
    for run in runs:
        book.join(job(run))
    return book


def play(book: RoundLedger, rounds: int, start: float = 0.0) -> list[list[str]]:
    """Run `rounds` rounds on the V100, each planned job running the whole round; who ran in each."""
    ran: list[list[str]] = []
    running: dict[str, str] = {}
    for i in range(rounds):
        now = start + i * ROUND
        plan = book.plan(now, [V100], running)
        for run in plan:
            book.ran(run, "v100", ROUND)
        ran.append(sorted(plan))
        running = plan
    return ran


def test_three_jobs_on_one_chip_take_turns_round_by_round() -> None:
    """Each job's share of the time run since the allocation falls when it runs, so the chip rotates."""
    assert play(ledger("a", "b", "c"), 6) == [["a"], ["b"], ["c"], ["a"], ["b"], ["c"]]


def test_a_job_is_credited_the_time_of_its_whole_steps_so_a_slow_job_wins_the_tie_with_one_that_ran_as_long() -> None:
    """Gavel runs whole steps per round and credits the time they took: at 0.13 steps/s a 360 s round is 46
    steps, 353.8 s, so "slow" has had less time than "fast" and goes first, not the earlier arrival."""
    policy = get_policy("max_min_fairness")
    book = policy.ledger(ROUND)  # type: ignore[attr-defined]
    for run, steps_per_s in (("fast", 2.0), ("slow", 0.13), ("late", 1.0)):
        book.join(job(run, throughput={"v100": steps_per_s}))
    two = [PoolView("v100", "v100", 2, 2)]
    first = book.plan(0.0, two, {})
    assert sorted(first) == ["fast", "slow"]
    for run in first:
        book.ran(run, "v100", ROUND)

    assert sorted(book.plan(ROUND, two, first)) == ["late", "slow"]


def test_a_job_arriving_after_the_allocation_waits_for_the_next_one_even_with_chips_free() -> None:
    """Gavel recomputes at most every RESOLVE_S (a first allocation at time 0 does not count)."""
    book = ledger("first")
    pools = [PoolView("v100", "v100", 2, 2)]
    assert book.plan(100.0, pools, {}) == {"first": "v100"}
    book.join(job("late", submitted_at=150.0))
    on = {"first": "v100"}
    assert book.plan(100.0 + ROUND, pools, on) == on  # no allocation yet: it waits
    assert book.plan(100.0 + RESOLVE_S - 1.0, pools, on) == on
    assert book.plan(100.0 + RESOLVE_S, pools, on) == {"first": "v100", "late": "v100"}


def test_the_deficit_carries_service_below_the_allocation_across_a_recomputation() -> None:
    """`a` ran alone before `b` came; after the recomputation `b`, behind on its allocation, goes first."""
    book = ledger("a")
    assert play(book, 1) == [["a"]]
    book.join(job("b"))
    book.ran("a", "v100", 5 * ROUND)  # `a` ran on while `b` had no allocation
    assert book.plan(RESOLVE_S, [V100], {"a": "v100"}) == {"b": "v100"}
    assert book.deficit[book.slot["b"], 0] == 0.0  # no allocation before: nothing owed
    assert book.deficit[book.slot["a"], 0] < 0.0  # it got more than its allocation of the chip


def test_agnostic_rounds_shuffle_chip_types_and_hetero_rounds_take_the_fastest_first() -> None:
    pools = [PoolView("k80", "k80", 1, 1), PoolView("v100", "v100", 1, 1)]
    fast = {"v100": 4.0, "k80": 1.0}
    for name, shuffled in (("max_min_fairness", True), ("max_min_fairness_hetero", False)):
        book = get_policy(name).ledger(ROUND)  # type: ignore[attr-defined]
        book.join(job("x", throughput=fast))
        orders = set()
        for _i in range(20):
            book._types(pools)
            orders.add(tuple(book.types[t] for t in book._type_order()))
        assert (len(orders) > 1) is shuffled, name
        if not shuffled:
            assert orders == {("v100", "k80")}


def test_views_without_a_split_by_chip_type_credit_what_grew_where_the_job_runs() -> None:
    """The agent's views carry total service and the pool a run is on: only the growth counts, there."""
    policy = get_policy("max_min_fairness")
    running, waiting = job("a", attained_s=1000.0, pool="v100"), job("b", attained_s=500.0)
    policy.allocate([running, waiting], [V100], 100.0, ROUND)
    book = policy.ledger(ROUND)  # type: ignore[attr-defined]
    before = book.time[book.slot["a"], 0], book.time[book.slot["b"], 0]
    grown = JobView(**{**running.__dict__, "attained_s": 1000.0 + ROUND})
    policy.allocate([grown, waiting], [V100], 100.0 + ROUND, ROUND)
    assert book.time[book.slot["a"], 0] - before[0] == ROUND
    assert book.time[book.slot["b"], 0] == before[1]
    started = JobView(**{**waiting.__dict__, "attained_s": 500.0 + ROUND, "pool": "v100"})
    policy.allocate([grown, started], [V100], 100.0 + 2 * ROUND, ROUND)
    assert book.time[book.slot["b"], 0] - before[1] == ROUND  # not its 500 s from before it was seen


def test_a_chip_type_takes_the_gangs_that_fit_in_rank_order_passing_over_one_too_big_for_what_is_left() -> None:
    """The prefix that fits whole is taken at once; past a gang too big for the chips left, smaller ones behind
    it still take them, as the one-by-one rule does (ranked slots 7, 3, 5, 1, 9 with gangs 2, 4, 4, 1, 1)."""
    ranked, gangs = np.array([7, 3, 5, 1, 9]), np.array([2, 4, 4, 1, 1])
    assert _take(ranked, gangs, 7) == [7, 3, 1]
    assert _take(ranked, gangs, 11) == [7, 3, 5, 1]
    assert _take(ranked, gangs, 1) == [1]
    assert _take(ranked, gangs, 0) == []
    assert _take(ranked[:0], gangs[:0], 4) == []


def test_rankings_kept_across_joins_and_leaves_plan_as_rankings_rebuilt_every_round() -> None:
    """Between recomputations the ledger keeps each chip type's ranking and updates it as jobs come and go;
    plans (and their order) are those of a ledger that ranks afresh every round. Gangs of several chips and
    a chip type with two pools take the general path, one chip per job on one pool each the quick one."""
    rng = np.random.default_rng(7)
    for pools, gangs in (
        ([PoolView("v100", "v100", 3, 3), PoolView("k80", "k80", 4, 4)], (1,)),
        ([PoolView("v100", "v100", 4, 4), PoolView("k80-a", "k80", 3, 3), PoolView("k80-b", "k80", 2, 2)], (1, 2)),
    ):
        kept, fresh = (get_policy("max_min_fairness").ledger(ROUND) for _ in range(2))  # type: ignore[attr-defined]
        running: list[dict[str, str]] = [{}, {}]
        arrived = 0
        for i in range(120):
            now = i * ROUND
            if rng.random() < 0.5 or arrived < 3:
                rates = {"v100": float(rng.uniform(0.5, 3.0)), "k80": float(rng.choice([0.0, rng.uniform(0.1, 1.0)]))}
                view = job(f"j{arrived}", submitted_at=now, chips=int(rng.choice(gangs)), throughput=rates)
                arrived += 1
                for book in (kept, fresh):
                    book.join(view)
            if rng.random() < 0.3 and kept.slot:
                run = sorted(kept.slot)[int(rng.integers(len(kept.slot)))]
                for book in (kept, fresh):
                    book.leave(run)
            fresh._ranks = None
            plans = [book.plan(now, pools, on) for book, on in zip((kept, fresh), running, strict=True)]
            assert list(plans[0].items()) == list(plans[1].items()), i
            for run, pool in plans[0].items():
                seconds = ROUND * float(rng.uniform(0.2, 1.0))
                for book in (kept, fresh):
                    book.ran(run, pool.split("-")[0], seconds)
            running = plans
        assert arrived > 40
