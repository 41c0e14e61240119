"""an attempt names the part of a pipeline run it runs (NULL for an ordinary run's attempts)

Revision ID: 0011
Revises: 0010

A run with `spec.parts` (an RL run's sampler, reward and learner) runs each part as its own attempts,
numbered in one sequence with the run's: `attempts.part` says which part an attempt is, so a part's
failure retries that part alone and lineage records each part's hardware.
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("part", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("part")
