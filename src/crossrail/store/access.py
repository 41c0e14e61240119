"""The store's tokens and audit log (tables of migration 0009): the Store's methods over them.

Tokens are kept as the sha256 of their secret; the audit log is append-only (store/append_only.py). An audited
write's row can ride in the write's own transaction (`JoinedAudit`): one commit, and the write and its row
commit or roll back together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, String, func, insert, select, update

from crossrail.errors import ConflictError, NotFoundError
from crossrail.store import schema as t

AUDIT_FIELDS = tuple(c.name for c in t.audit.columns if c.name != "seq")
AUDIT_LENGTHS = {c.name: c.type.length for c in t.audit.columns if isinstance(c.type, String) and c.type.length}
"""The longest text each bounded audit column holds."""


def fitted(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with each text cut to its column's length and NUL shown as U+FFFD: a request's target or path is
    audited as far as it fits. PostgreSQL refuses a longer value or a NUL (SQLite keeps both), and that would fail
    the request being audited."""
    return {k: _fit(v, AUDIT_LENGTHS.get(k)) if isinstance(v, str) else v for k, v in row.items()}


def _fit(text: str, length: int | None) -> str:
    return text.replace("\x00", "\ufffd")[:length]


def check_fields(row: dict[str, Any]) -> None:
    """ValueError naming the fields of `row` that the audit table lacks."""
    unknown = set(row) - set(AUDIT_FIELDS)
    if unknown:
        raise ValueError(f"audit rows have no field {sorted(unknown)}")


@dataclass
class JoinedAudit:
    """The audit row of a write still to be made, inserted by the first write transaction that commits while
    it is joined (`joined_audit`), inside that transaction: the row exists exactly when the write committed.

    `row` holds every field but `ts` (the clock's `now` when the row is inserted); `status` is the success
    status, `created_status` the one of a write that created a run (an idempotent replay keeps `status`). A
    write that creates runs names them as the row's target. `written` turns True once the row committed.
    """

    row: dict[str, Any]
    now: Callable[[], float]
    status: int = 200
    created_status: int | None = None
    written: bool = False
    detail: str | None = None
    _created: bool = field(default=False, repr=False)

    def runs_written(self, runs: Sequence[tuple[Any, bool]]) -> None:
        """The (run, created) pairs the joined write made: its target, and its status when one was created."""
        ids = [r.id for r, _ in runs]
        self.row["target"] = ",".join(ids) if ids else self.row.get("target")
        self.row["run_uid"] = runs[0][0].uid if len(runs) == 1 else None
        self._created = any(created for _, created in runs)

    def final(self) -> dict[str, Any]:
        status = self.created_status if self._created and self.created_status is not None else self.status
        return self.row | {"ts": self.now(), "result": "ok", "status": status, "detail": self.detail}


_JOINED: ContextVar[JoinedAudit | None] = ContextVar("crossrail_joined_audit", default=None)


def note_audit_detail(detail: str) -> None:
    """Say `detail` in the audit row of the write under way (a request's joined row), when there is one."""
    pending = _JOINED.get()
    if pending is not None:
        pending.detail = detail[:2000]


@contextmanager
def joined_audit(pending: JoinedAudit) -> Iterator[JoinedAudit]:
    """Within this context (and the worker threads it starts), the first committing write carries `pending`."""
    check_fields(pending.row)
    token = _JOINED.set(pending)
    try:
        yield pending
    finally:
        _JOINED.reset(token)


def joined_runs(runs: Sequence[tuple[Any, bool]]) -> None:
    """Name the runs a write creates in the audit row joined to it, if one waits."""
    pending = _JOINED.get()
    if pending is not None and not pending.written:
        pending.runs_written(runs)


def joined_row(conn: Connection) -> JoinedAudit | None:
    """Insert the joined audit row, if one waits, in `conn`'s transaction; the JoinedAudit to mark written
    once that transaction commits."""
    pending = _JOINED.get()
    if pending is None or pending.written:
        return None
    conn.execute(insert(t.audit), fitted(pending.final()))  # the compiled INSERT is cached: none built per row
    return pending


