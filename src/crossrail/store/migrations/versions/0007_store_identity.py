"""the store has an id; agents register; events are append-only with a per-run hash chain

Revision ID: 0007
Revises: 0006
"""

import uuid

import sqlalchemy as sa
from alembic import op

from crossrail.core.clock import SystemClock
from crossrail.store import append_only
from crossrail.store.chain import row_hash

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "store_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(256), nullable=False),
    )
    op.bulk_insert(
        sa.table("store_meta", sa.column("key", sa.String), sa.column("value", sa.String)),
        [{"key": "store_id", "value": uuid.uuid4().hex}, {"key": "created_at", "value": repr(SystemClock().now())}],
    )
    op.create_table(
        "agents",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("workspace", sa.String(2048)),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("heartbeat_at", sa.Float, nullable=False),
        sa.Column("stopped_at", sa.Float),
    )
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("hash", sa.String(64)))
    _chain_existing_events()
    append_only.create("events")


def _chain_existing_events() -> None:
    """Events written before the chain get their hashes now, in seq order, before the triggers forbid updates."""
    conn = op.get_bind()
    events = sa.table(
        "events",
        sa.column("seq", sa.Integer),
        sa.column("ts", sa.Float),
        sa.column("type", sa.String),
        sa.column("run_id", sa.String),
        sa.column("attempt", sa.Integer),
        sa.column("data", sa.JSON),
        sa.column("hash", sa.String),
    )
    last: dict[str | None, str] = {}
    rows = conn.execute(sa.select(events).order_by(events.c.seq)).mappings().all()
    updates = []
    for row in rows:
        digest = row_hash(last.get(row["run_id"]), dict(row))
        last[row["run_id"]] = digest
        updates.append({"k": row["seq"], "h": digest})
    if updates:
        conn.execute(sa.update(events).where(events.c.seq == sa.bindparam("k")).values(hash=sa.bindparam("h")), updates)


def downgrade() -> None:
    append_only.drop("events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("hash")
    op.drop_table("agents")
    op.drop_table("store_meta")
