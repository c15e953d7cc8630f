"""Add the start's compile, compile-cache and profiling parts to server starts.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-04 17:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tuner_server_starts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("compile_seconds", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("compile_cache_hit", sa.Boolean(), nullable=True))
        batch_op.add_column(sa.Column("profile_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuner_server_starts", schema=None) as batch_op:
        batch_op.drop_column("profile_seconds")
        batch_op.drop_column("compile_cache_hit")
        batch_op.drop_column("compile_seconds")