class AccessRecords:
    """Mixed into Store: token rows and audit rows, each write one transaction."""

    if TYPE_CHECKING:

        def _write(self, *, join_audit: bool = True) -> AbstractContextManager[Connection]: ...
        def _read(self) -> AbstractContextManager[Connection]: ...

    # --- tokens ---------------------------------------------------------------------------------

    def add_token(self, row: dict[str, Any]) -> None:
        with self._write() as conn:
            conn.execute(insert(t.tokens).values(**row))

    def rotate_token(self, token_id: str, new_row: dict[str, Any], now: float) -> None:
        """Revoke `token_id` naming its successor and add the successor, in one transaction."""
        with self._write() as conn:
            old = self._live_token(conn, token_id, "rotate")
            conn.execute(insert(t.tokens).values(**new_row))
            conn.execute(
                update(t.tokens).where(t.tokens.c.id == old["id"]).values(revoked_at=now, rotated_to=new_row["id"])
            )

    def revoke_token(self, token_id: str, now: float) -> dict[str, Any]:
        with self._write() as conn:
            old = self._live_token(conn, token_id, "revoke")
            conn.execute(update(t.tokens).where(t.tokens.c.id == old["id"]).values(revoked_at=now))
        return old | {"revoked_at": now}

    @staticmethod
    def _live_token(conn: Connection, token_id: str, verb: str) -> dict[str, Any]:
        row = conn.execute(select(t.tokens).where(t.tokens.c.id == token_id)).first()
        if row is None:
            raise NotFoundError(f"no token {token_id!r}; `crossrail token list` shows the tokens")
        found = dict(row._mapping)
        if found["revoked_at"] is not None:
            raise ConflictError(f"token {token_id} is already revoked; create a new one to {verb}")
        return found

    def token_by_hash(self, secret_sha256: str) -> dict[str, Any] | None:
        with self._read() as conn:
            row = conn.execute(select(t.tokens).where(t.tokens.c.secret_sha256 == secret_sha256)).first()
        return None if row is None else dict(row._mapping)

    def has_tokens(self) -> bool:
        """Whether any token was ever made here (a workspace others act in)."""
        with self._read() as conn:
            return conn.execute(select(t.tokens.c.id).limit(1)).first() is not None

    def tokens(self) -> list[dict[str, Any]]:
        """Every token, oldest first, without its hash."""
        cols = [c for c in t.tokens.columns if c.name != "secret_sha256"]
        with self._read() as conn:
            return [dict(r._mapping) for r in conn.execute(select(*cols).order_by(t.tokens.c.created_at))]

    def team_names(self) -> list[str]:
        """Every team a run, a token or an audit row names here, sorted (for a did-you-mean)."""
        named = select(t.runs.c.team).union(select(t.tokens.c.team), select(t.audit.c.team))
        with self._read() as conn:
            return sorted({str(row[0]) for row in conn.execute(named) if row[0]})

    def key_owner(self, idempotency_key: str) -> tuple[bool, str | None]:
        """Whether a run holds `idempotency_key`, and that run's team."""
        with self._read() as conn:
            row = conn.execute(select(t.runs.c.team).where(t.runs.c.idempotency_key == idempotency_key)).first()
        return (False, None) if row is None else (True, row[0])

    # --- audit ----------------------------------------------------------------------------------

    def append_audit(self, row: dict[str, Any]) -> int:
        check_fields(row)
        with self._write(join_audit=False) as conn:
            key = conn.execute(insert(t.audit), fitted(row)).inserted_primary_key
        assert key is not None
        return int(key[0])

    def audit(
        self, *, since: float | None = None, team: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Audit rows oldest first, from `since` on, of `team` only when given (the newest `limit` of them)."""
        q = select(t.audit).order_by(t.audit.c.seq.desc())
        if since is not None:
            q = q.where(t.audit.c.ts >= since)
        if team is not None:
            q = q.where(t.audit.c.team == team)
        if limit is not None:
            q = q.limit(limit)
        with self._read() as conn:
            return [dict(r._mapping) for r in conn.execute(q)][::-1]

    def audit_count(self) -> int:
        with self._read() as conn:
            return int(conn.execute(select(func.count()).select_from(t.audit)).scalar_one())
