"""Route-table deltas, bulk resync, indexed listing (thousands of services), service groups.

- ``services.route_version``: the route counter's value at the service's last routing
  change, so the gateway can ask for what changed after a version (indexed per cluster);
- ``route_removals``: services and groups deleted after a version (tombstones, pruned past a
  floor kept in the ``routes_floor`` counter: a gateway further behind gets a full table);
- ``service_groups``: a group's traffic mode and token, while it has members;
- ``services.template_hash``: the replica template the reconciler last applied, compared in
  bulk with what the runtime runs;
- indexes for the list's sort and filter columns and a partial index of the services with
  work pending (what the reconciler polls).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# As SQLAlchemy renders the reconciler's query (SQLite matches a partial index textually).
PENDING_SQLITE = "generation > observed_generation OR deleting = 1"
PENDING_PG = "generation > observed_generation OR deleting"


def upgrade() -> None:
    with op.batch_alter_table("services") as batch:
        batch.add_column(
            sa.Column("route_version", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("template_hash", sa.String(16), nullable=False, server_default="")
        )
        batch.add_column(sa.Column("group_name", sa.String(63), nullable=True))
        # Room for a sealed token (controlplane.store.sealing); existing ones are sealed by
        # 'openeas migrate'.
        batch.alter_column("token", type_=sa.String(512), existing_type=sa.String(128))
    # Existing services count as changed at the current version (a delta after an older
    # version includes them).
    op.execute(
        "UPDATE services SET route_version = (SELECT value FROM counters WHERE name = 'routes')"
    )
    op.create_index("ix_services_route_version", "services", ["cluster", "route_version"])
    op.create_index("ix_services_created", "services", ["cluster", "created_at", "id"])
    op.create_index("ix_services_updated", "services", ["cluster", "updated_at", "id"])
    op.create_index("ix_services_status", "services", ["cluster", "status", "id"])
    op.create_index("ix_services_group", "services", ["cluster", "group_name"])
    op.create_index(
        "ix_services_pending",
        "services",
        ["cluster"],
        sqlite_where=sa.text(PENDING_SQLITE),
        postgresql_where=sa.text(PENDING_PG),
    )
    op.create_table(
        "route_removals",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False, server_default="service"),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
    )
    op.create_index("ix_route_removals_version", "route_removals", ["cluster", "version"])
    op.create_table(
        "service_groups",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(64), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("traffic_mode", sa.String(16), nullable=False),
        sa.Column("token", sa.String(512), nullable=False),
        sa.Column("token_sha256", sa.String(64), nullable=False),
        sa.Column("route_version", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("cluster", "name", name="uq_service_groups_cluster_name"),
    )
    op.create_index(
        "ix_service_groups_route_version", "service_groups", ["cluster", "route_version"]
    )
    counters = sa.table("counters", sa.column("name", sa.String), sa.column("value", sa.Integer))
    op.bulk_insert(counters, [{"name": "routes_floor", "value": 0}])


def downgrade() -> None:
    op.execute("DELETE FROM counters WHERE name = 'routes_floor'")
    op.drop_index("ix_service_groups_route_version", table_name="service_groups")
    op.drop_table("service_groups")
    op.drop_index("ix_route_removals_version", table_name="route_removals")
    op.drop_table("route_removals")
    for name in ("group", "pending", "status", "updated", "created", "route_version"):
        op.drop_index(f"ix_services_{name}", table_name="services")
    with op.batch_alter_table("services") as batch:
        batch.drop_column("group_name")  # tokens keep their room: sealed ones need it
        batch.drop_column("template_hash")
        batch.drop_column("route_version")
