"""The Store: one SQLAlchemy engine, migrated on open, and the repository functions over it.

Every write is one transaction. On SQLite a write transaction starts with BEGIN IMMEDIATE, so run
numbers and state transitions are decided under the database's write lock; on PostgreSQL the rows
involved are locked with SELECT ... FOR UPDATE.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, func, insert, select, text, true, update
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, SQLAlchemyError

from crossrail.core.attempts import ACTIVE_ATTEMPT_STATES, EndReason
from crossrail.core.events import Event, EventType
from crossrail.core.ids import is_uid, run_id
from crossrail.errors import (
    ConflictError,
    FencedError,
    MissingExtraError,
    NotFoundError,
    StoreDamagedError,
    StoreError,
)
from crossrail.store import health
from crossrail.store import schema as t
from crossrail.store.access import AccessRecords, joined_row, joined_runs
from crossrail.store.chain import ChainCheck, row_hash
from crossrail.store.records import (
    CHECKPOINT_COMMITTED,
    CHECKPOINT_DAMAGED,
    CHECKPOINT_DELETED,
    AttemptRecord,
    CheckpointRecord,
    NewRun,
    QueuedKey,
    RunRecord,
)
from crossrail.store.simulations import SimulationRecords

HEAD_REVISION = "0014"
LEADER_WRITE_IDLE_MS = 1000
"""How long (ms) a leader's write transaction may sit idle between statements on PostgreSQL before the server
ends it: well under the leases agents run with (15 s by default, 2 s in the failover test), so a stopped
leader's lock on the leader row does not hold back a takeover."""
_MIGRATIONS = Path(__file__).parent / "migrations"


