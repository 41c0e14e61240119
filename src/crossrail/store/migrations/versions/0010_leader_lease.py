"""agent leader leases with fencing terms

Revision ID: 0010
Revises: 0009

One `leader` row holds the lease of the agent that leads (control/leader.py): its fencing term, which only
grows, and a renewal count that standbys watch; every write an agent makes compares its term with this
row's inside the same transaction. `attempts.launch_term` is the term of the fenced write that allowed an
attempt's launch: an agent launches only after that write committed.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    leader = op.create_table(
        "leader",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("term", sa.Integer, nullable=False),
        sa.Column("agent_id", sa.String(64)),
        sa.Column("renewals", sa.Integer, nullable=False),
        sa.Column("renewed_at", sa.Float),
        sa.Column("lease_s", sa.Float),
    )
    op.bulk_insert(leader, [{"id": 1, "term": 0, "agent_id": None, "renewals": 0, "renewed_at": None, "lease_s": None}])
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("launch_term", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("launch_term")
    op.drop_table("leader")
