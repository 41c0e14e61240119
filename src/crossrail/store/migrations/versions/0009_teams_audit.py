"""team-scoped API tokens and the audit log

Revision ID: 0009
Revises: 0008

`tokens` keeps each token's team, role and user with the sha256 of its secret (never the secret); `audit`
records every write and every refused attempt and, like `events`, refuses UPDATE, DELETE and TRUNCATE.
"""

import sqlalchemy as sa
from alembic import op

from crossrail.store import append_only

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("secret_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("team", sa.String(128), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("user", sa.String(256), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("created_by", sa.String(256), nullable=False),
        sa.Column("expires_at", sa.Float),
        sa.Column("revoked_at", sa.Float),
        sa.Column("rotated_to", sa.String(16)),
    )
    op.create_table(
        "audit",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("who", sa.String(256), nullable=False),
        sa.Column("claimed", sa.String(256)),
        sa.Column("team", sa.String(128)),
        sa.Column("role", sa.String(16)),
        sa.Column("token_id", sa.String(16)),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(256)),
        sa.Column("run_uid", sa.String(26)),
        sa.Column("origin", sa.String(256), nullable=False),
        sa.Column("result", sa.String(16), nullable=False),
        sa.Column("status", sa.Integer),
        sa.Column("detail", sa.Text),
    )
    op.create_index("ix_audit_ts", "audit", ["ts"])
    op.create_index("ix_audit_team_ts", "audit", ["team", "ts"])
    append_only.create("audit")


def downgrade() -> None:
    append_only.drop("audit")
    op.drop_table("audit")
    op.drop_table("tokens")