class Store(AccessRecords, SimulationRecords):
    """State of one workspace (or one shared database): open with `Store.open(url)`."""

    def __init__(self, engine: Engine, *, path: Path | None = None, read_only: bool = False) -> None:
        self._engine = engine
        self.url = engine.url.render_as_string(hide_password=True)
        self.path = path
        """The SQLite file, None for a server."""
        self.read_only = read_only
        self.id: str | None = None
        """The store id (store_meta), read once at open: `check_identity` compares it on every call."""
        self._file: health.FileIdentity | None = None
        self.fence: Fence | None = None
        """Set while an agent leads (control/leader.py): every write then checks the leader row still holds this
        agent and term, under a row lock in the write's own transaction, and raises FencedError otherwise."""

    # --- opening -------------------------------------------------------------------------------

    @classmethod
    def open(cls, url: str, *, read_only: bool = False) -> Store:
        """Connect to `url` (any SQLAlchemy URL) and bring its schema to the head revision.

        `read_only` (SQLite only) opens the file without writing to it and without migrating: for a
        workspace the user cannot write (a directory that is not writable is read as immutable).
        """
        path = health.sqlite_path(url)
        where = str(path or url)
        try:
            if read_only and path is not None:
                store = cls(_readonly_engine(path), path=path, read_only=True)
                store._require_head()
            else:
                store = cls(_engine_for(url), path=path)
                store._migrate()
            store.id = store._read_store_id()
            if path is not None:
                store._file = health.FileIdentity.of(path)
        except DBAPIError as exc:
            error = health.classify(exc, where, "opening it")
            if type(error) is not StoreError:  # damaged or unreachable: say so
                raise error from exc
            raise StoreError(f"cannot open the state store at {url}: {_reason(exc)}") from exc
        except (SQLAlchemyError, OSError) as exc:
            raise StoreError(f"cannot open the state store at {url}: {_reason(exc)}") from exc
        return store

    def _require_head(self) -> None:
        found = self.revision()
        if found != HEAD_REVISION:
            raise StoreError(
                f"the read-only state store {self.path} is at schema revision {found}; this crossrail reads "
                f"{HEAD_REVISION}: run any writing command once with write access to upgrade it"
            )

    def _read_store_id(self) -> str | None:
        with self._engine.connect() as conn:
            value = conn.execute(select(t.store_meta.c.value).where(t.store_meta.c.key == "store_id")).scalar()
            return None if value is None else str(value)

    def check_identity(self, *, integrity: bool = False) -> None:
        """Raise StoreDamagedError unless this is still the store that was opened, and (with `integrity`) sound.

        SQLite: the file must still exist at its path as the same file (device and inode), and its store id,
        read on a connection of its own (a pooled one may serve cached pages of a file since overwritten),
        must be the one read at open; `integrity` adds `PRAGMA quick_check`. PostgreSQL: the store id.
        """
        if self._file is not None and self.path is not None:
            self._file.check()
            broken = health.header_problem(self.path)
            if broken is not None:
                raise StoreDamagedError(f"the state store {self.path} is damaged: {broken}; {health.RESTORE_HINT}")
            found = health.file_store_id(self.path)
            problems = health.file_problems(self.path, quick=True, limit=5) if integrity else []
            if problems:
                raise StoreDamagedError(
                    f"the state store {self.path} is damaged: {'; '.join(problems)}; {health.RESTORE_HINT}"
                )
        else:
            with self._read() as conn:
                found = conn.execute(select(t.store_meta.c.value).where(t.store_meta.c.key == "store_id")).scalar()
        if found != self.id:
            raise StoreDamagedError(
                f"the state store {self.path or self.url} is no longer the store opened (store id {self.id}, "
                f"now {found}); restart against the right store, or {health.RESTORE_HINT}"
            )

    def close(self) -> None:
        self._engine.dispose()

    def _migrate(self) -> None:
        if self.revision() == HEAD_REVISION:
            return
        from alembic import command
        from alembic.config import Config

        with self._write(join_audit=False) as conn:
            if _revision(conn) == HEAD_REVISION:  # another process migrated while we waited
                return
            cfg = Config()
            cfg.set_main_option("script_location", str(_MIGRATIONS))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def revision(self) -> str | None:
        with self._engine.connect() as conn:
            return _revision(conn)

    @contextmanager
    def _write(self, *, fenced: bool = True, join_audit: bool = True) -> Iterator[Connection]:
        """One write transaction; with a fence set (and `fenced`), refused unless this agent still leads. With
        `join_audit`, an audit row joined to this context (store.access.joined_audit) is inserted in it."""
        if self.read_only:
            raise StoreError(
                f"the state store {self.path} is read-only here (opened without write access); "
                "run this command as a user who can write the workspace"
            )
        try:
            conn = self._engine.connect().execution_options(crossrail_write=True)
        except DBAPIError as exc:
            raise health.classify(exc, str(self.path or self.url), "connecting to write") from exc
        try:
            with conn.begin():
                if self.fence is not None and conn.dialect.name == "postgresql":
                    # A leader stopped mid-write (SIGSTOP, a frozen host) would keep the leader row locked and so
                    # block every takeover: the server ends such a transaction once it idles this long.
                    conn.exec_driver_sql(f"SET LOCAL idle_in_transaction_session_timeout = {LEADER_WRITE_IDLE_MS}")
                if fenced and self.fence is not None:
                    _check_fence(conn, self.fence)
                yield conn
                joined = joined_row(conn) if join_audit else None
                if self._file is not None:  # last look before COMMIT: never commit into a deleted or replaced file
                    self._file.check()
            if joined is not None:
                joined.written = True
        except IntegrityError:
            raise
        except OperationalError as exc:
            error = health.classify(exc, str(self.path or self.url), "writing")
            if type(error) is StoreError:
                raise StoreError(f"the state store refused a write: {_reason(exc)}") from exc
            raise error from exc
        except DBAPIError as exc:
            raise health.classify(exc, str(self.path or self.url), "writing") from exc
        finally:
            conn.close()

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self._engine.connect() as conn:
                yield conn
        except DBAPIError as exc:
            raise health.classify(exc, str(self.path or self.url), "reading") from exc

    # --- runs ----------------------------------------------------------------------------------

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
                    raise StoreError(f"cannot create the run: {_reason(exc)}") from exc
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
                    list(row) for chunk in _chunks(sorted(set(ids))) for row in conn.execute(q.where(c.id.in_(chunk)))
                ]
                rows.sort(key=lambda row: (row[created_at], row[id_at]))
            first: dict[str, str] = {}  # spec digest -> a run with that spec
            for row in rows:
                first.setdefault(row[digest_at], row[id_at])
            specs: dict[str, Any] = {}
            for chunk in _chunks(sorted(first.values())):
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
            for chunk in _chunks(sorted(set(ids))):
                for row in conn.execute(select(t.runs).where(t.runs.c.id.in_(chunk))):
                    out[row.id] = RunRecord.from_row(row)
        return out

    def run_queues(self, ids: Iterable[str]) -> dict[str, str]:
        """The queue of each run in `ids`."""
        out: dict[str, str] = {}
        with self._read() as conn:
            for chunk in _chunks(sorted(set(ids))):
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
            _append(conn, events)
            return self._run(conn, rid)

    # --- agents --------------------------------------------------------------------------------

    def register_agent(self, *, host: str, pid: int, workspace: str | None, now: float) -> str:
        """Record an agent process starting on this store; returns its id (heartbeats and the stop name it)."""
        import uuid

        agent_id = uuid.uuid4().hex
        row = {"id": agent_id, "host": host, "pid": pid, "workspace": workspace, "started_at": now, "heartbeat_at": now}
        with self._write(fenced=False) as conn:
            conn.execute(insert(t.agents).values(**row))
        return agent_id

    def agent_heartbeat(self, agent_id: str, now: float) -> None:
        with self._write(fenced=False) as conn:  # liveness, not a decision: standbys beat too
            conn.execute(update(t.agents).where(t.agents.c.id == agent_id).values(heartbeat_at=now))

    def agent_stopped(self, agent_id: str, now: float) -> None:
        with self._write(fenced=False) as conn:
            conn.execute(update(t.agents).where(t.agents.c.id == agent_id).values(stopped_at=now, heartbeat_at=now))

    # --- the leader's lease (control/leader.py) -------------------------------------------------

    def leader(self) -> LeaseRecord:
        with self._read() as conn:
            row = conn.execute(select(t.leader).where(t.leader.c.id == 1)).one()
        return LeaseRecord(row.term, row.agent_id, row.renewals, row.renewed_at, row.lease_s)

    def take_lease(self, agent_id: str, seen: LeaseRecord, *, lease_s: float, now: float, host: str) -> int | None:
        """Lead under term `seen.term + 1` if the lease is still exactly as `seen` (compare and set), recording a
        `leader_elected` event in the same transaction; the new term, or None when another agent moved first."""
        term = seen.term + 1
        with self._write(fenced=False) as conn:
            moved = conn.execute(
                update(t.leader)
                .where(t.leader.c.id == 1, t.leader.c.term == seen.term, t.leader.c.renewals == seen.renewals)
                .values(term=term, agent_id=agent_id, renewals=0, renewed_at=now, lease_s=lease_s)
            ).rowcount
            if not moved:
                return None
            data = {"term": term, "agent": agent_id, "host": host, "previous": seen.agent_id, "lease_s": lease_s}
            _append(conn, [Event(EventType.LEADER_ELECTED, now, None, None, data)])
        return term

    def renew_lease(self, agent_id: str, term: int, now: float) -> bool:
        """Renew the lease `agent_id` holds under `term`; False when a newer term (or a step-down) replaced it."""
        with self._write(fenced=False) as conn:
            return bool(
                conn.execute(
                    update(t.leader)
                    .where(t.leader.c.id == 1, t.leader.c.term == term, t.leader.c.agent_id == agent_id)
                    .values(renewals=t.leader.c.renewals + 1, renewed_at=now)
                ).rowcount
            )

    def release_lease(self, agent_id: str, term: int, now: float) -> bool:
        """Step down: the lease is left to nobody (its term kept), so a standby takes it at once."""
        with self._write(fenced=False) as conn:
            return bool(
                conn.execute(
                    update(t.leader)
                    .where(t.leader.c.id == 1, t.leader.c.term == term, t.leader.c.agent_id == agent_id)
                    .values(agent_id=None, renewals=t.leader.c.renewals + 1, renewed_at=now)
                ).rowcount
            )

    def record_launch(self, rid: str, number: int) -> bool:
        """The fenced write an agent commits before it launches an attempt: stamps the attempt with the leader's
        term. False, writing nothing, when the attempt is no longer `starting` (someone ended it meanwhile)."""
        term = None if self.fence is None else self.fence.term
        with self._write() as conn:
            return bool(
                conn.execute(
                    update(t.attempts)
                    .where(t.attempts.c.run_id == rid, t.attempts.c.number == number, t.attempts.c.state == "starting")
                    .values(launch_term=term)
                ).rowcount
            )

    def agents(self, *, running: bool = False) -> list[dict[str, Any]]:
        """Agents that registered on this store, newest first; `running` keeps those that have not stopped."""
        q = select(t.agents).order_by(t.agents.c.started_at.desc())
        if running:
            q = q.where(t.agents.c.stopped_at.is_(None))
        with self._read() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def counts(self) -> dict[str, int]:
        """How many runs and events the store holds (what a backup or restore reports)."""
        with self._read() as conn:
            runs = conn.execute(select(func.count()).select_from(t.runs)).scalar_one()
            events = conn.execute(select(func.count()).select_from(t.events)).scalar_one()
        return {"runs": int(runs), "events": int(events)}

    # --- events --------------------------------------------------------------------------------

    def append_events(self, events: Sequence[Event]) -> list[int]:
        with self._write() as conn:
            return _append(conn, events)

    def events(
        self,
        *,
        run: str | None = None,
        after_seq: int = 0,
        types: Iterable[str] | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        q = select(t.events).where(t.events.c.seq > after_seq)
        if run is not None:
            q = q.where(t.events.c.run_id == run)
        if types is not None:
            q = q.where(t.events.c.type.in_(list(types)))
        q = q.order_by(t.events.c.seq)
        if limit is not None:
            q = q.limit(limit)
        with self._read() as conn:
            return [_event(r) for r in conn.execute(q)]

    def event_values(self, types: Iterable[str], key: str, runs: Iterable[str] | None = None) -> list[tuple[str, Any]]:
        """(run, `data[key]` as text) of every run's event of `types` (only `runs`' when given), oldest first;
        None where the data lacks the key. Reads only that field of each event, not its whole payload."""
        e, wanted = t.events.c, list(types)
        q = select(e.run_id, e.data[key].as_string(), e.seq)
        found: list[tuple[int, str, Any]] = []
        with self._read() as conn:
            if runs is None:
                q = q.where(e.type.in_(wanted), e.run_id.is_not(None))
                found.extend((seq, run, value) for run, value, seq in conn.execute(q))
            else:
                # `type || ''` keeps SQLite (which has no statistics) off ix_events_type, whose every event of
                # these types it would read for each chunk: the runs' own events come down ix_events_run.
                q = q.where(e.type.concat("").in_(wanted))
                for chunk in _chunks(sorted(set(runs))):
                    found.extend((seq, run, value) for run, value, seq in conn.execute(q.where(e.run_id.in_(chunk))))
        found.sort(key=lambda f: f[0])
        return [(run, value) for _, run, value in found]

    def integrity_problems(self) -> list[str] | None:
        """What the database's own check finds wrong: SQLite `PRAGMA integrity_check`, PostgreSQL amcheck on every
        B-tree index ([] when sound); None when the check is not available (amcheck is not installed)."""
        if self.path is not None:
            return health.file_problems(self.path)
        with self._read() as conn, conn.begin():
            return health.pg_index_problems(conn)

    def verify_events(self, run: str | None = None, *, batch: int = 5000) -> ChainCheck:
        """Recompute every event's hash chain (or only `run`'s); the result names each event that does not follow."""
        check = ChainCheck()
        cols = [t.events.c[n] for n in ("seq", "ts", "type", "run_id", "attempt", "data", "hash")]
        after = 0
        with self._read() as conn:
            while True:
                q = select(*cols).where(t.events.c.seq > after)
                if run is not None:
                    q = q.where(t.events.c.run_id == run)
                rows = conn.execute(q.order_by(t.events.c.seq).limit(batch)).all()
                if not rows:
                    return check
                check.feed(rows)
                after = rows[-1].seq

    def last_seq(self) -> int:
        with self._read() as conn:
            return int(conn.execute(select(func.coalesce(func.max(t.events.c.seq), 0))).scalar_one())

    # --- attempts, checkpoints, metric samples --------------------------------------------------

    def attempts(self, rid: str) -> list[AttemptRecord]:
        q = select(t.attempts).where(t.attempts.c.run_id == rid).order_by(t.attempts.c.number)
        with self._read() as conn:
            return [AttemptRecord.from_row(r) for r in conn.execute(q)]

    def last_attempts(self, ids: Iterable[str]) -> dict[str, AttemptRecord]:
        """The latest attempt of each run in `ids` that has one."""
        out: dict[str, AttemptRecord] = {}
        with self._read() as conn:
            for chunk in _chunks(sorted(set(ids))):
                q = select(t.attempts).where(t.attempts.c.run_id.in_(chunk)).order_by(t.attempts.c.number)
                for row in conn.execute(q):
                    out[row.run_id] = AttemptRecord.from_row(row)
        return out

    def attained_chip_s(self, ids: Iterable[str], now: float) -> dict[str, float]:
        """Chip-seconds each run in `ids` has held chips for over all its attempts, a running one up to `now`.

        Runs that never started are absent. This is the attained service least-attained-service policies order by.
        """
        return {rid: sum(pools.values()) for rid, pools in self.attained_by_pool(ids, now).items()}

    def attained_by_pool(self, ids: Iterable[str], now: float) -> dict[str, dict[str, float]]:
        """`attained_chip_s` split by the pool each attempt ran on (heterogeneity-aware policies count service
        by chip type)."""
        a = t.attempts.c
        held = func.sum(a.chips * (func.coalesce(a.ended_at, now) - a.started_at))
        out: dict[str, dict[str, float]] = {}
        with self._read() as conn:
            for chunk in _chunks(sorted(set(ids))):
                q = (
                    select(a.run_id, a.pool, held)
                    .where(a.run_id.in_(chunk), a.started_at.is_not(None))
                    .group_by(a.run_id, a.pool)
                )
                for rid, pool, total in conn.execute(q):
                    out.setdefault(rid, {})[pool or ""] = max(0.0, float(total or 0.0))
        return out

    def active_attempts(self) -> list[AttemptRecord]:
        """Attempts not yet ended (`starting` or `running`), oldest first."""
        q = select(t.attempts).where(t.attempts.c.state.in_(ACTIVE_ATTEMPT_STATES)).order_by(t.attempts.c.id)
        with self._read() as conn:
            return [AttemptRecord.from_row(r) for r in conn.execute(q)]

    def admit(self, attempt: AttemptRecord, events: Sequence[Event]) -> AttemptRecord | None:
        """Create `attempt` (state `starting`) and move its run queued -> admitted, in one transaction.

        Returns None, writing nothing, when the run is no longer queued (cancelled or suspended meanwhile).
        """
        with self._write() as conn:
            moved = conn.execute(
                update(t.runs)
                .where(t.runs.c.id == attempt.run_id, t.runs.c.state == "queued")
                .values(state="admitted", updated_at=attempt.created_at)
            ).rowcount
            if not moved:
                return None
            conn.execute(insert(t.attempts).values(**attempt.as_dict()))
            _append(conn, events)
            return attempt

    def admit_parts(self, rid: str, attempts: Sequence[AttemptRecord], events: Sequence[Event]) -> bool:
        """Create the attempts of parts of pipeline run `rid` (each names its `part`) in one transaction.

        A queued run moves to admitted with all of them (its parts start together); a part's retry is
        admitted while the run is admitted or running and the part has no active attempt. False, writing
        nothing, otherwise (the run was cancelled or ended meanwhile, or the part runs already).
        """
        parts = [a.part for a in attempts]
        if not attempts or None in parts or any(a.run_id != rid for a in attempts):
            raise ValueError(f"admit_parts takes attempts of run {rid}, each naming its part (got parts {parts})")
        now = attempts[0].created_at
        with self._write() as conn:
            moved = conn.execute(
                update(t.runs)
                .where(t.runs.c.id == rid, t.runs.c.state == "queued")
                .values(state="admitted", updated_at=now)
            ).rowcount
            if not moved:
                state = conn.execute(select(t.runs.c.state).where(t.runs.c.id == rid)).scalar()
                a = t.attempts.c
                busy = conn.execute(
                    select(func.count()).where(a.run_id == rid, a.part.in_(parts), a.state.in_(ACTIVE_ATTEMPT_STATES))
                ).scalar()
                if state not in ("admitted", "running") or busy:
                    return False
            conn.execute(insert(t.attempts), [a.as_dict() for a in attempts])
            _append(conn, events)
            return True

    def mark_started(self, rid: str, number: int, ts: float, events: Sequence[Event]) -> bool:
        """starting -> running for the attempt, admitted -> running for its run; False if already done."""
        with self._write() as conn:
            moved = conn.execute(
                update(t.attempts)
                .where(t.attempts.c.run_id == rid, t.attempts.c.number == number, t.attempts.c.state == "starting")
                .values(state="running", started_at=ts, last_heartbeat=ts)
            ).rowcount
            if not moved:
                return False
            conn.execute(
                update(t.runs)
                .where(t.runs.c.id == rid, t.runs.c.state == "admitted")
                .values(state="running", updated_at=ts)
            )
            _append(conn, events)
            return True

    def end_attempt(
        self,
        rid: str,
        number: int,
        *,
        state: str,
        ended_at: float,
        exit_code: int | None,
        signal: int | None,
        stopped_by: str | None,
        end_reason: EndReason,
        reason: str,
        run_state: str | None,
        events: Sequence[Event],
    ) -> bool:
        """Record an attempt's end (and its run's next state) once; False if it was already recorded.

        `end_reason` is why it ended, as data; `stopped_by` the reason crossrail gave its stop(), if it did.
        """
        with self._write() as conn:
            moved = conn.execute(
                update(t.attempts)
                .where(
                    t.attempts.c.run_id == rid,
                    t.attempts.c.number == number,
                    t.attempts.c.state.in_(ACTIVE_ATTEMPT_STATES),
                )
                .values(
                    state=state,
                    ended_at=ended_at,
                    exit_code=exit_code,
                    signal=signal,
                    stopped_by=stopped_by,
                    end_reason=str(end_reason),
                    reason=reason,
                )
            ).rowcount
            if not moved:
                return False
            if run_state is not None:
                conn.execute(
                    update(t.runs)
                    .where(t.runs.c.id == rid, t.runs.c.state.in_(("admitted", "running")))
                    .values(state=run_state, updated_at=ended_at)
                )
            _append(conn, events)
            return True

    def ingest(
        self,
        rid: str,
        number: int,
        *,
        old_cursor: str | None,
        new_cursor: str,
        events: Sequence[Event],
        samples: Sequence[dict[str, Any]],
        checkpoints: Sequence[dict[str, Any]],
        heartbeat: float | None,
    ) -> bool:
        """Store what an attempt reported since `old_cursor`, once: the cursor moves in the same transaction."""
        with self._write() as conn:
            cond = (
                t.attempts.c.report_cursor.is_(None) if old_cursor is None else t.attempts.c.report_cursor == old_cursor
            )
            values: dict[str, Any] = {"report_cursor": new_cursor}
            if heartbeat is not None:
                values["last_heartbeat"] = heartbeat
            moved = conn.execute(
                update(t.attempts)
                .where(t.attempts.c.run_id == rid, t.attempts.c.number == number, cond)
                .values(**values)
            ).rowcount
            if not moved:
                return False
            if samples:
                conn.execute(insert(t.metric_samples), list(samples))
            for e in events:
                self._record_parent(conn, rid, number, e)
            extra = [self._index_checkpoint(conn, rid, number, c) for c in checkpoints]
            extra += [_evaluated(e) for e in events]
            for e in events:
                self._mark_skipped(conn, e)
                self._mark_deleted(conn, rid, e)
            _append(conn, [*events, *[e for e in extra if e is not None]])
            return True

    @staticmethod
    def _mark_skipped(conn: Connection, event: Event) -> None:
        """A `checkpoint_skipped` report marks that checkpoint damaged, with the runtime's reason.

        The checkpoint may be the run's own or its parent's (a child falls back from a damaged parent step).
        """
        uri = _reported_uri(event, "checkpoint_skipped")
        if uri is None:
            return
        reason = str(event.data["data"].get("reason") or "skipped by the runtime")[:512]
        state = CHECKPOINT_DELETED if reason.startswith("deleted:") else CHECKPOINT_DAMAGED  # gone, or fails a check
        conn.execute(
            update(t.checkpoints)
            .where(t.checkpoints.c.uri == uri, t.checkpoints.c.state == CHECKPOINT_COMMITTED)
            .values(skipped_reason=reason, state=state)
        )

    @staticmethod
    def _mark_deleted(conn: Connection, rid: str, event: Event) -> None:
        """A `checkpoint_deleted` report (the runtime's retention removed it) marks the run's checkpoint deleted."""
        uri = _reported_uri(event, "checkpoint_deleted")
        if uri is not None:
            conn.execute(
                update(t.checkpoints)
                .where(t.checkpoints.c.run_id == rid, t.checkpoints.c.uri == uri)
                .values(state=CHECKPOINT_DELETED)
            )

    @staticmethod
    def _record_parent(conn: Connection, rid: str, number: int, event: Event) -> None:
        """An `initialised` report, or a `resumed` one from the parent (`resubmit --resume`), names the parent
        checkpoint the attempt really loaded (after any fallback)."""
        uri = _reported_uri(event, "initialised", key="from")
        data = event.data.get("data")
        if uri is None and isinstance(data, dict) and data.get("source") == "parent":
            uri = _reported_uri(event, "resumed", key="from")
        if uri is not None:
            conn.execute(
                update(t.attempts)
                .where(t.attempts.c.run_id == rid, t.attempts.c.number == number)
                .values(parent_checkpoint=uri)
            )

    def _index_checkpoint(self, conn: Connection, rid: str, number: int, c: dict[str, Any]) -> Event | None:
        known = conn.execute(
            select(t.checkpoints.c.id).where(t.checkpoints.c.run_id == rid, t.checkpoints.c.step == c["step"])
        ).scalar()
        if known is not None:
            return None
        parent = conn.execute(
            select(t.checkpoints.c.id, t.checkpoints.c.uri)
            .where(t.checkpoints.c.run_id == rid, t.checkpoints.c.step < c["step"])
            .order_by(t.checkpoints.c.step.desc())
            .limit(1)
        ).first()
        if parent is None:  # the run's first checkpoint: its parent is the checkpoint the attempt started from
            parent = conn.execute(
                select(t.checkpoints.c.id, t.checkpoints.c.uri)
                .select_from(t.attempts.join(t.checkpoints, t.checkpoints.c.uri == t.attempts.c.parent_checkpoint))
                .where(t.attempts.c.run_id == rid, t.attempts.c.number == number, t.checkpoints.c.run_id != rid)
                .limit(1)
            ).first()
        conn.execute(
            insert(t.checkpoints).values(
                run_id=rid,
                attempt=number,
                step=c["step"],
                uri=c["uri"],
                format=c.get("format", "crossrail-ckpt/v1"),
                parent_id=parent[0] if parent else None,
                committed_at=c["ts"],
            )
        )
        data = {"step": c["step"], "uri": c["uri"], "parent": parent[1] if parent else None}
        return Event(EventType.CHECKPOINTED, c["ts"], rid, number, data)

    def checkpoints(self, rid: str, *, usable: bool = False) -> list[CheckpointRecord]:
        """The run's checkpoints by step; `usable` leaves out those deleted by retention or found corrupt."""
        q = select(t.checkpoints).where(t.checkpoints.c.run_id == rid).order_by(t.checkpoints.c.step)
        if usable:
            q = q.where(t.checkpoints.c.state == CHECKPOINT_COMMITTED, t.checkpoints.c.skipped_reason.is_(None))
        with self._read() as conn:
            return [CheckpointRecord.from_row(r) for r in conn.execute(q)]

    def add_checkpoint(
        self,
        *,
        run: str,
        attempt: int | None,
        step: int,
        uri: str,
        fmt: str,
        parent_id: int | None,
        ts: float,
    ) -> CheckpointRecord:
        with self._write() as conn:
            res = conn.execute(
                insert(t.checkpoints).values(
                    run_id=run,
                    attempt=attempt,
                    step=step,
                    uri=uri,
                    format=fmt,
                    parent_id=parent_id,
                    committed_at=ts,
                )
            )
            row = conn.execute(select(t.checkpoints).where(t.checkpoints.c.id == _pk(res))).one()
            return CheckpointRecord.from_row(row)

    def add_metric_samples(self, samples: Sequence[dict[str, Any]]) -> None:
        if samples:
            with self._write() as conn:
                conn.execute(insert(t.metric_samples), list(samples))

    def metric_by_group(self, name: str) -> dict[tuple[str, str], list[float]]:
        """Every sample of metric `name`, grouped by (stage of its run, pool of its attempt)."""
        ms, a, r = t.metric_samples, t.attempts, t.runs
        q = (
            select(r.c.stage, a.c.pool, ms.c.value)
            .select_from(
                ms.join(r, r.c.id == ms.c.run_id).join(a, (a.c.run_id == ms.c.run_id) & (a.c.number == ms.c.attempt))
            )
            .where(ms.c.name == name)
        )
        out: dict[tuple[str, str], list[float]] = {}
        with self._read() as conn:
            for stage, pool, value in conn.execute(q):
                out.setdefault((stage, pool), []).append(float(value))
        return out

    def metrics_by_degree(self, experiments: Iterable[str], name: str) -> dict[str, dict[str, dict[int, list[float]]]]:
        """Every sample of metric `name` reported by attempts of each experiment's runs, per chip: experiment ->
        chip type -> chips the reporting attempt held (its degree) -> samples; experiments without samples are
        absent. One query per 500 experiments."""
        ms, a, r = t.metric_samples, t.attempts, t.runs
        q = (
            select(r.c.experiment, a.c.chip_type, a.c.chips, ms.c.value)
            .select_from(
                ms.join(r, r.c.id == ms.c.run_id).join(a, (a.c.run_id == ms.c.run_id) & (a.c.number == ms.c.attempt))
            )
            .where(ms.c.name == name, a.c.chips > 0)
        )
        out: dict[str, dict[str, dict[int, list[float]]]] = {}
        with self._read() as conn:
            for chunk in _chunks(sorted(set(experiments))):
                for experiment, chip_type, chips, value in conn.execute(q.where(r.c.experiment.in_(chunk))):
                    by_degree = out.setdefault(experiment, {}).setdefault(chip_type, {})
                    by_degree.setdefault(int(chips), []).append(float(value) / chips)
        return out

    def latest_samples(self, ids: Iterable[str], name: str | None = None) -> dict[str, dict[str, Any]]:
        """Each run's newest metric sample (of metric `name`, or of any), by run id; runs with none are absent.

        One query per 500 runs. With `name`, one lookup per run down ix_metric_samples_run_name, whatever the
        run's sample count (the newest by `ts`; of equal ones, the last written); without, a walk of the runs'
        entries in that index.
        """
        ms = t.metric_samples
        out: dict[str, dict[str, Any]] = {}
        with self._read() as conn:
            for chunk in _chunks(sorted(set(ids))):
                if name is None:
                    newest = select(func.max(ms.c.id)).where(ms.c.run_id.in_(chunk)).group_by(ms.c.run_id)
                else:  # each run's newest sample of `name`, a subquery per run of `chunk` (samples need their run)
                    first = (
                        select(ms.c.id)
                        .where(ms.c.run_id == t.runs.c.id, ms.c.name == name)
                        .order_by(ms.c.ts.desc(), ms.c.id.desc())
                        .limit(1)
                        .correlate(t.runs)
                        .scalar_subquery()
                    )
                    newest = select(first).where(t.runs.c.id.in_(chunk))
                rows = conn.execute(select(ms).where(ms.c.id.in_(newest.scalar_subquery())))
                out.update({r.run_id: dict(r._mapping) for r in rows})
        return out

    def latest_checkpoints(self, ids: Iterable[str]) -> dict[str, CheckpointRecord]:
        """Each run's newest usable checkpoint (committed, not deleted, never found corrupt), by run id."""
        c = t.checkpoints
        usable = (c.c.state == CHECKPOINT_COMMITTED) & c.c.skipped_reason.is_(None)
        out: dict[str, CheckpointRecord] = {}
        with self._read() as conn:
            for chunk in _chunks(sorted(set(ids))):
                newest = select(c.c.run_id, func.max(c.c.step).label("step")).where(c.c.run_id.in_(chunk), usable)
                top = newest.group_by(c.c.run_id).subquery()
                q = select(c).join(top, (c.c.run_id == top.c.run_id) & (c.c.step == top.c.step)).where(usable)
                out.update({r.run_id: CheckpointRecord.from_row(r) for r in conn.execute(q)})
        return out

    def metric_samples(self, rid: str, name: str | None = None) -> list[dict[str, Any]]:
        q = select(t.metric_samples).where(t.metric_samples.c.run_id == rid)
        if name is not None:
            q = q.where(t.metric_samples.c.name == name)
        with self._read() as conn:
            return [dict(r._mapping) for r in conn.execute(q.order_by(t.metric_samples.c.ts))]


@dataclass(frozen=True)
class Fence:
    """What an agent's writes carry while it leads: its id and its fencing term."""

    agent_id: str
    term: int


@dataclass(frozen=True)
class LeaseRecord:
    """The leader row: the newest term, who holds it (None: nobody), how often it renewed, and its lease."""

    term: int
    agent_id: str | None
    renewals: int
    renewed_at: float | None
    lease_s: float | None


def _check_fence(conn: Connection, fence: Fence) -> None:
    """Lock the leader row for this transaction (a takeover waits for it to end) and compare it with `fence`."""
    row = conn.execute(select(t.leader.c.term, t.leader.c.agent_id).where(t.leader.c.id == 1).with_for_update()).one()
    if (row.term, row.agent_id) != (fence.term, fence.agent_id):
        holder = f"agent {row.agent_id}" if row.agent_id else "nobody (its leader stepped down)"
        raise FencedError(
            f"write refused: agent {fence.agent_id} leads under term {fence.term}, but the store's lease is at term "
            f"{row.term}, held by {holder}; this agent steps down and nothing was written"
        )


def _engine_for(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    try:
        return create_engine(url, pool_pre_ping=True)
    except ImportError as exc:  # SQLAlchemy imports the URL's driver here: psycopg for postgresql+psycopg://
        scheme = url.split("://", 1)[0]
        raise MissingExtraError(
            f"a {scheme}:// store needs its driver {exc.name or 'psycopg'}, from crossrail's postgres extra: "
            "pip install 'crossrail[postgres]' (and name it in the URL: postgresql+psycopg://...)",
            name=exc.name,
        ) from exc


def _readonly_engine(path: Path) -> Engine:
    """An engine that reads `path` and never writes it, not even WAL's shared-memory file when the directory is
    read-only (then the file is opened immutable: nobody can be writing it through this directory)."""
    import sqlite3

    if not path.is_file():
        raise StoreError(f"no state store at {path}")
    uri = health.readonly_uri(path, immutable=not os.access(path.parent, os.W_OK))
    engine = create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False))
    event.listen(engine, "connect", _sqlite_connect_readonly)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connect_readonly(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None
    dbapi_conn.execute("PRAGMA busy_timeout=30000")


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    # Hand transaction control to SQLAlchemy's "begin" event (the documented pysqlite recipe).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def _sqlite_begin(conn: Connection) -> None:
    write = conn.get_execution_options().get("crossrail_write", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _revision(conn: Connection) -> str | None:
    from sqlalchemy import inspect, text

    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


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
            event_rows.extend(_event_row(e, rid) for e in evs)
            record = RunRecord(**{name: row[name] for name in record_fields})
            if key is not None:
                existing[key] = record
            out.append((record, True))
        if rows:
            self.conn.execute(insert(t.runs), rows)
        _insert_events(self.conn, event_rows, returning=False)
        return out

    def _existing_keys(self, keys: list[str]) -> dict[str, RunRecord]:
        found: dict[str, RunRecord] = {}
        for chunk in _chunks(sorted(set(keys))):
            for row in self.conn.execute(select(t.runs).where(t.runs.c.idempotency_key.in_(chunk))):
                found[row.idempotency_key] = RunRecord.from_row(row)
        return found

    def _next_numbers(self, names: set[str]) -> dict[str, int]:
        out = dict.fromkeys(names, 1)
        for chunk in _chunks(sorted(names)):
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
        for chunk in _chunks(names):
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


def _evaluated(event: Event) -> Event | None:
    """The `evaluated` event of an eval's runtime report that carries its score (metric and value), else None."""
    uri = _reported_uri(event, "evaluated")
    data = event.data.get("data") if uri is not None else None
    if not isinstance(data, dict) or not isinstance(data.get("metric"), str) or data.get("value") is None:
        return None
    step = data.get("step")
    score = {
        "evaluated_run": data.get("evaluated_run") or event.run,
        "checkpoint": uri,
        "step": step if isinstance(step, int) else None,
        "metric": data["metric"],
        "value": float(data["value"]),
    }
    return Event(EventType.EVALUATED, event.ts, event.run, event.attempt, score)


def _reported_uri(event: Event, name: str, key: str = "uri") -> str | None:
    """The checkpoint URI a runtime report `name` carries under `key`, or None when `event` is not one."""
    if event.type != EventType.REPORTED or event.data.get("name") != name:
        return None
    data = event.data.get("data")
    uri = data.get(key) if isinstance(data, dict) else None
    return uri if isinstance(uri, str) else None


def _chunks(items: list[Any], size: int = 500) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _event_row(e: Event, run: str | None = None) -> dict[str, Any]:
    return {"ts": e.ts, "type": str(e.type), "run_id": run or e.run, "attempt": e.attempt, "data": e.data}


def _append(conn: Connection, events: Sequence[Event]) -> list[int]:
    return _insert_events(conn, [_event_row(e) for e in events])


def _insert_events(conn: Connection, rows: list[dict[str, Any]], *, returning: bool = True) -> list[int]:
    """The one way events enter the log: each row gets its chain's next hash, in the order given. Returns their
    seqs, in order; without `returning` (a caller that needs none, such as submit) none are read back: [].

    On PostgreSQL a transaction-scoped advisory lock per chain (taken in sorted order, so two writers never
    deadlock) orders concurrent appends to one run; appends to different runs do not wait for each other.
    SQLite's single writer (BEGIN IMMEDIATE) orders them already.
    """
    if not rows:
        return []
    keys = {r["run_id"] for r in rows}
    if conn.dialect.name == "postgresql":
        for key in sorted(f"crossrail-events:{k or ''}" for k in keys):
            conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(key))))
    last = _chain_heads(conn, keys)
    for row in rows:
        row["hash"] = last[row["run_id"]] = row_hash(last.get(row["run_id"]), row)
    if not returning:
        conn.execute(insert(t.events), rows)
        return []
    stmt = insert(t.events).returning(t.events.c.seq, sort_by_parameter_order=True)
    return [int(seq) for seq in conn.execute(stmt, rows).scalars()]


