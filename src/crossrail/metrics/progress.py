"""Useful progress of one attempt from the steps it reported: a step counts once, steps redone are lost work."""

from __future__ import annotations

import math
from collections.abc import Sequence

Beat = tuple[float, int]
"""(ts, step) of a progress report (a heartbeat)."""

Resize = tuple[float, float]
"""(ts, chips after) of a running attempt's `resized` event."""


def chip_seconds(chips: float, started: float, resizes: Sequence[Resize] | None, lo: float, hi: float) -> float:
    """Chip-seconds within [lo, hi] of an attempt that started at `started` on `chips` and was resized at each
    (ts, chips after) of `resizes`, in time order: each size counts for its own time."""
    if not resizes:
        return chips * max(0.0, hi - max(lo, started))
    total, since, size = 0.0, started, chips
    for ts, after in (*resizes, (math.inf, 0.0)):
        span = min(ts, hi) - max(since, lo)
        if span > 0:
            total += size * span
        since, size = max(ts, since), after
    return total


def mean_chips(chips: float, started: float, resizes: Sequence[Resize] | None, lo: float, hi: float) -> float:
    """The attempt's chips averaged over [lo, hi] (its chips when it was never resized or the span is empty)."""
    if not resizes or hi <= lo:
        return chips if not resizes else _size_at(chips, resizes, hi)
    return chip_seconds(chips, started, resizes, lo, hi) / (hi - lo)


def _size_at(chips: float, resizes: Sequence[Resize], ts: float) -> float:
    size = chips
    for at, after in resizes:
        if at > ts:
            break
        size = after
    return size


def step_work(
    chips: float, first: Beat | None, last: Beat | None, resume_step: int | None, high: int
) -> tuple[float, float] | None:
    """(useful chip-seconds, recomputed chip-seconds) of an attempt; None when its pace cannot be measured.

    The attempt resumed from step r (`resume_step`; 0 when it started afresh) and reached step s, after earlier
    attempts of its run reached step h (`high`): it did max(0, s − max(r, h)) steps for the first time and
    max(0, min(s, h) − r) again. Each is priced at the attempt's own pace between its first and last report
    (seconds per step) times its chips. Its allocated time besides (start-up, restore, checkpoints, steps
    after its last report) is neither useful nor recomputed: it is the rest of the lost time.
    """
    if first is None or last is None:
        return None
    (t0, s0), (t1, s1) = first, last
    if s1 <= s0 or t1 <= t0:
        return None
    start = resume_step if resume_step is not None else 0
    pace = chips * (t1 - t0) / (s1 - s0)
    return pace * max(0, s1 - max(start, high)), pace * max(0, min(s1, high) - start)


def step_of(data: object) -> int | None:
    """The integer `step` of an event's data (a heartbeat, a `resumed` report), else None."""
    step = data.get("step") if isinstance(data, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def finish_eta_s(first: Beat | None, last: Beat | None, total: int | None, now: float) -> float | None:
    """Seconds from `now` until an attempt reaches step `total`, at its pace between its first and last report
    (the pace `step_work` prices); 0 once it reached `total`; None when the total or the pace is unknown."""
    if total is None or last is None:
        return None
    if last[1] >= total:
        return 0.0
    if first is None:
        return None
    (t0, s0), (t1, s1) = first, last
    if s1 <= s0 or t1 <= t0:
        return None
    return max(0.0, t1 + (total - s1) * (t1 - t0) / (s1 - s0) - now)
