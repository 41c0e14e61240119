"""attempt execution fields: report channel and cursor, last heartbeat, signal, who stopped it

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("report_uri", sa.String(2048)))
        batch.add_column(sa.Column("report_cursor", sa.String(64)))
        batch.add_column(sa.Column("last_heartbeat", sa.Float))
        batch.add_column(sa.Column("signal", sa.Integer))
        batch.add_column(sa.Column("stopped_by", sa.String(16)))
        batch.add_column(sa.Column("created_at", sa.Float))
    op.create_index("ix_attempts_state", "attempts", ["state"])


def downgrade() -> None:
    op.drop_index("ix_attempts_state", table_name="attempts")
    with op.batch_alter_table("attempts") as batch:
        for column in ("created_at", "stopped_by", "signal", "last_heartbeat", "report_cursor", "report_uri"):
            batch.drop_column(column)