_FEW_CHAINS = 8
_HEAD_OF_RUN = text("SELECT hash FROM events WHERE run_id = :r ORDER BY seq DESC LIMIT 1")
_HEAD_OF_NO_RUN = text("SELECT hash FROM events WHERE run_id IS NULL ORDER BY seq DESC LIMIT 1")


def _chain_heads(conn: Connection, keys: set[str | None]) -> dict[str | None, str]:
    """The hash of the newest event of each chain in `keys` (a run id, or None for events of no run)."""
    e = t.events.c
    heads: dict[str | None, str] = {}
    if len(keys) <= _FEW_CHAINS:  # the usual case, one or two runs: one indexed lookup each, statement prebuilt
        for key in keys:
            stmt, params = (_HEAD_OF_NO_RUN, {}) if key is None else (_HEAD_OF_RUN, {"r": key})
            found = conn.execute(stmt, params).scalar()
            if found is not None:
                heads[key] = found
        return heads
    for chunk in _chunks(sorted(k for k in keys if k is not None)):
        newest = select(func.max(e.seq)).where(e.run_id.in_(chunk)).group_by(e.run_id)
        heads.update((rid, h) for rid, h in conn.execute(select(e.run_id, e.hash).where(e.seq.in_(newest))))
    if None in keys:
        h = conn.execute(select(e.hash).where(e.run_id.is_(None)).order_by(e.seq.desc()).limit(1)).scalar()
        if h is not None:
            heads[None] = h
    return {k: v for k, v in heads.items() if v is not None}


def _pk(result: Any) -> int:
    key = result.inserted_primary_key
    assert key is not None, "an insert into a table with an integer primary key returns it"
    return int(key[0])


def _event(row: Any) -> Event:
    m = row._mapping
    return Event(
        type=EventType(m["type"]),
        ts=m["ts"],
        run=m["run_id"],
        attempt=m["attempt"],
        data=m["data"],
        seq=m["seq"],
    )


def _reason(exc: Exception) -> str:
    orig = getattr(exc, "orig", None)
    return str(orig if orig is not None else exc).splitlines()[0]
