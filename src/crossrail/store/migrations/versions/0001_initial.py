"""initial: experiments, runs, attempts, events, checkpoints, metric samples

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("digest", sa.String(80), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("name", "digest", name="uq_experiments_name_digest"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(80), primary_key=True),
        sa.Column("experiment", sa.String(64), nullable=False),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), nullable=False),
        sa.Column("stage", sa.String(32), nullable=False),
        sa.Column("team", sa.String(128)),
        sa.Column("owner", sa.String(256)),
        sa.Column("priority", sa.String(16), nullable=False),
        sa.Column("chips", sa.Integer, nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("spec_digest", sa.String(80), nullable=False),
        sa.Column("idempotency_key", sa.String(256), unique=True),
        sa.Column("resumed_from", sa.String(80)),
        sa.Column("parent_run", sa.String(80)),
        sa.Column("parent_checkpoint", sa.String(1024)),
        sa.Column("dataset_uri", sa.String(2048), nullable=False),
        sa.Column("dataset_version", sa.String(256), nullable=False),
        sa.Column("code_repo", sa.String(2048)),
        sa.Column("code_commit", sa.String(64)),
        sa.Column("config_uri", sa.String(2048)),
        sa.Column("config_digest", sa.String(80)),
        sa.Column("image", sa.String(2048), nullable=False),
        sa.Column("image_digest", sa.String(80)),
        sa.Column("checkpoint_dir", sa.String(2048), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.UniqueConstraint("experiment", "n", name="uq_runs_experiment_n"),
    )
    op.create_index("ix_runs_state", "runs", ["state"])
    op.create_index("ix_runs_experiment", "runs", ["experiment"])
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(80), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("accelerator", sa.String(8), nullable=False),
        sa.Column("chip_type", sa.String(64), nullable=False),
        sa.Column("chips", sa.Integer, nullable=False),
        sa.Column("cost_per_chip_hour", sa.Float, nullable=False),
        sa.Column("dataset_uri", sa.String(2048), nullable=False),
        sa.Column("dataset_version", sa.String(256), nullable=False),
        sa.Column("code_commit", sa.String(64)),
        sa.Column("config_digest", sa.String(80)),
        sa.Column("image_digest", sa.String(80)),
        sa.Column("started_at", sa.Float),
        sa.Column("ended_at", sa.Float),
        sa.Column("exit_code", sa.Integer),
        sa.Column("reason", sa.Text),
        sa.UniqueConstraint("run_id", "number", name="uq_attempts_run_number"),
    )
    op.create_table(
        "events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("run_id", sa.String(80)),
        sa.Column("attempt", sa.Integer),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_index("ix_events_run", "events", ["run_id", "seq"])
    op.create_index("ix_events_type", "events", ["type"])
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(80), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("attempt", sa.Integer),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("uri", sa.String(2048), nullable=False),
        sa.Column("format", sa.String(64), nullable=False),
        sa.Column("parent_id", sa.Integer, sa.ForeignKey("checkpoints.id")),
        sa.Column("committed_at", sa.Float, nullable=False),
        sa.UniqueConstraint("run_id", "step", name="uq_checkpoints_run_step"),
    )
    op.create_table(
        "metric_samples",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(80), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("attempt", sa.Integer),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("step", sa.Integer),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
    )
    op.create_index("ix_metric_samples_run_name", "metric_samples", ["run_id", "name", "ts"])


def downgrade() -> None:
    for table in ("metric_samples", "checkpoints", "events", "attempts", "runs", "experiments"):
        op.drop_table(table)
