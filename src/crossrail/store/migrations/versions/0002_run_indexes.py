"""run indexes for the status read model: counts per stage and state, newest active runs

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Covering index: counting runs per stage and state reads the index, not the wide run rows.
    op.create_index("ix_runs_stage_state_chips", "runs", ["stage", "state", "chips"])
    op.create_index("ix_runs_state_created", "runs", ["state", "created_at"])
    op.drop_index("ix_runs_state", table_name="runs")


def downgrade() -> None:
    op.create_index("ix_runs_state", "runs", ["state"])
    op.drop_index("ix_runs_state_created", table_name="runs")
    op.drop_index("ix_runs_stage_state_chips", table_name="runs")
