"""Tables of the state store. Alembic migrations (store/migrations) create and evolve them."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

experiments = Table(
    "experiments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False),
    Column("digest", String(80), nullable=False),
    Column("spec", JSON, nullable=False),
    Column("created_at", Float, nullable=False),
    UniqueConstraint("name", "digest", name="uq_experiments_name_digest"),
)

runs = Table(
    "runs",
    metadata,
    Column("id", String(80), primary_key=True),
    Column("uid", String(26)),  # a lower-case ULID; NULL for runs created before uids (0005)
    Column("experiment", String(64), nullable=False),
    Column("n", Integer, nullable=False),
    Column("experiment_id", Integer, ForeignKey("experiments.id"), nullable=False),
    Column("stage", String(32), nullable=False),
    Column("team", String(128)),
    Column("owner", String(256)),
    Column("priority", String(16), nullable=False),
    Column("chips", Integer, nullable=False),
    Column("queue", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("spec", JSON, nullable=False),
    Column("spec_digest", String(80), nullable=False),
    Column("idempotency_key", String(256), unique=True),
    Column("resumed_from", String(80)),
    Column("parent_run", String(80)),
    Column("parent_checkpoint", String(1024)),
    Column("dataset_uri", String(2048), nullable=False),
    Column("dataset_version", String(256), nullable=False),
    Column("code_repo", String(2048)),
    Column("code_commit", String(64)),
    Column("config_uri", String(2048)),
    Column("config_digest", String(80)),
    Column("image", String(2048), nullable=False),
    Column("image_digest", String(80)),
    Column("checkpoint_dir", String(2048), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    UniqueConstraint("experiment", "n", name="uq_runs_experiment_n"),
    UniqueConstraint("uid", name="uq_runs_uid"),
    Index("ix_runs_stage_state_chips", "stage", "state", "chips"),
    Index("ix_runs_state_created", "state", "created_at"),
    Index("ix_runs_experiment", "experiment"),
    # Covering the queue's key read (Store.queued_keys): it never reads the wide run rows (0012).
    Index("ix_runs_queued_keys", "state", "queue", "priority", "updated_at", "id", "parent_run", "parent_checkpoint"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(80), ForeignKey("runs.id"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("pool", String(64), nullable=False),
    Column("accelerator", String(8), nullable=False),
    Column("chip_type", String(64), nullable=False),
    Column("chips", Integer, nullable=False),
    Column("cost_per_chip_hour", Float, nullable=False),
    Column("dataset_uri", String(2048), nullable=False),
    Column("dataset_version", String(256), nullable=False),
    Column("code_commit", String(64)),
    Column("config_digest", String(80)),
    Column("image_digest", String(80)),
    Column("started_at", Float),
    Column("ended_at", Float),
    Column("exit_code", Integer),
    Column("reason", Text),
    Column("report_uri", String(2048)),
    Column("report_cursor", String(64)),
    Column("last_heartbeat", Float),
    Column("signal", Integer),
    Column("stopped_by", String(16)),
    Column("created_at", Float),
    Column("parent_checkpoint", String(2048)),  # the parent checkpoint URI resolved when it launched
    Column("end_reason", String(16)),  # core.EndReason: why it ended (0008)
    Column("launch_term", Integer),  # the leader term whose fenced write allowed its launch (0010)
    Column("part", String(64)),  # the part of a pipeline run it runs; NULL for an ordinary run (0011)
    UniqueConstraint("run_id", "number", name="uq_attempts_run_number"),
    Index("ix_attempts_state", "state"),
)

events = Table(
    "events",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("ts", Float, nullable=False),
    Column("type", String(32), nullable=False),
    Column("run_id", String(80)),
    Column("attempt", Integer),
    Column("data", JSON, nullable=False),
    # sha256 of the previous event of the same run (or of the no-run chain) and this one's content (store/chain.py)
    Column("hash", String(64)),
    Index("ix_events_run", "run_id", "seq"),
    Index("ix_events_type", "type"),
)

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(80), ForeignKey("runs.id"), nullable=False),
    Column("attempt", Integer),
    Column("step", Integer, nullable=False),
    Column("uri", String(2048), nullable=False),
    Column("format", String(64), nullable=False),
    Column("parent_id", Integer, ForeignKey("checkpoints.id")),
    Column("committed_at", Float, nullable=False),
    Column("skipped_reason", String(512)),  # set when a restore found it corrupt and skipped it
    Column("state", String(16), nullable=False, server_default="committed"),  # committed | deleted | damaged
    UniqueConstraint("run_id", "step", name="uq_checkpoints_run_step"),
)

metric_samples = Table(
    "metric_samples",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(80), ForeignKey("runs.id"), nullable=False),
    Column("attempt", Integer),
    Column("ts", Float, nullable=False),
    Column("step", Integer),
    Column("name", String(128), nullable=False),
    Column("value", Float, nullable=False),
    Index("ix_metric_samples_run_name", "run_id", "name", "ts"),
)

store_meta = Table(
    "store_meta",
    metadata,
    Column("key", String(64), primary_key=True),  # store_id: made once by migration 0007, copied by backups
    Column("value", String(256), nullable=False),
)

# One row per agent process that ran on this store: the service shows liveness from the heartbeat; leader
# election adds its lease and term here.
agents = Table(
    "agents",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("workspace", String(2048)),
    Column("started_at", Float, nullable=False),
    Column("heartbeat_at", Float, nullable=False),
    Column("stopped_at", Float),
)

# The leader's lease (0010): one row, id 1. `term` only grows (the fencing term every agent write is checked
# against); `renewals` counts the holder's renewals, so standbys see it live without trusting its clock.
leader = Table(
    "leader",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("term", Integer, nullable=False),
    Column("agent_id", String(64)),  # None: nobody leads (the last leader stepped down)
    Column("renewals", Integer, nullable=False),
    Column("renewed_at", Float),  # the holder's clock, for people; standbys time the lease on their own clock
    Column("lease_s", Float),
)

# API tokens (0009): only the sha256 of each secret is kept; a rotated token is revoked and names its successor.
tokens = Table(
    "tokens",
    metadata,
    Column("id", String(16), primary_key=True),
    Column("secret_sha256", String(64), nullable=False, unique=True),
    Column("team", String(128), nullable=False),
    Column("role", String(16), nullable=False),  # core.access.Role
    Column("user", String(256), nullable=False),  # who acts with it: audit rows and events say this name
    Column("created_at", Float, nullable=False),
    Column("created_by", String(256), nullable=False),
    Column("expires_at", Float),
    Column("revoked_at", Float),
    Column("rotated_to", String(16)),
)

# The audit log (0009): every write and every refused attempt, append-only like events.
audit = Table(
    "audit",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("ts", Float, nullable=False),
    Column("who", String(256), nullable=False),
    Column("claimed", String(256)),  # $CROSSRAIL_USER as the local CLI found it, beside the real user
    Column("team", String(128)),
    Column("role", String(16)),
    Column("token_id", String(16)),
    Column("action", String(64), nullable=False),
    Column("target", String(256)),  # a run id, pool, token id ... as asked
    Column("run_uid", String(26)),  # the target run's uid when the target is a run
    Column("origin", String(256), nullable=False),  # client address, or local:<os user>
    Column("result", String(16), nullable=False),  # ok | refused | failed
    Column("status", Integer),  # the HTTP status answered (None locally)
    Column("detail", Text),
    Index("ix_audit_ts", "ts"),
    Index("ix_audit_team_ts", "team", "ts"),
)

# Stored simulation results (0013): per-run records `crossrail compare sim:ID` reads, named by a content id.
simulations = Table(
    "simulations",
    metadata,
    Column("id", String(16), primary_key=True),
    Column("created_at", Float, nullable=False),
    Column("created_by", String(256), nullable=False),
    Column("policy", String(64), nullable=False),
    Column("runs", Integer, nullable=False),
    Column("records", JSON, nullable=False),
)
