"""checkpoints carry a state: committed, deleted by retention, damaged

Revision ID: 0006
Revises: 0005

`checkpoints.state` is `committed` until the runtime reports the checkpoint deleted by its retention
(`deleted`) or a restore finds it corrupt (`damaged`, with `skipped_reason`); rows that 0004 marked
skipped become `damaged`. `attempts.parent_checkpoint` is the parent checkpoint URI an attempt was
launched from, resolved when it launched (a `latest` parent names a step only then).
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("state", sa.String(16), nullable=False, server_default="committed"))
    op.execute("UPDATE checkpoints SET state = 'damaged' WHERE skipped_reason IS NOT NULL")
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("parent_checkpoint", sa.String(2048)))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("parent_checkpoint")
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("state")
