"""Placement and start estimates for a whole queue at once: what the agent runs outside the cycle.

  1. Waits: forward-simulate every pending run on the pools it can use (each held to its current pool,
     if it has one), recording when each pool could first start it.
  2. Choose: each run's pool under its objective from those waits (estimate.estimate_placements), with
     the preferred accelerator as a prior and hysteresis against moving a placed run.
  3. Starts: simulate again with every run on its chosen pool: the start `crossrail queue` shows.

Costs two forward simulations and one choice per run: O(n log n) in runs pending and running.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from crossrail.scheduling.choice import Choice, estimate_placements
from crossrail.scheduling.feasibility import gang_problem, held_chips
from crossrail.scheduling.scoring import PlacementWork, PoolInfo, run_time_s
from crossrail.scheduling.starts import estimate_starts
from crossrail.scheduling.timeline import Busy, StartEstimate, Waiting


@dataclass(frozen=True)
class Plan:
    """Each pending run's placement (with its explanation) and its estimated start there."""

    choices: dict[str, Choice]
    starts: dict[str, StartEstimate]

    def moved(self) -> list[Choice]:
        return [c for c in self.choices.values() if c.moved and c.pool is not None]


def plan(
    works: Sequence[PlacementWork],
    running: Iterable[Busy],
    pools: Sequence[PoolInfo],
    now: float,
    *,
    hysteresis: float = 0.1,
    min_gain_s: float = 0.0,
    prefer_margin: float = 0.25,
    unknown_duration_s: float = 3600.0,
    explain_all: bool = True,
) -> Plan:
    """Place every pending run and estimate its start (see the module docstring for the steps).

    With `explain_all` each choice lists every pool of the fleet (those it cannot use with why);
    without, only the pools it could start on and its current one, which keeps large fleets fast.
    """
    running = list(running)
    fits: dict[tuple[object, ...], list[PoolInfo]] = {}
    usable = {w.run: _usable(w, pools, fits) for w in works}
    capacity = {p.name: p.capacity for p in pools}
    held = (_waiting(w, usable[w.run], w.current, capacity) for w in works)
    first = estimate_starts(held, running, pools, now, unknown_duration_s=unknown_duration_s)
    by_name = {p.name: p for p in pools}
    choices = {}
    for w in works:
        waits = {name: at - now for name, at in first[w.run].by_pool.items()}
        shown: Sequence[PoolInfo] = pools
        if not explain_all:
            shown = [by_name[name] for name in usable[w.run]]
            if w.current in by_name and w.current not in usable[w.run]:
                shown.append(by_name[w.current])
        choices[w.run] = estimate_placements(
            w, shown, waits, hysteresis=hysteresis, min_gain_s=min_gain_s, prefer_margin=prefer_margin
        )
    pinned = (_waiting(w, usable[w.run], choices[w.run].pool, capacity) for w in works)
    starts = estimate_starts(pinned, running, pools, now, unknown_duration_s=unknown_duration_s)
    return Plan(choices, starts)


def _usable(
    work: PlacementWork, pools: Sequence[PoolInfo], fits: dict[tuple[object, ...], list[PoolInfo]]
) -> dict[str, float | None]:
    """Pools the run could start on, preferred accelerator first, each with its run time there.

    Runs of the same shape share one list of pools (`fits`): a queue of many runs filters the fleet once.
    """
    key = (work.chips, work.parts, work.allow, work.prefer, work.pools)
    found = fits.get(key)
    if found is None:
        found = fits[key] = sorted(
            (
                p
                for p in pools
                if not p.drained
                and gang_problem(work.gangs, p.capacity) is None
                and (work.allow is None or p.accelerator in work.allow)
                and (work.pools is None or p.name in work.pools)
            ),
            key=lambda p: p.accelerator != work.prefer,
        )
    anchors = pools if work.measured or work.scaling else ()
    return {p.name: run_time_s(work, p, anchors)[0] for p in found}


def _waiting(
    work: PlacementWork, durations: dict[str, float | None], pool: str | None, capacity: dict[str, int]
) -> Waiting:
    pinned = pool if pool in durations else None
    room = [capacity[name] for name in ([pinned] if pinned else durations)] or [work.chips]
    chips = held_chips(work.chips, work.gangs, min(room))  # a pipeline larger than its pool holds the pool
    return Waiting(work.run, chips, durations, work.rank, work.queued_at, pinned)


def with_current(works: Iterable[PlacementWork], current: dict[str, str]) -> list[PlacementWork]:
    """`works` with each run's current pool set from `current` (run -> pool)."""
    return [replace(w, current=current.get(w.run, w.current)) for w in works]
