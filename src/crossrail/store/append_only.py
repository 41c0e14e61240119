"""Append-only tables: triggers that make SQLite and PostgreSQL refuse UPDATE and DELETE (and TRUNCATE) on a table.

Migrations call `create(table)` and `drop(table)` for every table whose rows are a record (events; the audit
log reuses them). SQLite has no TRUNCATE; its DELETE trigger fires for `DELETE FROM table` too.
"""

from __future__ import annotations

from alembic import op

from crossrail.errors import StoreError

_PG_FUNCTION = """
CREATE OR REPLACE FUNCTION crossrail_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'crossrail: table % is append-only: % is refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END
$$
"""


def statements(dialect: str, table: str) -> list[str]:
    """The DDL that makes `table` append-only on `dialect` ("sqlite" or "postgresql")."""
    if dialect == "sqlite":
        return [
            f"CREATE TRIGGER {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
            f"BEGIN SELECT RAISE(ABORT, 'crossrail: table {table} is append-only: {verb} is refused'); END"
            for verb in ("UPDATE", "DELETE")
        ]
    if dialect == "postgresql":
        return [
            _PG_FUNCTION,
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION crossrail_append_only()",
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION crossrail_append_only()",
        ]
    raise StoreError(f"no append-only triggers for {dialect}; crossrail supports sqlite and postgresql")


def drop_statements(dialect: str, table: str) -> list[str]:
    if dialect == "sqlite":
        return [f"DROP TRIGGER IF EXISTS {table}_no_{verb}" for verb in ("update", "delete")]
    return [f"DROP TRIGGER IF EXISTS {table}_{name} ON {table}" for name in ("append_only", "no_truncate")]


def create(table: str) -> None:
    """In a migration: make `table` append-only."""
    for sql in statements(op.get_bind().dialect.name, table):
        op.execute(sql)


def drop(table: str) -> None:
    """In a migration's downgrade: let `table` be changed again (the shared PostgreSQL function stays)."""
    for sql in drop_statements(op.get_bind().dialect.name, table):
        op.execute(sql)
