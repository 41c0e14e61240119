"""Runs: creating them (numbered per experiment, idempotent by key), reading them, moving their state."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import fields
from typing import Any

from sqlalchemy import Connection, func, insert, select, true, update
from sqlalchemy.exc import IntegrityError

from crossrail.core.events import Event
from crossrail.core.ids import is_uid, run_id
from crossrail.errors import (
    ConflictError,
    NotFoundError,
    StoreError,
)
from crossrail.store import schema as t
from crossrail.store.engine import StoreBase, chunks, reason
from crossrail.store.events import append, event_row, insert_events
from crossrail.store.joined import joined_runs
from crossrail.store.records import (
    NewRun,
    QueuedKey,
    RunRecord,
)


class RunRecords(StoreBase):
    """Mixed into Store: the runs table."""

    def create_runs(
        self, new: Sequence[NewRun], ts: float, events: Sequence[Sequence[Event]]
    ) -> list[tuple[RunRecord, bool]]:
        """Create runs, each with its opening events, in one transaction; returns (run, created) in order.

        A run whose idempotency key was already used returns the existing run instead (its events
        are not appended). Reusing a key for a different spec is a ConflictError.
        """
        for _attempt in range(5):
            batch: _Batch | None = None
            try:
                with self._write() as conn:
                    batch = _Batch(conn, ts)
                    created = batch.create(new, events)
                    joined_runs(created)
                return created
            except IntegrityError as exc:
                if batch is None or not self._numbers_taken(batch):  # not a race for run numbers: a real refusal
                    raise StoreError(f"cannot create the run: {reason(exc)}") from exc
        raise StoreError("cannot create the run: run numbers kept colliding with concurrent submissions")

    def _numbers_taken(self, batch: _Batch) -> bool:
        """Whether another submission took run numbers `batch` meant to use (so trying again picks new ones)."""
        if batch.numbers is None:
            return False
        with self._read() as conn:
            return _Batch(conn, batch.ts)._next_numbers(set(batch.numbers)) != batch.numbers

    def get_run(self, rid: str) -> RunRecord:
        with self._read() as conn:
            return self._run(conn, rid)

    def runs_keyed(self, prefix: str) -> list[RunRecord]:
        """The runs whose idempotency key starts with `prefix` (a sweep's members), oldest first."""
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        q = select(t.runs).where(t.runs.c.idempotency_key.like(escaped + "%", escape="\\"))
        with self._read() as conn:
            return [RunRecord.from_row(r) for r in conn.execute(q.order_by(t.runs.c.created_at, t.runs.c.id))]

    def _run(self, conn: Connection, rid: str) -> RunRecord:
        row = conn.execute(select(t.runs).where(t.runs.c.id == rid)).first()
        if row is None:
            raise NotFoundError(f"no run {rid!r}; `crossrail status` lists runs")
        return RunRecord.from_row(row)

    def find_run(self, ref: str, *, teams: Collection[str] | None = None) -> RunRecord | None:
        """The run with id `ref`, else the run with uid `ref`, else the latest run of the experiment named `ref`;
        with `teams`, only runs of those teams are found (a team-less run by no one that passes `teams`)."""
        if "\x00" in ref:  # no run's name holds NUL, and PostgreSQL refuses to compare one
            return None
        seen = true() if teams is None else t.runs.c.team.in_(sorted(teams))
        with self._read() as conn:
            row = conn.execute(select(t.runs).where(t.runs.c.id == ref, seen)).first()
            if row is None and is_uid(ref):
                row = conn.execute(select(t.runs).where(t.runs.c.uid == ref, seen)).first()
            if row is None:
                row = conn.execute(
                    select(t.runs).where(t.runs.c.experiment == ref, seen).order_by(t.runs.c.n.desc()).limit(1)
                ).first()
            return None if row is None else RunRecord.from_row(row)

    def run_names(self, *, teams: Collection[str] | None = None) -> list[str]:
        """The experiment names and run ids of runs of `teams` (every run without), for a did-you-mean."""
        seen = true() if teams is None else t.runs.c.team.in_(sorted(teams))
        with self._read() as conn:
            rows = conn.execute(select(t.runs.c.experiment, t.runs.c.id).where(seen)).all()
        return sorted({name for row in rows for name in row if name})

    def list_runs(
        self,
        *,
        states: Iterable[str] | None = None,
        stage: str | None = None,
        experiment: str | None = None,
        limit: int | None = None,
        newest_first: bool = True,
        team: str | None = None,
        before: tuple[float, str] | None = None,
        teams: Collection[str] | None = None,
    ) -> list[RunRecord]:
        """Runs in creation order (newest first by default), optionally filtered and limited; `before` keeps
        those created before (created_at, id), the last of a previous newest-first page; `teams` keeps runs of
        those teams only (a Sight's), picked by the query, so other teams' runs never fill the `limit`."""
        wanted = None if states is None else sorted({str(s) for s in states})
        if wanted is not None and limit is not None and len(wanted) > 1:
            # One index range per state, each stopped at `limit`, merged here: the database never
            # sorts every matching run to return a few (ix_runs_state_created).
            merged = [
                r
                for s in wanted
                for r in self.list_runs(
                    states=[s],
                    stage=stage,
                    experiment=experiment,
                    limit=limit,
                    newest_first=newest_first,
                    team=team,
                    before=before,
                    teams=teams,
                )
            ]
            merged.sort(key=lambda r: (r.created_at, r.id), reverse=newest_first)
            return merged[:limit]
        q = select(t.runs)
        if wanted is not None:
            q = q.where(t.runs.c.state.in_(wanted))
        if stage is not None:
            q = q.where(t.runs.c.stage == stage)
        if experiment is not None:
            q = q.where(t.runs.c.experiment == experiment)
        if team is not None:
            q = q.where(t.runs.c.team == team)
        if teams is not None:
            q = q.where(t.runs.c.team.in_(sorted(teams)))
        if before is not None:
            at, rid = before
            q = q.where((t.runs.c.created_at < at) | ((t.runs.c.created_at == at) & (t.runs.c.id < rid)))
        if newest_first:
            q = q.order_by(t.runs.c.created_at.desc(), t.runs.c.id.desc())
        else:
            q = q.order_by(t.runs.c.created_at.asc(), t.runs.c.id.asc())
        if limit is not None:
            q = q.limit(limit)
        with self._read() as conn:
            return [RunRecord.from_row(r) for r in conn.execute(q)]

    def queued_runs(self, ids: Iterable[str] | None = None) -> list[RunRecord]:
        """The queued runs (only those of `ids`, when given), oldest first, as `list_runs(states=["queued"],
        newest_first=False)` returns them, read for the queue view and placement: the spec is read once per
        spec digest and runs with the same digest share it, so a queue of sweeps reads each distinct spec
        once. Read the shared specs; never change them."""
        names = [f.name for f in fields(RunRecord)]
        read = [n for n in names if n != "spec"]
        spec_at, id_at, digest_at = names.index("spec"), read.index("id"), read.index("spec_digest")
        created_at = read.index("created_at")
        c = t.runs.c
        q = select(*(c[n] for n in read)).where(c.state == "queued")
        with self._read() as conn:
            if ids is None:
                rows = [list(row) for row in conn.execute(q.order_by(c.created_at.asc(), c.id.asc()))]
            else:
                rows = [
                    list(row) for chunk in chunks(sorted(set(ids))) for row in conn.execute(q.where(c.id.in_(chunk)))
                ]
                rows.sort(key=lambda row: (row[created_at], row[id_at]))
            first: dict[str, str] = {}  # spec digest -> a run with that spec
            for row in rows:
                first.setdefault(row[digest_at], row[id_at])
            specs: dict[str, Any] = {}
            for chunk in chunks(sorted(first.values())):
                specs.update(
                    (d, spec) for d, spec in conn.execute(select(c.spec_digest, c.spec).where(c.id.in_(chunk)))
                )
        out = []
        for row in rows:
            row.insert(spec_at, specs[row[digest_at]])
            out.append(RunRecord(*row))
        return out

    def queued_keys(self) -> list[QueuedKey]:
        """What orders the queue, for every queued run: its id, queue, priority, when it was queued
        (`updated_at`) and the parent it starts from; one light read, so the queue view plans only the runs
        ahead of those it shows."""
        c = t.runs.c
        q = select(c.id, c.queue, c.priority, c.updated_at, c.parent_run, c.parent_checkpoint)
        with self._read() as conn:
            return [QueuedKey(*row) for row in conn.execute(q.where(c.state == "queued")).fetchall()]

    def runs_by_id(self, ids: Iterable[str]) -> dict[str, RunRecord]:
        out: dict[str, RunRecord] = {}
        with self._read() as conn:
            for chunk in chunks(sorted(set(ids))):
                for row in conn.execute(select(t.runs).where(t.runs.c.id.in_(chunk))):
                    out[row.id] = RunRecord.from_row(row)
        return out

    def run_queues(self, ids: Iterable[str]) -> dict[str, str]:
        """The queue of each run in `ids`."""
        out: dict[str, str] = {}
        with self._read() as conn:
            for chunk in chunks(sorted(set(ids))):
                q = select(t.runs.c.id, t.runs.c.queue).where(t.runs.c.id.in_(chunk))
                out.update((rid, queue) for rid, queue in conn.execute(q))
        return out

    def state_counts(self) -> list[tuple[str, str, int, int]]:
        """(stage, state, runs, chips) for every stage and state that has runs."""
        q = (
            select(t.runs.c.stage, t.runs.c.state, func.count(), func.coalesce(func.sum(t.runs.c.chips), 0))
            .group_by(t.runs.c.stage, t.runs.c.state)
            .order_by(t.runs.c.stage, t.runs.c.state)
        )
        with self._read() as conn:
            return [(r[0], r[1], int(r[2]), int(r[3])) for r in conn.execute(q)]

    def transition(self, rid: str, allowed_from: Iterable[str], new_state: str, events: Sequence[Event]) -> RunRecord:
        """Move run `rid` to `new_state` and append `events`, only if it is in one of `allowed_from`."""
        allowed = set(allowed_from)
        with self._write() as conn:
            row = conn.execute(select(t.runs).where(t.runs.c.id == rid).with_for_update()).first()
            if row is None:
                raise NotFoundError(f"no run {rid!r}; `crossrail status` lists runs")
            run = RunRecord.from_row(row)
            if run.state not in allowed:
                raise ConflictError(
                    f"run {rid} is {run.state}; this applies only to runs that are {' or '.join(sorted(allowed))}"
                )
            ts = max((e.ts for e in events), default=run.updated_at)
            conn.execute(update(t.runs).where(t.runs.c.id == rid).values(state=new_state, updated_at=ts))
            append(conn, events)
            return self._run(conn, rid)


class _Batch:
    """Creating many runs in one transaction with a handful of statements, not a handful per run."""

    def __init__(self, conn: Connection, ts: float) -> None:
        self.conn, self.ts = conn, ts
        self.numbers: dict[str, int] | None = None
        """The first run number it takes per experiment, once it has read them."""

    def create(self, new: Sequence[NewRun], events: Sequence[Sequence[Event]]) -> list[tuple[RunRecord, bool]]:
        existing = self._existing_keys([n.idempotency_key for n in new if n.idempotency_key is not None])
        next_n = self._next_numbers({n.experiment for n in new})
        self.numbers = dict(next_n)
        exp_ids = self._experiment_ids(new)
        out: list[tuple[RunRecord, bool]] = []
        rows: list[dict[str, Any]] = []
        event_rows: list[dict[str, Any]] = []
        record_fields = [f.name for f in fields(RunRecord)]
        for item, evs in zip(new, events, strict=True):
            key = item.idempotency_key
            if key is not None and key in existing:
                out.append((_replay(existing[key], item), False))
                continue
            n = next_n[item.experiment]
            next_n[item.experiment] = n + 1
            rid = run_id(item.experiment, n)
            values = {k: v for k, v in item.__dict__.items() if k not in ("experiment_digest", "experiment_spec")}
            row = {
                "id": rid,
                "n": n,
                "experiment_id": exp_ids[(item.experiment, item.experiment_digest)],
                "state": "queued",
                "created_at": self.ts,
                "updated_at": self.ts,
                **values,
            }
            rows.append(row)
            event_rows.extend(event_row(e, rid) for e in evs)
            record = RunRecord(**{name: row[name] for name in record_fields})
            if key is not None:
                existing[key] = record
            out.append((record, True))
        if rows:
            self.conn.execute(insert(t.runs), rows)
        insert_events(self.conn, event_rows, returning=False)
        return out

    def _existing_keys(self, keys: list[str]) -> dict[str, RunRecord]:
        found: dict[str, RunRecord] = {}
        for chunk in chunks(sorted(set(keys))):
            for row in self.conn.execute(select(t.runs).where(t.runs.c.idempotency_key.in_(chunk))):
                found[row.idempotency_key] = RunRecord.from_row(row)
        return found

    def _next_numbers(self, names: set[str]) -> dict[str, int]:
        out = dict.fromkeys(names, 1)
        for chunk in chunks(sorted(names)):
            q = (
                select(t.runs.c.experiment, func.max(t.runs.c.n))
                .where(t.runs.c.experiment.in_(chunk))
                .group_by(t.runs.c.experiment)
            )
            for name, last in self.conn.execute(q):
                out[name] = int(last) + 1
        return out

    def _experiment_ids(self, new: Sequence[NewRun]) -> dict[tuple[str, str], int]:
        wanted = {(n.experiment, n.experiment_digest): n.experiment_spec for n in new}
        ids = self._known_experiments(list(wanted))
        missing = [
            {"name": name, "digest": digest, "spec": spec, "created_at": self.ts}
            for (name, digest), spec in wanted.items()
            if (name, digest) not in ids
        ]
        if missing:
            self.conn.execute(insert(t.experiments), missing)
            ids = self._known_experiments(list(wanted))
        return ids

    def _known_experiments(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
        found: dict[tuple[str, str], int] = {}
        names = sorted({name for name, _ in pairs})
        for chunk in chunks(names):
            q = select(t.experiments.c.id, t.experiments.c.name, t.experiments.c.digest).where(
                t.experiments.c.name.in_(chunk)
            )
            for eid, name, digest in self.conn.execute(q):
                found[(name, digest)] = int(eid)
        return found


def _replay(existing: RunRecord, item: NewRun) -> RunRecord:
    if existing.spec_digest != item.spec_digest:
        raise ConflictError(
            f"idempotency key {item.idempotency_key!r} was used for run {existing.id} with a "
            "different spec; use a new key to submit a changed experiment"
        )
    return existing
