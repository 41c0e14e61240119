"""Calendar periods in UTC (day, ISO week from Monday, month): where the one holding a time starts and ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

Period = Literal["day", "week", "month"]
PERIODS: tuple[Period, ...] = ("day", "week", "month")


def period_bounds(period: Period, ts: float) -> tuple[float, float]:
    """(start, end) in epoch seconds of the UTC `period` that holds `ts`; start <= ts < end."""
    at = datetime.fromtimestamp(ts, UTC)
    day = at.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        start, end = day, day + timedelta(days=1)
    elif period == "week":
        start = day - timedelta(days=day.weekday())
        end = start + timedelta(days=7)
    elif period == "month":
        start = day.replace(day=1)
        end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    else:
        raise ValueError(f"unknown period {period!r}; periods are {', '.join(PERIODS)}")
    return start.timestamp(), end.timestamp()


def format_period(period: Period, start: float) -> str:
    """A period as people name it: `2026-12-01` (day), `week of 2026-11-30`, `2026-12` (month)."""
    at = datetime.fromtimestamp(start, UTC)
    if period == "month":
        return at.strftime("%Y-%m")
    if period == "week":
        return f"week of {at:%Y-%m-%d}"
    return at.strftime("%Y-%m-%d")
