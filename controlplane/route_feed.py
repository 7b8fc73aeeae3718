"""The route table the gateway serves from, published by the control plane.

Built from the stored services (token digests, ready replica endpoints written by the
reconciler). Its version is a counter bumped in the same transaction as any change that
matters to routing — one SQLAlchemy hook, so no write path can forget it — and served by
long-poll at ``contract.wire.ROUTES_PATH``. Long-polls in the process that commits a change
wake at once (:data:`CHANGED`); other processes see it at their next poll of the counter.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from typing import Any

from sqlalchemy import event, inspect, select, update
from sqlalchemy.orm import Session, sessionmaker

from contract.wire import Route, RouteTable
from controlplane import store
from controlplane.models import CounterRow, ServiceRow

COUNTER = "routes"
_ROUTING_FIELDS = ("token_sha256", "status", "spec", "deleting", "stopped")


def version(session: Session) -> int:
    return session.scalar(select(CounterRow.value).where(CounterRow.name == COUNTER)) or 0


def table(sessions: sessionmaker[Session], cluster: str, default_timeout_ms: int) -> RouteTable:
    with sessions() as s:
        current = version(s)  # read first: a change after this shows up as a newer version
        routes = [_route(r, default_timeout_ms) for r in store.routable(s, cluster)]
        return RouteTable(version=current, routes=routes)


def _route(row: ServiceRow, default_timeout_ms: int) -> Route:
    rpc = row.spec.metadata.rpc
    return Route(
        service=row.name,
        token_sha256=row.token_sha256,
        endpoints=_endpoints(row.replicas),
        timeout_ms=rpc.keepalive or default_timeout_ms,
        rate_limit=rpc.rate_limit,
        max_queue_size=rpc.max_queue_size,
        status=row.status,
    )


def _endpoints(replicas: list[dict[str, Any]] | None) -> list[str]:
    # Old replicas still serve during a rolling update; stopping ones carry no endpoint.
    return [r["endpoint"] for r in replicas or [] if r["state"] == "Running" and r["endpoint"]]


def _changes_routing(session: Session) -> bool:
    for obj in (*session.new, *session.deleted):
        if isinstance(obj, ServiceRow):
            return True
    for obj in session.dirty:
        if isinstance(obj, ServiceRow):
            state = inspect(obj)
            if any(state.attrs[f].history.has_changes() for f in _ROUTING_FIELDS):
                return True
            # A replica's other fields (pull progress, messages) change often and route nothing.
            replicas = state.attrs["replicas"].history
            if replicas.has_changes() and [_endpoints(v) for v in replicas.deleted] != [
                _endpoints(v) for v in replicas.added
            ]:
                return True
    return False


class ChangeSignal:
    """Wakes this process's long-polls when a routing change commits, from any thread
    (the reconciler and the API commit in worker threads), on every event loop waiting."""

    def __init__(self) -> None:
        self._events: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event] = (
            weakref.WeakKeyDictionary()
        )

    def fire(self) -> None:
        for loop, changed in list(self._events.items()):
            if not loop.is_closed():
                loop.call_soon_threadsafe(changed.set)

    async def wait(self, timeout: float) -> None:
        """Return on the next change, or after ``timeout`` seconds."""
        changed = self._events.setdefault(asyncio.get_running_loop(), asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout)
        changed.clear()


CHANGED = ChangeSignal()


def install(sessions: sessionmaker[Session]) -> None:
    """Make every session of ``sessions`` bump the route version when routing changes."""
    event.listen(sessions, "before_flush", _bump_version)
    event.listen(sessions, "after_commit", _announce)


def _bump_version(session: Session, _context: Any, _instances: Any) -> None:
    if _changes_routing(session):
        session.execute(
            update(CounterRow).where(CounterRow.name == COUNTER).values(value=CounterRow.value + 1)
        )
        session.info["routes_changed"] = True


def _announce(session: Session) -> None:
    if session.info.pop("routes_changed", False):
        CHANGED.fire()
