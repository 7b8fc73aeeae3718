"""Service tokens unique per cluster: the gateway's gRPC door selects a service by its token
alone. Refuses to upgrade (naming the services) when two services already share a token.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    shared = op.get_bind().execute(
        sa.text(
            "SELECT cluster, token_sha256 FROM services "
            "GROUP BY cluster, token_sha256 HAVING COUNT(*) > 1"
        )
    )
    clashes = []
    for cluster, digest in shared:
        names = op.get_bind().execute(
            sa.text(
                "SELECT name FROM services WHERE cluster = :c AND token_sha256 = :d ORDER BY name"
            ),
            {"c": cluster, "d": digest},
        )
        clashes.append(f"{cluster}: " + ", ".join(n for (n,) in names))
    if clashes:
        raise RuntimeError(
            "services share a token (tokens must be unique per cluster): "
            + "; ".join(clashes)
            + ". Rotate all but one of each ('eascmd token <name> --rotate'), then migrate."
        )
    op.create_index(
        "uq_services_cluster_token", "services", ["cluster", "token_sha256"], unique=True
    )


def downgrade() -> None:
    op.drop_index("uq_services_cluster_token", table_name="services")
