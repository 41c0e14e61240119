"""Checkpoints: indexed as attempts report them, marked damaged or deleted as the runtime says."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from crossrail.core.events import Event, EventType
from crossrail.store import schema as t
from crossrail.store.engine import StoreBase, chunks, pk
from crossrail.store.events import reported_uri
from crossrail.store.records import (
    CHECKPOINT_COMMITTED,
    CHECKPOINT_DAMAGED,
    CHECKPOINT_DELETED,
    CheckpointRecord,
)


class CheckpointRecords(StoreBase):
    """Mixed into Store: the checkpoints table."""

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
            row = conn.execute(select(t.checkpoints).where(t.checkpoints.c.id == pk(res))).one()
            return CheckpointRecord.from_row(row)

    def latest_checkpoints(self, ids: Iterable[str]) -> dict[str, CheckpointRecord]:
        """Each run's newest usable checkpoint (committed, not deleted, never found corrupt), by run id."""
        c = t.checkpoints
        usable = (c.c.state == CHECKPOINT_COMMITTED) & c.c.skipped_reason.is_(None)
        out: dict[str, CheckpointRecord] = {}
        with self._read() as conn:
            for chunk in chunks(sorted(set(ids))):
                newest = select(c.c.run_id, func.max(c.c.step).label("step")).where(c.c.run_id.in_(chunk), usable)
                top = newest.group_by(c.c.run_id).subquery()
                q = select(c).join(top, (c.c.run_id == top.c.run_id) & (c.c.step == top.c.step)).where(usable)
                out.update({r.run_id: CheckpointRecord.from_row(r) for r in conn.execute(q)})
        return out


def index_reported(conn: Connection, rid: str, number: int, c: dict[str, Any]) -> Event | None:
    """Index checkpoint `c` an attempt reported (once per step), linked to its parent: the run's previous
    checkpoint, or for its first the checkpoint the attempt started from; the `checkpointed` event to log."""
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


def mark_skipped(conn: Connection, event: Event) -> None:
    """A `checkpoint_skipped` report marks that checkpoint damaged, with the runtime's reason.

    The checkpoint may be the run's own or its parent's (a child falls back from a damaged parent step).
    """
    uri = reported_uri(event, "checkpoint_skipped")
    if uri is None:
        return
    reason = str(event.data["data"].get("reason") or "skipped by the runtime")[:512]
    state = CHECKPOINT_DELETED if reason.startswith("deleted:") else CHECKPOINT_DAMAGED  # gone, or fails a check
    conn.execute(
        update(t.checkpoints)
        .where(t.checkpoints.c.uri == uri, t.checkpoints.c.state == CHECKPOINT_COMMITTED)
        .values(skipped_reason=reason, state=state)
    )


def mark_deleted(conn: Connection, rid: str, event: Event) -> None:
    """A `checkpoint_deleted` report (the runtime's retention removed it) marks the run's checkpoint deleted."""
    uri = reported_uri(event, "checkpoint_deleted")
    if uri is not None:
        conn.execute(
            update(t.checkpoints)
            .where(t.checkpoints.c.run_id == rid, t.checkpoints.c.uri == uri)
            .values(state=CHECKPOINT_DELETED)
        )
