"""team-scoped API tokens and the audit log

Revision ID: 0009
Revises: 0008
"""

from alembic import op  # noqa: F401

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
