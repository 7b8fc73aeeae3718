"""The installation's identity: a random id written once, which the Kubernetes runtime
stamps on every object it makes so that it never touches another installation's.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    installation = op.create_table(
        "installation",
        sa.Column("uid", sa.String(36), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.bulk_insert(installation, [{"uid": str(uuid.uuid4()), "created_at": datetime.now(UTC)}])


def downgrade() -> None:
    op.drop_table("installation")
