"""How long an attempt has to go to the step it trains to, at its measured pace (metrics.progress.finish_eta_s)."""

from __future__ import annotations

import pytest

from crossrail.metrics.progress import Beat, finish_eta_s


@pytest.mark.parametrize(
    ("first", "last", "total", "now", "eta"),
    [
        pytest.param((0.0, 0), (50.0, 100), 200, 50.0, 50.0, id="two steps a second, 100 to go: 50 s"),
        pytest.param((0.0, 0), (50.0, 100), 200, 70.0, 30.0, id="counted from now, not from the last report"),
        pytest.param((0.0, 0), (50.0, 100), 200, 500.0, 0.0, id="overdue: never negative"),
        pytest.param((0.0, 10), (50.0, 200), 200, 60.0, 0.0, id="the total reached"),
        pytest.param(None, (50.0, 250), 200, 60.0, 0.0, id="past the total with one report"),
        pytest.param((0.0, 10), (50.0, 100), None, 60.0, None, id="no total reported"),
        pytest.param(None, (50.0, 100), 200, 60.0, None, id="one report: no pace"),
        pytest.param((50.0, 100), (50.0, 100), 200, 60.0, None, id="the same report twice: no pace"),
        pytest.param((0.0, 100), (50.0, 100), 200, 60.0, None, id="no step made: no pace"),
    ],
)
def test_the_eta_is_the_steps_left_at_the_pace_between_the_first_and_last_report(
    first: Beat | None, last: Beat | None, total: int | None, now: float, eta: float | None
) -> None:
    assert finish_eta_s(first, last, total, now) == eta
