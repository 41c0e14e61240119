"""The append-only event log: each run's events chained by hash, appended in the writes that cause them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, func, insert, select, text

from crossrail.core.events import Event, EventType
from crossrail.store import schema as t
from crossrail.store.chain import ChainCheck, row_hash
from crossrail.store.engine import StoreBase, chunks


class EventRecords(StoreBase):
    """Mixed into Store: the events table."""

    def append_events(self, events: Sequence[Event]) -> list[int]:
        with self._write() as conn:
            return append(conn, events)

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
            return [event_of(r) for r in conn.execute(q)]

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
                for chunk in chunks(sorted(set(runs))):
                    found.extend((seq, run, value) for run, value, seq in conn.execute(q.where(e.run_id.in_(chunk))))
        found.sort(key=lambda f: f[0])
        return [(run, value) for _, run, value in found]

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


def event_row(e: Event, run: str | None = None) -> dict[str, Any]:
    return {"ts": e.ts, "type": str(e.type), "run_id": run or e.run, "attempt": e.attempt, "data": e.data}


def append(conn: Connection, events: Sequence[Event]) -> list[int]:
    return insert_events(conn, [event_row(e) for e in events])


def insert_events(conn: Connection, rows: list[dict[str, Any]], *, returning: bool = True) -> list[int]:
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
    for chunk in chunks(sorted(k for k in keys if k is not None)):
        newest = select(func.max(e.seq)).where(e.run_id.in_(chunk)).group_by(e.run_id)
        heads.update((rid, h) for rid, h in conn.execute(select(e.run_id, e.hash).where(e.seq.in_(newest))))
    if None in keys:
        h = conn.execute(select(e.hash).where(e.run_id.is_(None)).order_by(e.seq.desc()).limit(1)).scalar()
        if h is not None:
            heads[None] = h
    return {k: v for k, v in heads.items() if v is not None}


def event_of(row: Any) -> Event:
    m = row._mapping
    return Event(
        type=EventType(m["type"]),
        ts=m["ts"],
        run=m["run_id"],
        attempt=m["attempt"],
        data=m["data"],
        seq=m["seq"],
    )


def reported_uri(event: Event, name: str, key: str = "uri") -> str | None:
    """The checkpoint URI a runtime report `name` carries under `key`, or None when `event` is not one."""
    if event.type != EventType.REPORTED or event.data.get("name") != name:
        return None
    data = event.data.get("data")
    uri = data.get(key) if isinstance(data, dict) else None
    return uri if isinstance(uri, str) else None


def evaluated(event: Event) -> Event | None:
    """The `evaluated` event of an eval's runtime report that carries its score (metric and value), else None."""
    uri = reported_uri(event, "evaluated")
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
