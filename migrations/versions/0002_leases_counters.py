"""Reconciler lease and the route-table version counter.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    counters = op.create_table(
        "counters",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Integer(), nullable=False),
    )
    op.bulk_insert(counters, [{"name": "routes", "value": 1}])


def downgrade() -> None:
    op.drop_table("counters")
    op.drop_table("leases")
