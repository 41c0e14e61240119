"""runs get a globally unique uid beside their readable id

Runs created before this revision keep a NULL uid: they load as legacy runs, and their checkpoints stay
where they were (`<checkpoint.dir>/<run id>`). A uid is never made up for them afterwards, because their
checkpoints' manifests could not carry it.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("uid", sa.String(26)))
        batch.create_unique_constraint("uq_runs_uid", ["uid"])


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint("uq_runs_uid", type_="unique")
        batch.drop_column("uid")
