"""Stored shapes (SQLAlchemy 2 tables). Only Alembic migrations change the schema; a test
checks that these models and ``migrations/versions`` do not drift."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    WriteOnlyMapped,
    mapped_column,
    relationship,
    validates,
)

from controlplane.model.spec import StoredSpec


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC on every database (SQLite hands back naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class SpecJSON(TypeDecorator[StoredSpec]):
    """A :class:`StoredSpec` kept as JSON: validated once as the row loads, so readers get
    typed fields instead of dicts with restated defaults."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: StoredSpec | None, dialect: Any) -> Any:
        return None if value is None else value.public()

    def process_result_value(self, value: Any, dialect: Any) -> StoredSpec | None:
        return None if value is None else StoredSpec.model_validate(value)


class Base(DeclarativeBase):
    pass


# Spelled as SQLAlchemy renders the reconciler's query, which SQLite needs to use the index.
_PENDING_SQLITE = text("generation > observed_generation OR deleting = 1")
_PENDING_PG = text("generation > observed_generation OR deleting")


class ServiceRow(Base):
    __tablename__ = "services"
    __table_args__ = (
        UniqueConstraint("cluster", "name", name="uq_services_cluster_name"),
        Index("ix_services_route_version", "cluster", "route_version"),
        # The list's sort and filter columns (id breaks ties: stable, keyset-friendly).
        Index("ix_services_created", "cluster", "created_at", "id"),
        Index("ix_services_updated", "cluster", "updated_at", "id"),
        Index("ix_services_status", "cluster", "status", "id"),
        Index("ix_services_group", "cluster", "group_name"),
        # Tokens are unique per cluster: the gateway's gRPC door selects a service by its token.
        Index("uq_services_cluster_token", "cluster", "token_sha256", unique=True),
        # Only services with work pending: the reconciler's poll reads this, not the table.
        Index(
            "ix_services_pending",
            "cluster",
            sqlite_where=_PENDING_SQLITE,
            postgresql_where=_PENDING_PG,
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uid: Mapped[str] = mapped_column(String(36), unique=True)
    cluster: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(63))
    spec: Mapped[StoredSpec] = mapped_column(SpecJSON)
    # The token itself is kept, sealed, for the explicit admin "show token" call, the
    # console and the route table (the gateway checks EAS-signed calls with it).
    token: Mapped[str] = mapped_column(String(512))  # sealed (controlplane.store.sealing)
    token_sha256: Mapped[str] = mapped_column(String(64))
    generation: Mapped[int] = mapped_column(Integer, default=1)
    observed_generation: Mapped[int] = mapped_column(Integer, default=0)
    stopped: Mapped[bool] = mapped_column(default=False)
    deleting: Mapped[bool] = mapped_column(default=False)
    status: Mapped[str] = mapped_column(String(16), default="Creating")
    reason: Mapped[str] = mapped_column(String(64), default="")
    message: Mapped[str] = mapped_column(Text, default="")
    total_instances: Mapped[int] = mapped_column(Integer, default=0)
    pending_instances: Mapped[int] = mapped_column(Integer, default=0)
    running_instances: Mapped[int] = mapped_column(Integer, default=0)
    # ``spec.metadata.group``, kept in a column (set with the spec) to find members by index.
    group_name: Mapped[str | None] = mapped_column(String(63), default=None)
    # The replica template the reconciler last applied (compared in bulk on resync).
    template_hash: Mapped[str] = mapped_column(String(16), default="", server_default="")
    # The route counter's value at this service's last routing change (gateway deltas).
    route_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Replicas as last observed by the reconciler: [{index, state, endpoint, restarts, ...}].
    replicas: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Optimistic concurrency: every UPDATE checks and bumps it, so no write is lost.
    version: Mapped[int] = mapped_column(Integer, default=1)
    # EAS's service labels ({key: value}; None: none), kept beside the spec.
    labels: Mapped[dict[str, str] | None] = mapped_column(JSON, default=None)
    # EAS's safety lock: "" (none), "dangerous" or "all" (controlplane.store.safety_lock).
    safety_lock: Mapped[str] = mapped_column(String(16), default="", server_default="")
    # EAS's scheduled scaler as its API takes it ({"ScaleJobs": [...], "ExcludeDates": [...]}).
    cron_scaler: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    # The version (ServiceVersionRow.version) whose spec the service runs.
    current_version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    latest_version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # Restarts asked for: part of the replica template once above 0, so each one rolls.
    restarts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Replicas DeleteServiceInstances last asked to replace (names never come back).
    retired_instances: Mapped[list[str] | None] = mapped_column(JSON, default=None)

    # Write-only: adding an event never loads the (unbounded) history.
    events: WriteOnlyMapped[EventRow] = relationship(
        back_populates="service", cascade="all, delete-orphan", passive_deletes=True
    )

    __mapper_args__ = {"version_id_col": version}  # noqa: RUF012

    @validates("spec")
    def _follow_spec(self, _key: str, spec: StoredSpec) -> StoredSpec:
        self.group_name = spec.metadata.group
        return spec

    def add_event(self, reason: str, message: str, *, warning: bool = False) -> None:
        self.events.add(
            EventRow(type="Warning" if warning else "Normal", reason=reason, message=message)
        )


class EventRow(Base):
    __tablename__ = "service_events"
    __table_args__ = (Index("ix_service_events_service_id", "service_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    service_id: Mapped[int] = mapped_column(ForeignKey("services.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    type: Mapped[str] = mapped_column(String(16))  # Normal | Warning
    reason: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)

    service: Mapped[ServiceRow] = relationship(back_populates="events")


class ServiceVersionRow(Base):
    """A service's spec as one of its versions: version 1 at create, one more for each
    update that changes what replicas run. UpdateServiceVersion goes back to one."""

    __tablename__ = "service_versions"
    __table_args__ = (
        UniqueConstraint("service_id", "version", name="uq_service_versions_version"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    service_id: Mapped[int] = mapped_column(ForeignKey("services.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class GroupRow(Base):
    """A service group: exists while it has members (``metadata.group``), made with the
    first and removed with the last. Holds what is the group's own: how traffic is split and
    the token that opens the group endpoint (stable while members come and go)."""

    __tablename__ = "service_groups"
    __table_args__ = (
        UniqueConstraint("cluster", "name", name="uq_service_groups_cluster_name"),
        Index("ix_service_groups_route_version", "cluster", "route_version"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(63))
    traffic_mode: Mapped[str] = mapped_column(String(16), default="customized")
    token: Mapped[str] = mapped_column(String(512))  # sealed (controlplane.store.sealing)
    token_sha256: Mapped[str] = mapped_column(String(64))
    route_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class RouteRemovalRow(Base):
    """A service or group (``kind``) deleted at a route version, so a gateway asking for
    changes after an older version drops it. Pruned past the ``routes_floor`` counter."""

    __tablename__ = "route_removals"
    __table_args__ = (Index("ix_route_removals_version", "cluster", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(8), default="service", server_default="service")
    name: Mapped[str] = mapped_column(String(63))
    version: Mapped[int] = mapped_column(Integer)


class LeaseRow(Base):
    """Leader lease: the reconciler whose ``holder`` is here, unexpired, is the one that acts."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())


class CounterRow(Base):
    """Named monotonic counters; ``routes`` versions the table the gateway watches."""

    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(Integer)


class InstallationRow(Base):
    """The installation's identity: one row, written by the first migration that made this
    table and never changed. The Kubernetes runtime stamps it on every object it makes and
    touches only objects that carry it."""

    __tablename__ = "installation"

    uid: Mapped[str] = mapped_column(String(36), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class AccessKeyRow(Base):
    """An AccessKey pair: the id is public, the secret sealed (controlplane.store.sealing). A
    revoked key's row is deleted, so it is refused exactly as an unknown one."""

    __tablename__ = "access_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # the AccessKeyId
    secret: Mapped[str] = mapped_column(String(512))  # sealed
    role: Mapped[str] = mapped_column(String(16))  # admin | developer | viewer
    services: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)  # globs; None: all
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class NonceRow(Base):
    """A signature nonce seen within its request's validity window: the primary key makes a
    second use fail on every control-plane replica. Pruned once expired."""

    __tablename__ = "signature_nonces"
    __table_args__ = (Index("ix_signature_nonces_expires", "expires_at"),)

    key: Mapped[str] = mapped_column(String(200), primary_key=True)  # "<AccessKeyId>:<nonce>"
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())


class AuditRow(Base):
    """One write or refused request on the API. Pruned past the retention setting."""

    __tablename__ = "audit_log"
    __table_args__ = (
        Index("ix_audit_log_time", "time"),
        Index("ix_audit_log_principal", "principal", "time"),
        Index("ix_audit_log_resource", "resource", "time"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    principal: Mapped[str] = mapped_column(String(64))  # AccessKeyId, admin-token, anonymous
    action: Mapped[str] = mapped_column(String(64))
    resource: Mapped[str] = mapped_column(String(128))
    status: Mapped[int] = mapped_column(Integer)
    request_id: Mapped[str] = mapped_column(String(64))
    source_ip: Mapped[str] = mapped_column(String(64))
