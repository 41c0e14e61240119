"""agent leader leases with fencing terms

Revision ID: 0010
Revises: 0009
"""

from alembic import op  # noqa: F401

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
