"""device busy share under its own name: NVML samples recorded as accelerator_utilization become device_busy

Revision ID: 0014
Revises: 0013

`accelerator_utilization` is model FLOP/s over the chip type's declared peak (docs/metrics.md); the busy share
PyTorch read from NVML, recorded under that name until now, is a different quantity. Every sample recorded so
far under `accelerator_utilization` was such a busy share, so all of them move to `device_busy`; downgrade moves
them back.
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(sa.text("UPDATE metric_samples SET name = 'device_busy' WHERE name = 'accelerator_utilization'"))


def downgrade() -> None:
    op.execute(sa.text("UPDATE metric_samples SET name = 'accelerator_utilization' WHERE name = 'device_busy'"))
