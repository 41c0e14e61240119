"""stored simulation results: what `crossrail compare sim:ID` names over the API, instead of a server path

Revision ID: 0013
Revises: 0012

`crossrail simulate --store` keeps a result's per-run records here under a content id, so a request names
a result by that id and never a file on the server.
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "simulations",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("created_by", sa.String(256), nullable=False),
        sa.Column("policy", sa.String(64), nullable=False),
        sa.Column("runs", sa.Integer, nullable=False),
        sa.Column("records", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("simulations")
