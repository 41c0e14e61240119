"""an attempt's end reason (core.EndReason) gets its own column; stopped_by keeps the reason given to stop()

Revision ID: 0008
Revises: 0007

Stores at 0007 kept the end reason in `stopped_by`. Each ended attempt's `end_reason` is filled from what it
has: that value where it is an end reason, else one read from its state (what crossrail read for such an
attempt before); `stopped_by` then keeps only the reasons crossrail gives an executor's stop().
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

END_REASONS = (
    "succeeded",
    "exit_tempfail",
    "exit_listed",
    "exit",
    "signal",
    "lost",
    "heartbeat_lost",
    "launch_failed",
    "preempted",
    "drained",
    "unplaced",
    "replaced",
    "stale_number",
    "cancelled",
    "suspended",
)
"""core.EndReason's values when this revision was written (a migration does not follow later code)."""
STOP_REASONS = ("preempted", "drained", "cancelled", "suspended")
"""core.StopReason's values: what `stopped_by` holds from this revision on."""
BY_STATE = {
    "succeeded": "succeeded",
    "failed": "signal",
    "lost": "lost",
    "preempted": "preempted",
    "unplaced": "unplaced",
    "cancelled": "cancelled",
    "suspended": "suspended",
}
"""The end reason of an attempt recorded before ends carried one, by its state (a failure counted retryable)."""


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("end_reason", sa.String(16)))
    attempts = sa.table(
        "attempts",
        sa.column("state", sa.String),
        sa.column("stopped_by", sa.String),
        sa.column("end_reason", sa.String),
    )
    ended = attempts.c.state.notin_(("starting", "running"))
    op.execute(
        attempts.update().where(ended, attempts.c.stopped_by.in_(END_REASONS)).values(end_reason=attempts.c.stopped_by)
    )
    for state, reason in BY_STATE.items():
        op.execute(
            attempts.update()
            .where(attempts.c.state == state, attempts.c.end_reason.is_(None))
            .values(end_reason=reason)
        )
    op.execute(attempts.update().where(ended, attempts.c.end_reason.is_(None)).values(end_reason="lost"))
    op.execute(
        attempts.update()
        .where(attempts.c.stopped_by.is_not(None), attempts.c.stopped_by.notin_(STOP_REASONS))
        .values(stopped_by=None)
    )


def downgrade() -> None:
    attempts = sa.table("attempts", sa.column("stopped_by", sa.String), sa.column("end_reason", sa.String))
    op.execute(attempts.update().where(attempts.c.end_reason.is_not(None)).values(stopped_by=attempts.c.end_reason))
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("end_reason")
