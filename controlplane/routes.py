"""The route table the gateway serves from, published by the control plane.

Built from the stored services (token digests, ready replica endpoints written by the
reconciler). Its version is a counter bumped in the same transaction as any change that
matters to routing — one SQLAlchemy hook, so no write path can forget it — and served by
long-poll at ``openeas.wire.ROUTES_PATH``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, inspect, select, update
from sqlalchemy.orm import Session, sessionmaker

from controlplane.models import CounterRow, ServiceRow
from openeas.wire import Route, RouteTable

COUNTER = "routes"
_ROUTING_FIELDS = ("token_sha256", "replicas", "status", "spec", "deleting", "stopped")


def version(session: Session) -> int:
    return session.scalar(select(CounterRow.value).where(CounterRow.name == COUNTER)) or 0


def table(sessions: sessionmaker[Session], cluster: str, default_timeout_ms: int) -> RouteTable:
    with sessions() as s:
        current = version(s)  # read first: a change after this shows up as a newer version
        rows = s.scalars(
            select(ServiceRow).where(ServiceRow.cluster == cluster, ServiceRow.deleting.is_(False))
        ).all()
        return RouteTable(version=current, routes=[_route(r, default_timeout_ms) for r in rows])


def _route(row: ServiceRow, default_timeout_ms: int) -> Route:
    rpc: dict[str, Any] = row.spec.get("metadata", {}).get("rpc", {})
    return Route(
        service=row.name,
        token_sha256=row.token_sha256,
        # Old replicas still serve during a rolling update; stopping ones carry no endpoint.
        endpoints=[
            r["endpoint"] for r in row.replicas or [] if r["state"] == "Running" and r["endpoint"]
        ],
        timeout_ms=rpc.get("keepalive") or default_timeout_ms,
        rate_limit=rpc.get("rate_limit"),
        max_queue_size=rpc.get("max_queue_size"),
        status=row.status,
    )


def _changes_routing(session: Session) -> bool:
    for obj in (*session.new, *session.deleted):
        if isinstance(obj, ServiceRow):
            return True
    for obj in session.dirty:
        if isinstance(obj, ServiceRow):
            state = inspect(obj)
            if any(state.attrs[f].history.has_changes() for f in _ROUTING_FIELDS):
                return True
    return False


def install(sessions: sessionmaker[Session]) -> None:
    """Make every session of ``sessions`` bump the route version when routing changes."""
    event.listen(sessions, "before_flush", _bump_version)


def _bump_version(session: Session, _context: Any, _instances: Any) -> None:
    if _changes_routing(session):
        session.execute(
            update(CounterRow).where(CounterRow.name == COUNTER).values(value=CounterRow.value + 1)
        )
