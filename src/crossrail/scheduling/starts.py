"""When each pending run is expected to start, and where: a forward simulation of the queues over each pool's
timeline (timeline.py), without backfill past a waiting gang or, with `backfill`, greedily (backfill.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from crossrail.scheduling.backfill import greedy_starts
from crossrail.scheduling.timeline import Busy, StartEstimate, TimelinePool, Waiting, timelines


def estimate_starts(
    pending: Iterable[Waiting],
    running: Iterable[Busy],
    pools: Iterable[TimelinePool],
    now: float,
    *,
    unknown_duration_s: float = 3600.0,
    backfill: bool = False,
) -> dict[str, StartEstimate]:
    """Forward-simulate the queues: each pending run's expected start, pool and end.

    1. Every pool starts with its running work, which frees its chips at its expected end (an unknown or
       past end counts as `unknown_duration_s` from now, or as now when it is overdue).
    2. Pending runs go in admission order (priority rank, time queued, run). Each starts at the earliest
       time one of its candidate pools has its chips free, never before a run ahead of it on that pool
       (no backfill past a waiting gang), and holds them for its duration there (unknown: the default).
       With `backfill`, instead, whenever chips free up the first runs in admission order that fit start
       (a small run passes a waiting gang, as heads of other queues and best-effort queues do); see
       backfill.py.
    Drained pools and pools too small for the run are never candidates. Quotas, reservations and
    preemption are not modelled (see docs/scheduling.md for what that means for the estimates).
    """
    lines = timelines(running, pools, now, unknown_duration_s)
    ordered = sorted(pending, key=lambda w: (w.rank, w.queued_at, w.run))
    if backfill:
        return greedy_starts(ordered, lines, now, unknown_duration_s)
    out: dict[str, StartEstimate] = {}
    for wait in ordered:
        by_pool: dict[str, float] = {}
        for name in wait.durations:
            line = lines.get(name)
            at = line.earliest(wait.chips) if line is not None else None
            if at is not None:
                by_pool[name] = at
        pick = _pick(wait, by_pool)
        if pick is None:
            out[wait.run] = StartEstimate(wait.run, None, None, None, by_pool)
            continue
        start = by_pool[pick]
        duration = wait.durations[pick]
        end = start + (duration if duration is not None else unknown_duration_s)
        lines[pick].start(wait.chips, start, end)
        out[wait.run] = StartEstimate(wait.run, pick, start, end, by_pool)
    return out


def _pick(wait: Waiting, by_pool: Mapping[str, float]) -> str | None:
    if wait.pool is not None and wait.pool in by_pool:
        return wait.pool
    best: str | None = None
    for name, at in by_pool.items():  # insertion order: the earlier pool wins a tie
        if best is None or at < by_pool[best]:
            best = name
    return best
