"""Identities and their trail: AccessKey pairs with roles, the signature nonces seen in
the validity window, and the audit log.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "access_keys",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("secret", sa.String(512), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("services", sa.JSON(), nullable=True),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "signature_nonces",
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_signature_nonces_expires", "signature_nonces", ["expires_at"])
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("principal", sa.String(64), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("resource", sa.String(128), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("source_ip", sa.String(64), nullable=False),
    )
    op.create_index("ix_audit_log_time", "audit_log", ["time"])
    op.create_index("ix_audit_log_principal", "audit_log", ["principal", "time"])
    op.create_index("ix_audit_log_resource", "audit_log", ["resource", "time"])


def downgrade() -> None:
    op.drop_table("audit_log")
    op.drop_table("signature_nonces")
    op.drop_table("access_keys")
