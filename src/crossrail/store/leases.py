"""Agents and the leader's lease (control/leader.py): who runs on this store and who leads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select, update

from crossrail.core.events import Event, EventType
from crossrail.store import schema as t
from crossrail.store.engine import StoreBase
from crossrail.store.events import append


class LeaseRecords(StoreBase):
    """Mixed into Store: the agents table and the leader row."""

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

    def agents(self, *, running: bool = False) -> list[dict[str, Any]]:
        """Agents that registered on this store, newest first; `running` keeps those that have not stopped."""
        q = select(t.agents).order_by(t.agents.c.started_at.desc())
        if running:
            q = q.where(t.agents.c.stopped_at.is_(None))
        with self._read() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

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
            append(conn, [Event(EventType.LEADER_ELECTED, now, None, None, data)])
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


@dataclass(frozen=True)
class LeaseRecord:
    """The leader row: the newest term, who holds it (None: nobody), how often it renewed, and its lease."""

    term: int
    agent_id: str | None
    renewals: int
    renewed_at: float | None
    lease_s: float | None
