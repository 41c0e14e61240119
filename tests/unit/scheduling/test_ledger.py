"""Gavel's round mechanics for the max-min fairness policies (`policies.ledger.RoundLedger`), on small cases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crossrail.scheduling.policies import JobView, PoolView, get_policy, level_of
from crossrail.scheduling.policies.ledger import RESOLVE_S, RoundLedger, _take
from crossrail.sim import Simulation
from crossrail.sim.fleets import pools_fleet
from crossrail.sim.traces import gavel_jobs

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


def test_a_ledger_told_of_every_event_plans_as_one_rebuilt_from_views_every_round() -> None:
    """The simulator feeds the ledger arrivals, ends and time run as they happen; the agent hands it views
    of every candidate each round. On Gavel's 15-job trace both give every job the same completion time."""
    jobs = gavel_jobs(DATA / "artifact_evaluation.trace", DATA / "simulation_throughputs.json")
    fleet = pools_fleet("v100:2:2,k80:4:4", jobs)
    for policy in ("max_min_fairness", "max_min_fairness_hetero"):
        fed = Simulation(fleet, jobs, policy=policy).run()
        rebuilt_sim = Simulation(fleet, jobs, policy=policy)
        assert rebuilt_sim.driver is not None
        assert rebuilt_sim.driver.ledger is not None
        rebuilt_sim.driver.ledger = None  # every round: views of every job, synced into the policy's ledger
        rebuilt = rebuilt_sim.run()
        ends = {run: rec.end_s for run, rec in fed.runs.items()}
        assert ends == {run: rec.end_s for run, rec in rebuilt.runs.items()}, policy
        assert fed.avg_jct_s is not None
        assert fed.avg_jct_s > 0


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


def test_crediting_by_slot_equals_crediting_them_one_by_one_bit_for_bit() -> None:
    """`ran_slots` (a simulator's round boundary: slots and columns it keeps) leaves the ledger exactly as `ran`
    per job in turn, whole steps and the sums per chip type included; `ran` of a job unknown, idle or on an
    unknown chip type changes nothing."""
    pools = [PoolView("v100", "v100", 2, 2), PoolView("k80", "k80", 2, 2)]
    rows = {"a": {"v100": 3.7, "k80": 1.1}, "b": {"v100": 0.9}, "c": {}, "d": {"v100": 2.3, "k80": 0.7}}
    one, slotted = (RoundLedger(lambda _j, _p: {}, ROUND, shuffle=False) for _ in range(2))
    for book in (one, slotted):
        book.sync([job(r, throughput=rate) for r, rate in rows.items()], pools)
    rounds = [
        [("a", "v100", 359.99), ("b", "k80", 120.0), ("c", "v100", 0.3), ("d", "k80", 1e-7)],
        [("d", "v100", 241.123), ("a", "k80", 0.0), ("b", "v100", 17.25), ("c", "k80", 359.9)],
    ]
    for credits in rounds:
        for run, kind, sec in credits:
            one.ran(run, kind, sec)
        columns = [slotted.column(c[1]) for c in credits]
        slotted.ran_slots(
            np.array([slotted.slot[c[0]] for c in credits]), np.array(columns), np.array([c[2] for c in credits])
        )

    assert one.time.tolist() == slotted.time.tolist()
    assert one.worker_time.tolist() == slotted.worker_time.tolist()
    assert one.worker_time.tolist() != [0.0, 0.0]  # something was credited
    assert slotted.column("tpu") is None
    before = one.time.tolist(), one.worker_time.tolist()
    for run, kind, sec in (("zz", "v100", 50.0), ("d", "tpu", 10.0), ("a", "k80", 0.0)):
        one.ran(run, kind, sec)
    assert (one.time.tolist(), one.worker_time.tolist()) == before


def test_crediting_a_slot_no_job_holds_or_a_run_twice_is_refused_and_credits_nothing() -> None:
    book = ledger("a", "b")
    book.plan(0.0, [V100], {})
    gone = book.slot["b"]
    book.leave("b")
    before = book.time.tolist(), book.worker_time.tolist()
    a, v100 = book.slot["a"], book.column("v100")
    for slots, columns, seconds, says in (
        ([a, gone], [v100, v100], [1.0, 1.0], "no active job"),
        ([a], [5], [1.0], "no chip type"),
        ([a, a], [v100, v100], [1.0, 2.0], "more than once"),
        ([a], [v100], [1.0, 2.0], "one length"),
    ):
        with pytest.raises(ValueError, match=says):
            book.ran_slots(np.array(slots), np.array(columns), np.array(seconds))
    assert (book.time.tolist(), book.worker_time.tolist()) == before


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
