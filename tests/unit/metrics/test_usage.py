"""Chip-hours and cost per team x stage x pool over a window, on hand-told stories with known answers."""

from __future__ import annotations

import pytest

from crossrail.metrics.usage import Usage, by_team, usage

from .stories import T0, Story, tell

HOUR = 3600.0


def test_a_run_that_moves_pools_after_a_preemption_bills_each_pool_its_own_hours_and_price() -> None:
    run = Story("pre-1", team="vision", chips=8).start("tpu-a", price=2.0).wait(HOUR).preempt().retry()
    run.wait(600).start("h100", price=3.0).wait(2 * HOUR).succeed()

    rows = usage(tell(run), until=run.now)

    assert rows == [
        Usage("vision", "pretrain", "h100", chip_hours=16.0, cost=48.0, attempts=1),
        Usage("vision", "pretrain", "tpu-a", chip_hours=8.0, cost=16.0, attempts=1),
    ]


def test_the_window_clips_attempts_and_a_running_one_counts_up_to_its_end() -> None:
    early = Story("a-1", team="nlp", chips=4).start(price=1.0).wait(2 * HOUR).succeed()
    running = Story("b-1", team="vision", chips=2, at=T0 + HOUR).start(price=5.0)
    cancelled = Story("c-1", team="nlp", chips=4, at=T0).start(price=1.0).wait(HOUR / 2).cancel(running=True)
    events = tell(early, running, cancelled)

    window = usage(events, until=T0 + 3 * HOUR, since=T0 + HOUR)
    closed_only = usage(events, until=T0 + 3 * HOUR, since=T0 + HOUR, running=False)

    assert by_team(window) == {"nlp": (4.0, 4.0), "vision": (4.0, 20.0)}  # a-1's second hour; b-1's two
    assert by_team(closed_only) == {"nlp": (4.0, 4.0)}


@pytest.mark.parametrize(
    ("until", "expected"),
    [
        pytest.param(T0 + HOUR / 2, 4.0, id="before-the-end-it-is-still-running"),
        pytest.param(T0 + 3 * HOUR, 8.0, id="after-the-end"),
    ],
)
def test_events_after_until_are_not_read(until: float, expected: float) -> None:
    run = Story("a-1", chips=8).start(price=1.0).wait(HOUR).fail()

    (row,) = usage(tell(run), until=until)

    assert row.chip_hours == expected


def test_teams_can_come_from_beside_the_log_when_it_holds_only_the_attempts_events() -> None:
    run = Story("a-1", team="nlp", chips=4).start(price=1.0).wait(HOUR).succeed()
    attempts_only = [e for e in tell(run) if e.type not in ("submitted", "queued")]

    assert by_team(usage(attempts_only, until=run.now)) == {"-": (4.0, 4.0)}
    assert by_team(usage(attempts_only, until=run.now, teams_of={"a-1": "nlp"})) == {"nlp": (4.0, 4.0)}
