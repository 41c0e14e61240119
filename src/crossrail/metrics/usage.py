"""Chip-hours and cost per team x stage x pool over a time window, folded from the event log (pure).

An attempt counts from its `started` event to its end (`succeeded`, `failed`, `preempted`, `cancelled`,
`suspended`, or the next start of the same part), clipped to the window; one still running counts up to `until`.
A pipeline's parts run at once, each an attempt of its own: an end that names an attempt ends that attempt, and
the run's end (or an end naming no attempt) ends every attempt of the run still open, as the parts stopped
with their run record no end of their own.
Its price is the `cost_per_chip_hour` its `started` (or `placed`) event carries, as in `Report.cost`; a
`resized` event naming it changes its chips from then on (each size billed for its own time).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from crossrail.core.events import Event, EventType
from crossrail.metrics.accumulator import number_field, text_field
from crossrail.metrics.progress import Resize, chip_seconds
from crossrail.metrics.report import NO_POOL, UNKNOWN_STAGE

NO_TEAM = "-"
"""The team of runs whose log names none."""

_ENDS = frozenset(
    {EventType.SUCCEEDED, EventType.FAILED, EventType.PREEMPTED, EventType.CANCELLED, EventType.SUSPENDED}
)


@dataclass(frozen=True)
class Usage:
    """What one team's runs of one stage used on one pool inside the window."""

    team: str
    stage: str
    pool: str
    chip_hours: float
    cost: float
    attempts: int
    """Attempts that ran inside the window, running ones included."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "team": self.team,
            "stage": self.stage,
            "pool": self.pool,
            "chip_hours": self.chip_hours,
            "cost": self.cost,
            "attempts": self.attempts,
        }


@dataclass
class _Open:
    key: tuple[str, str, str]
    number: int | None
    chips: float
    price: float
    started: float
    part: str | None
    resizes: list[Resize] | None = None

    def resized(self, e: Event) -> None:
        """Its chips from `e`'s time on, as `e` (a `resized` event naming it) says."""
        chips = number_field(e.data, "chips", -1.0)
        if chips >= 0 and e.ts >= self.started and (not self.resizes or e.ts >= self.resizes[-1][0]):
            self.resizes = [*(self.resizes or ()), (e.ts, chips)]


def usage(
    events: Iterable[Event],
    until: float,
    since: float | None = None,
    *,
    running: bool = True,
    teams_of: Mapping[str, str | None] | None = None,
) -> list[Usage]:
    """Usage per (team, stage, pool) of attempts inside [since, until], sorted; `running=False` leaves out
    attempts with no end by `until` (a caller that counts those itself). `teams_of` gives runs' teams when
    `events` leave out `submitted` and `queued` (a caller that reads only attempts' events)."""
    lo = -math.inf if since is None else since
    teams: dict[str, str] = {run: team or NO_TEAM for run, team in (teams_of or {}).items()}
    stages: dict[str, str] = {}
    placed: dict[str, dict[str, Any]] = {}
    open_: dict[str, dict[int | None, _Open]] = {}  # run -> attempt number -> its open attempt
    rows: dict[tuple[str, str, str], list[float]] = {}

    def close(run: str, number: int | None, end: float) -> None:
        att = open_[run].pop(number)
        if not open_[run]:
            del open_[run]
        span = min(end, until) - max(att.started, lo)
        if span < 0 or end < lo:
            return
        row = rows.setdefault(att.key, [0.0, 0.0, 0.0])
        hours = chip_seconds(att.chips, att.started, att.resizes, lo, min(end, until)) / 3600
        row[0] += hours
        row[1] += hours * att.price
        row[2] += 1

    for e in events:
        if e.ts > until or e.run is None:
            continue
        run = e.run
        if e.type in (EventType.SUBMITTED, EventType.QUEUED):
            teams.setdefault(run, text_field(e.data, "team", NO_TEAM))
            stages.setdefault(run, text_field(e.data, "stage", UNKNOWN_STAGE))
        elif e.type is EventType.PLACED:
            placed[run] = e.data
        elif e.type is EventType.STARTED:
            part = e.data.get("part")
            for lost in [a.number for a in open_.get(run, {}).values() if a.part == part]:
                close(run, lost, e.ts)  # its end never reached the log: billed up to this start
            where = placed.get(run, {})
            pool = text_field(e.data, "pool", text_field(where, "pool", NO_POOL))
            key = (teams.get(run, NO_TEAM), stages.get(run, UNKNOWN_STAGE), pool)
            chips = number_field(e.data, "chips", number_field(where, "chips", 0.0))
            price = number_field(e.data, "cost_per_chip_hour", number_field(where, "cost_per_chip_hour", 0.0))
            open_.setdefault(run, {})[e.attempt] = _Open(key, e.attempt, chips, price, e.ts, part)
        elif e.type is EventType.RESIZED and e.attempt in open_.get(run, {}):
            open_[run][e.attempt].resized(e)
        elif e.type in _ENDS and run in open_:
            ended = e.attempt is None or _run_ends(e)
            for number in [n for n in open_[run] if ended or n == e.attempt]:
                close(run, number, e.ts)
    if running:
        for run, atts in list(open_.items()):
            for number in list(atts):
                close(run, number, until)
    return [Usage(*key, row[0], row[1], int(row[2])) for key, row in sorted(rows.items())]


def _run_ends(e: Event) -> bool:
    """Whether end event `e` ends its run, not only its attempt: a failure or a pipeline part's success that
    says `final: false` leaves the run going (a retry follows, or the pipeline runs on); a preemption never ends
    it."""
    if e.type is EventType.PREEMPTED:
        return False
    return e.data.get("final") is not False


def by_team(rows: Iterable[Usage]) -> dict[str, tuple[float, float]]:
    """(chip-hours, cost) per team, summed over stages and pools."""
    out: dict[str, tuple[float, float]] = {}
    for r in rows:
        hours, cost = out.get(r.team, (0.0, 0.0))
        out[r.team] = (hours + r.chip_hours, cost + r.cost)
    return out
