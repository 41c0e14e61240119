"""Changing the fleet of a workspace: apply a new fleet file, drain and undrain pools, reserve capacity.

The workspace's fleet.yaml is the desired state. Each operation validates the whole new fleet before it
writes anything, replaces the file atomically, and records every capacity change as an event. A running
agent notices the new file on its next pass and moves its scheduling core to it.
"""

from __future__ import annotations

import datetime as dt
import io
import os
from pathlib import Path
from typing import Any

from crossrail.control.ops.workspace import Workspace
from crossrail.control.service import Service
from crossrail.core import Event, EventType, parse_duration, validate_team
from crossrail.errors import Problem, ProblemCode, SpecError, UsageError
from crossrail.scheduling import Scheduler, fleet_changes
from crossrail.spec import Fleet, parse_document, parse_fleet
from crossrail.spec.loader import read_text
from crossrail.spec.problems import did_you_mean

CAPACITY_KINDS = ("pool_added", "pool_removed", "capacity", "drain", "undrain")


def apply(service: Service, ws: Workspace, path: Path) -> list[str]:
    """Replace the workspace fleet with the file at `path`; returns what changed."""
    text = read_text(path)  # a FIFO, device, directory or huge file is refused, never read
    new = parse_fleet(parse_document(text, str(path)))
    return _commit(service, ws, new, text, reason=f"fleet applied from {path}", source=str(path))


def set_drained(service: Service, ws: Workspace, pool: str, drained: bool) -> list[str]:
    data = _data(ws)
    pools = data["spec"]["pools"]
    match = [p for p in pools if p.get("name") == pool]
    if not match:
        names = [p["name"] for p in pools]
        raise UsageError(f"no pool {pool!r} in the fleet; {did_you_mean(pool, names) or 'pools: ' + ', '.join(names)}")
    if drained:
        match[0]["drained"] = True
    else:
        match[0].pop("drained", None)  # the default, so an undrained file reads as it did before the drain
    return _commit_data(service, ws, data, reason=("drained" if drained else "undrained") + " by user")


def reserve(
    service: Service,
    ws: Workspace,
    *,
    pool: str,
    chips: int,
    start: str,
    duration: str,
    team: str | None,
    name: str | None,
) -> list[str]:
    data = _data(ws)
    when = _start(start, service.clock.now())
    held = data["spec"].setdefault("reservations", []) or []
    data["spec"]["reservations"] = held
    label = name or f"{pool}-{len(held) + 1}"
    entry: dict[str, Any] = {"name": label, "pool": pool, "chips": chips, "start": when, "duration": duration}
    if team:
        entry["team"] = team
    held.append(entry)
    try:
        parse_duration(duration)  # a clear error before the fleet's own checks
    except ValueError as exc:
        raise UsageError(f"duration: {exc}") from None
    return _commit_data(service, ws, data, reason=f"reservation {label}")


def status(service: Service) -> dict[str, Any]:
    """Pools with their chips in use, reservations with their state at `now`, and each queue's quota per pool
    with the chips its running attempts use there."""
    from crossrail.scheduling import Request, Running

    now = service.clock.now()
    fleet = service.fleet
    scheduler = Scheduler.from_fleet(fleet)
    running = []
    active = service.store.active_attempts()
    runs = service.store.runs_by_id(a.run_id for a in active)
    for a in active:
        r = runs[a.run_id]
        if a.pool in fleet.pool_names:
            req = Request(r.id, r.queue, a.chips, priority=r.priority, team=r.team)
            running.append(Running(req, a.pool, a.chips, a.started_at or now, None))
    scheduler.sync([], running, now)
    return {
        "pools": [_plain(p) for p in scheduler.pool_status()],
        "reservations": [_plain(r) for r in scheduler.reservation_status(now)],
        "quotas": [_plain(q) for q in scheduler.quota_status()],
    }


def _commit_data(service: Service, ws: Workspace, data: dict[str, Any], reason: str) -> list[str]:
    """Write the edited fleet back in place: comments, key order and layout of the rest are kept."""
    out = io.StringIO()
    _round_trip().dump(data, out)
    text = out.getvalue()
    new = parse_fleet(parse_document(text, str(ws.fleet_path)))
    return _commit(service, ws, new, text, reason=reason, source=str(ws.fleet_path))


def _commit(service: Service, ws: Workspace, new: Fleet, text: str, *, reason: str, source: str) -> list[str]:
    old = service.fleet
    _check_new_teams(old, new, source)
    Scheduler.from_fleet(new)  # the core accepts it (reservations fit, pools exist) before anything is written
    changes = fleet_changes(old, new)
    tmp = ws.fleet_path.with_name(f".{ws.fleet_path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, ws.fleet_path)
    now = service.clock.now()
    events = [
        _capacity_event(old, new, c.name, str(c), reason=reason, now=now) for c in changes if c.kind in CAPACITY_KINDS
    ]
    if events:
        service.store.append_events(events)
    service.reload_fleet()
    return [str(c) for c in changes]


def _check_new_teams(old: Fleet, new: Fleet, source: str) -> None:
    """A team the fleet names for the first time is a DNS-1123 label; teams it named already keep their names."""
    known = set(old.spec.teams)
    problems = []
    for team in new.spec.teams:
        why = None if team in known else validate_team(team)
        if why is not None:
            problems.append(
                Problem(
                    source,
                    "spec",
                    f"a new team {why}",
                    fix="name the team e.g. `ml-research`",
                    code=ProblemCode.BAD_VALUE,
                )
            )
    if problems:
        raise SpecError(problems)


def _capacity_event(old: Fleet, new: Fleet, pool: str, detail: str, *, reason: str, now: float) -> Event:
    def usable(f: Fleet) -> int:
        p = next((p for p in f.spec.pools if p.name == pool), None)
        return 0 if p is None or p.drained else p.chips

    data = {"pool": pool, "chips_before": usable(old), "chips_after": usable(new), "reason": f"{reason}: {detail}"}
    return Event(EventType.CAPACITY_CHANGED, now, None, None, data)


def _data(ws: Workspace) -> dict[str, Any]:
    """The workspace fleet as an editable round-trip tree, after the same safe checks every load gets."""
    raw = ws.fleet_path.read_bytes()
    parse_document(raw, str(ws.fleet_path))  # hostile or malformed files are refused here, before ruamel sees them
    data: dict[str, Any] = _round_trip().load(raw.decode("utf-8"))
    return data


def _round_trip() -> Any:
    from ruamel.yaml import YAML

    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096
    rt.indent(mapping=2, sequence=4, offset=2)
    return rt


def _start(text: str, now: float) -> str:
    if text == "now":
        return dt.datetime.fromtimestamp(now, tz=dt.UTC).isoformat()
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"start {text!r} is not a time; write 2026-12-01T00:00:00+00:00 or now") from None
    if when.tzinfo is None:
        raise UsageError(f"start {text!r} has no time zone; add one, e.g. {text}+00:00")
    return when.isoformat()


def _plain(obj: Any) -> dict[str, Any]:
    from dataclasses import asdict, is_dataclass

    return asdict(obj) if is_dataclass(obj) and not isinstance(obj, type) else dict(vars(obj))
