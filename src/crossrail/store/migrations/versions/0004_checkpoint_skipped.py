"""checkpoints a restore found corrupt: why the runtime skipped them

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("skipped_reason", sa.String(512)))


def downgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("skipped_reason")
