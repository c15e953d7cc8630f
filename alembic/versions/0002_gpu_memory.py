"""Add GPU memory in use (NVML, MiB) to workload runs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 10:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tuner_workload_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gpu_memory_used_mib", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuner_workload_runs", schema=None) as batch_op:
        batch_op.drop_column("gpu_memory_used_mib")
