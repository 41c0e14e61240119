"""Metrics by any grouping of runs (stage, pool, team, chip type, framework, precision, time window)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from crossrail.errors import UsageError
from crossrail.metrics.registry import METRICS
from crossrail.metrics.runs import RunFacts

DIMENSIONS = ("stage", "pool", "team", "experiment", "outcome", "accelerator", "chip_type", "framework", "precision")
"""What runs can be grouped and selected by; all but stage, team, experiment and outcome are the last attempt's."""
WINDOW = "window"


@dataclass(frozen=True)
class Selection:
    """Which runs: equal dimensions (`stage=post_training,pool=h100`) and a submit-time window [since, until)."""

    equal: dict[str, str] = field(default_factory=dict)
    since: float | None = None
    until: float | None = None

    def admits(self, run: RunFacts) -> bool:
        submitted = run.submitted_ts
        if self.since is not None and (submitted is None or submitted < self.since):
            return False
        if self.until is not None and (submitted is None or submitted >= self.until):
            return False
        return all(run.dimension(k) == v for k, v in self.equal.items())

    def pick(self, runs: Sequence[RunFacts]) -> list[RunFacts]:
        return [r for r in runs if self.admits(r)]

    def misspelt(self, runs: Sequence[RunFacts]) -> list[str]:
        """For each filter whose value no run among `runs` has, but one close to it does: `team='alignmnet': did
        you mean 'alignment'?` (an empty selection is otherwise taken at its word)."""
        from crossrail.spec.problems import did_you_mean  # only when a selection picked nothing

        said = []
        for key, value in self.equal.items():
            values = sorted({run.dimension(key) for run in runs})
            close = None if value in values else did_you_mean(value, values)
            if close is not None:
                said.append(f"no run has {key}={value!r}; {close}")
        return said

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.equal.items()]
        parts += [f"{k}={_date(v)}" for k, v in (("since", self.since), ("until", self.until)) if v is not None]
        return ",".join(parts) or "all runs"


def parse_selection(text: str, where: str = "selection") -> Selection:
    """`stage=post_training,pool=h100,since=2026-11-01,until=2026-12-01,team=vision` -> Selection.

    Dates are ISO 8601 (UTC when no zone is given) or seconds since the epoch. Every problem is named at once.
    """
    equal: dict[str, str] = {}
    times: dict[str, float] = {}
    problems: list[str] = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not value:
            problems.append(f"{item!r} is not KEY=VALUE")
        elif key in ("since", "until"):
            try:
                times[key] = _timestamp(value)
            except ValueError:
                problems.append(f"{key}={value!r} is not a date (write 2026-11-01 or 2026-11-01T12:00)")
        elif key in DIMENSIONS:
            equal[key] = value
        else:
            from crossrail.spec.problems import did_you_mean

            keys = (*DIMENSIONS, "since", "until")
            problems.append(f"unknown key {key!r}; {did_you_mean(key, keys) or 'keys are ' + ', '.join(keys)}")
    if problems:
        raise UsageError(f"{where} {text!r}: " + "; ".join(problems))
    return Selection(equal, times.get("since"), times.get("until"))


@dataclass(frozen=True)
class Row:
    """One group: its key (dimension -> value), how many runs it holds and each metric's value (None: no data)."""

    key: dict[str, str]
    runs: int
    values: dict[str, float | None]

    def as_dict(self) -> dict[str, Any]:
        return {**self.key, "runs": self.runs, **self.values}


@dataclass(frozen=True)
class Table:
    by: tuple[str, ...]
    metrics: tuple[str, ...]
    rows: list[Row]

    def row(self, **key: str) -> Row | None:
        return next((r for r in self.rows if all(r.key.get(k) == v for k, v in key.items())), None)

    def as_dict(self) -> dict[str, Any]:
        return {"by": list(self.by), "metrics": list(self.metrics), "rows": [r.as_dict() for r in self.rows]}


def table(
    runs: Sequence[RunFacts],
    by: Sequence[str] = ("stage", "pool"),
    *,
    select: Selection | None = None,
    window_s: float | None = None,
    metrics: Sequence[str] | None = None,
) -> Table:
    """The named metrics (default: all) of the selected runs, one row per group, rows sorted by key.

    `by` names dimensions of DIMENSIONS and `window`, the start of the `window_s`-long span (since the epoch)
    in which a run was submitted. A run counts in one group: every number of it goes where its last attempt ran.
    """
    names = tuple(metrics) if metrics is not None else tuple(METRICS)
    _check(by, names, window_s)
    chosen = select.pick(runs) if select is not None else list(runs)
    groups: dict[tuple[str, ...], list[RunFacts]] = {}
    for run in chosen:
        groups.setdefault(tuple(_key(run, d, window_s) for d in by), []).append(run)
    rows = [
        Row(dict(zip(by, key, strict=True)), len(members), {n: METRICS[n].value(members) for n in names})
        for key, members in sorted(groups.items())
    ]
    return Table(tuple(by), names, rows)


def _check(by: Sequence[str], names: Sequence[str], window_s: float | None) -> None:
    problems = [f"unknown dimension {d!r} (choose from {', '.join((*DIMENSIONS, WINDOW))})" for d in by
                if d not in DIMENSIONS and d != WINDOW]  # fmt: skip
    problems += [f"unknown metric {n!r}" for n in names if n not in METRICS]
    if WINDOW in by and (window_s is None or not window_s > 0):
        problems.append("grouping by window needs window_s > 0")
    if problems:
        raise UsageError("; ".join(problems))


def _key(run: RunFacts, dimension: str, window_s: float | None) -> str:
    if dimension != WINDOW:
        return run.dimension(dimension)
    if run.submitted_ts is None or window_s is None:
        return "-"
    return _date(math.floor(run.submitted_ts / window_s) * window_s)


def _timestamp(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        stamp = datetime.fromisoformat(text)
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


def _date(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
