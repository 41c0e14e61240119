"""The store's tokens and audit log (tables of migration 0009): the Store's methods over them.

Tokens are kept as the sha256 of their secret; the audit log is append-only (store/append_only.py). An audited
write's row can ride in the write's own transaction (`JoinedAudit`, store/joined.py).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from crossrail.errors import ConflictError, NotFoundError
from crossrail.store import schema as t
from crossrail.store.engine import StoreBase
from crossrail.store.joined import check_fields, fitted


class AccessRecords(StoreBase):
    """Mixed into Store: token rows and audit rows, each write one transaction."""

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
