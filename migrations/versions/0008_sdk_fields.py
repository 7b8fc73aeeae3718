"""What the EAS SDK's service actions keep beside the spec: labels, the safety lock, the
scheduled scaler (CronHPA), restarts asked for (RestartService, DeleteServiceInstances),
and the spec of every version (ListServiceVersions, UpdateServiceVersion). Existing
services get their current spec as version 1.

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("services", sa.Column("labels", sa.JSON(), nullable=True))
    op.add_column(
        "services", sa.Column("safety_lock", sa.String(16), nullable=False, server_default="")
    )
    op.add_column("services", sa.Column("cron_scaler", sa.JSON(), nullable=True))
    op.add_column(
        "services",
        sa.Column("current_version", sa.Integer(), nullable=False, server_default="1"),
    )
    op.add_column(
        "services",
        sa.Column("latest_version", sa.Integer(), nullable=False, server_default="1"),
    )
    op.add_column(
        "services", sa.Column("restarts", sa.Integer(), nullable=False, server_default="0")
    )
    op.add_column("services", sa.Column("retired_instances", sa.JSON(), nullable=True))
    op.create_table(
        "service_versions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "service_id",
            sa.Integer(),
            sa.ForeignKey("services.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("service_id", "version", name="uq_service_versions_version"),
    )
    op.execute(
        "INSERT INTO service_versions (service_id, version, spec, created_at) "
        "SELECT id, 1, spec, updated_at FROM services"
    )


def downgrade() -> None:
    op.drop_table("service_versions")
    columns = (
        "retired_instances",
        "restarts",
        "latest_version",
        "current_version",
        "cron_scaler",
        "safety_lock",
    )
    for column in (*columns, "labels"):
        op.drop_column("services", column)
