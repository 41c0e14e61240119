"""An audited write's row riding in the write's own transaction (`JoinedAudit`): one commit, and the write and its
row commit or roll back together; and how an audit row is fitted to its table."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, String, insert

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
