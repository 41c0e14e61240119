"""The pure base: durations, topologies, names and run ids, the manual clock, the run state fold."""

from __future__ import annotations

import pytest

from crossrail.core import (
    Event,
    EventType,
    ManualClock,
    RunState,
    format_duration,
    format_money,
    parse_duration,
    parse_run_id,
    parse_topology,
    run_id,
    validate_name,
)
from crossrail.core.events import state_after


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("10m", 600), ("6h", 21600), ("2d", 172800), ("1h30m", 5400), ("45", 45), (120, 120), ("1.5h", 5400)],
)
def test_durations_people_write_become_seconds(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "6 hours", "h", "-5m", "0s", 0, True, 10**400, "1h30"])
def test_malformed_durations_are_value_errors_that_show_the_accepted_forms(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "-"), (0, "0s"), (0.25, "0.25s"), (2.5, "2.5s"), (12, "12s"), (59.7, "1m"), (200, "3m20s"),
     (3599.6, "1h"), (5400, "1h30m"), (7500, "2h05m"), (21600, "6h"), (86399, "1d"), (90061, "1d01h")],
)  # fmt: skip
def test_durations_are_written_one_way_in_their_two_largest_units(seconds: float | None, shown: str) -> None:
    assert format_duration(seconds) == shown
    if seconds:  # what is shown reads back, to the precision shown
        assert parse_duration(shown) == pytest.approx(seconds, rel=0.02, abs=0.5)


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [(1234.5, "USD", "$1,234.50"), (0.124, "EUR", "€0.12"), (12.5, "CHF", "12.50 CHF"), (-3.0, "GBP", "-£3.00"),
     (None, "USD", "-"), (float("nan"), "EUR", "-")],
)  # fmt: skip
def test_money_is_written_in_the_fleets_currency(amount: float | None, currency: str, shown: str) -> None:
    assert format_money(amount, currency) == shown


def test_topologies_are_positive_integer_factors() -> None:
    assert parse_topology("2x2x1") == (2, 2, 1)
    for bad in ("2x0", "2xx2", "axb", "2x2x2x2x2"):
        with pytest.raises(ValueError, match="slice topology"):
            parse_topology(bad)


def test_names_are_dns_labels_short_enough_for_a_run_suffix() -> None:
    assert validate_name("posttrain-042") is None
    assert "lower-case" in (validate_name("Post_Train") or "")
    assert "at most 56" in (validate_name("a" * 57) or "")


def test_run_ids_round_trip() -> None:
    assert run_id("posttrain-042", 3) == "posttrain-042-3"
    assert parse_run_id("posttrain-042-3") == ("posttrain-042", 3)
    assert parse_run_id("posttrain") is None


def test_the_manual_clock_never_moves_backwards() -> None:
    clock = ManualClock(100.0)
    assert clock.advance(5) == 105.0
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="backwards"):
        clock.set(50.0)


@pytest.mark.parametrize(
    ("event", "after"),
    [
        pytest.param(Event(EventType.STARTED, 0), RunState.RUNNING, id="started-runs"),
        pytest.param(
            Event(EventType.FAILED, 0, data={"final": False}), RunState.QUEUED, id="a-retried-failure-requeues"
        ),
        pytest.param(Event(EventType.FAILED, 0, data={"final": True}), RunState.FAILED, id="a-final-failure-fails"),
        pytest.param(Event(EventType.PREEMPTED, 0), RunState.QUEUED, id="preemption-requeues"),
        pytest.param(Event(EventType.HEARTBEAT, 0), RunState.RUNNING, id="heartbeats-change-nothing"),
    ],
)
def test_the_run_state_fold(event: Event, after: RunState) -> None:
    assert state_after(RunState.RUNNING, event) is after
