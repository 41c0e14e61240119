"""The event engine: virtual time, deterministic ties, lazy cancellation, run(until)."""

from __future__ import annotations

import math

import pytest

from crossrail.core.clock import Clock
from crossrail.sim.engine import COMPACT_AT, LATE, URGENT, Engine


def test_events_at_one_instant_run_by_priority_then_in_the_order_scheduled() -> None:
    engine, seen = Engine(), []
    for name in ("b", "a", "c"):
        engine.schedule(5.0, lambda n=name: seen.append(n))
    engine.schedule(5.0, lambda: seen.append("cycle"), LATE)
    engine.schedule(5.0, lambda: seen.append("failure"), URGENT)
    engine.run()

    assert seen == ["failure", "b", "a", "c", "cycle"]
    assert engine.now() == 5.0


def test_a_cancelled_timer_never_runs_and_is_not_counted() -> None:
    engine, seen = Engine(), []
    timer = engine.schedule(1.0, lambda: seen.append("cancelled"))
    engine.schedule(2.0, lambda: seen.append("kept"))
    timer.cancel()
    engine.run()

    assert seen == ["kept"]
    assert engine.steps == 1


def test_run_until_stops_the_clock_there_and_leaves_later_events() -> None:
    engine, seen = Engine(), []
    engine.schedule(10.0, lambda: seen.append(10))
    engine.schedule(30.0, lambda: seen.append(30))
    engine.run(until=20.0)

    assert (seen, engine.now(), engine.peek()) == ([10], 20.0, 30.0)


def test_the_engine_is_the_clock_the_agent_reads_and_never_goes_back() -> None:
    engine: Clock = Engine(start=100.0)
    assert engine.now() == 100.0
    with pytest.raises(ValueError, match="never goes back"):
        Engine(start=100.0).schedule(50.0, lambda: None)
    assert Engine().peek() == math.inf
    with pytest.raises(IndexError):
        Engine().step()


def test_sweeping_out_cancelled_timers_changes_no_event_and_no_order() -> None:
    """A simulation that stops every run each round leaves their end timers behind; the engine sweeps them
    out once they fill the heap, and what runs, and in what order, is as without the sweep."""
    engine, seen = Engine(), []
    kept = []
    for i in range(3 * COMPACT_AT):
        timer = engine.schedule(float(i % 97), lambda i=i: seen.append(i), LATE if i % 3 else URGENT)
        if i % 5:
            timer.cancel()
        else:
            kept.append((float(i % 97), LATE if i % 3 else URGENT, i))
    engine.run()

    assert engine.pending < 3 * COMPACT_AT  # swept at least once
    assert seen == [i for _, _, i in sorted(kept)]
    assert engine.steps == len(kept)
