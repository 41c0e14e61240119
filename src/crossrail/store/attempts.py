"""Attempts: admitting them, their start and end, the service they attained, and what they report."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from crossrail.core.attempts import ACTIVE_ATTEMPT_STATES, EndReason
from crossrail.core.events import Event
from crossrail.store import schema as t
from crossrail.store.checkpoints import index_reported, mark_deleted, mark_skipped
from crossrail.store.engine import StoreBase, chunks
from crossrail.store.events import append, evaluated, reported_uri
from crossrail.store.records import (
    AttemptRecord,
)


class AttemptRecords(StoreBase):
    """Mixed into Store: the attempts table, and the reports an attempt sends (ingest)."""

    def attempts(self, rid: str) -> list[AttemptRecord]:
        q = select(t.attempts).where(t.attempts.c.run_id == rid).order_by(t.attempts.c.number)
        with self._read() as conn:
            return [AttemptRecord.from_row(r) for r in conn.execute(q)]

    def last_attempts(self, ids: Iterable[str]) -> dict[str, AttemptRecord]:
        """The latest attempt of each run in `ids` that has one."""
        out: dict[str, AttemptRecord] = {}
        with self._read() as conn:
            for chunk in chunks(sorted(set(ids))):
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
            for chunk in chunks(sorted(set(ids))):
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
            append(conn, events)
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
            append(conn, events)
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
            append(conn, events)
            return True

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
            append(conn, events)
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
            extra = [index_reported(conn, rid, number, c) for c in checkpoints]
            extra += [evaluated(e) for e in events]
            for e in events:
                mark_skipped(conn, e)
                mark_deleted(conn, rid, e)
            append(conn, [*events, *[e for e in extra if e is not None]])
            return True

    @staticmethod
    def _record_parent(conn: Connection, rid: str, number: int, event: Event) -> None:
        """An `initialised` report, or a `resumed` one from the parent (`resubmit --resume`), names the parent
        checkpoint the attempt really loaded (after any fallback)."""
        uri = reported_uri(event, "initialised", key="from")
        data = event.data.get("data")
        if uri is None and isinstance(data, dict) and data.get("source") == "parent":
            uri = reported_uri(event, "resumed", key="from")
        if uri is not None:
            conn.execute(
                update(t.attempts)
                .where(t.attempts.c.run_id == rid, t.attempts.c.number == number)
                .values(parent_checkpoint=uri)
            )
