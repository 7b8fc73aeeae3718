"""The route table the gateway serves from, published by the control plane.

Built from the stored services (token digests, ready replica endpoints written by the
reconciler). Its version is a counter bumped in the same transaction as any change that
matters to routing — one SQLAlchemy hook, so no write path can forget it — which also stamps
each changed service with that version (``route_version``) and records deleted services
(``route_removals``). So a gateway asks for the changes after the version it has and gets
only those: one service's change costs work proportional to that service, not to N. Served
by long-poll at ``contract.wire.ROUTES_PATH``; long-polls in the process that commits a
change wake at once (:data:`CHANGED`), other processes see it at their next poll of the
counter.

Versions are handed out under the counter row's write lock, held to commit (PostgreSQL's
row lock, SQLite's database lock), so changes commit in version order and a reader that saw
version V has seen every change up to V.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from typing import Any

from sqlalchemy import delete, event, inspect, select, update
from sqlalchemy.orm import Session, sessionmaker

from contract.wire import Route, RouteTable
from controlplane import store
from controlplane.models import CounterRow, RouteRemovalRow, ServiceRow

COUNTER = "routes"
FLOOR = "routes_floor"  # removals at or below it are pruned: a gateway that far behind
REMOVALS_KEPT = 10_000  # gets a whole table; how many versions of removals are kept
_ROUTING_FIELDS = ("token_sha256", "status", "spec", "deleting", "stopped")


def version(session: Session, counter: str = COUNTER) -> int:
    return session.scalar(select(CounterRow.value).where(CounterRow.name == counter)) or 0


def table(
    sessions: sessionmaker[Session], cluster: str, default_timeout_ms: int, after: int = -1
) -> RouteTable:
    """The changes after version ``after``, or the whole table when the caller has none
    (``after`` < 0), is too far behind (removals pruned) or ahead (a new database)."""
    with sessions() as s:
        current = version(s)  # read first: a change after this shows up as a newer version
        if after < version(s, FLOOR) or after > current:
            routes = [_route(r, default_timeout_ms) for r in store.routable(s, cluster)]
            return RouteTable(version=current, routes=routes)
        changed = store.routes_changed_after(s, cluster, after)
        removed = [r.name for r in changed if r.deleting]
        removed += store.removed_after(s, cluster, after)
        routes = [_route(r, default_timeout_ms) for r in changed if not r.deleting]
        return RouteTable(version=current, routes=routes, full=False, removed=removed)


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


def _routing_changes(session: Session) -> tuple[list[ServiceRow], list[ServiceRow]]:
    """The services of this flush whose route changes, and those deleted."""
    changed = [obj for obj in session.new if isinstance(obj, ServiceRow)]
    changed += [obj for obj in session.dirty if isinstance(obj, ServiceRow) and _routes(obj)]
    return changed, [obj for obj in session.deleted if isinstance(obj, ServiceRow)]


def _routes(row: ServiceRow) -> bool:
    state = inspect(row)
    if any(state.attrs[f].history.has_changes() for f in _ROUTING_FIELDS):
        return True
    # A replica's other fields (pull progress, messages) change often and route nothing.
    replicas = state.attrs["replicas"].history
    return replicas.has_changes() and [_endpoints(v) for v in replicas.deleted] != [
        _endpoints(v) for v in replicas.added
    ]


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
    changed, deleted = _routing_changes(session)
    if not changed and not deleted:
        return
    new = session.scalar(
        update(CounterRow)
        .where(CounterRow.name == COUNTER)
        .values(value=CounterRow.value + 1)
        .returning(CounterRow.value)
    )
    assert new is not None, "the routes counter is missing: run 'openeas migrate'"
    for row in changed:
        row.route_version = new
    for row in deleted:
        session.add(RouteRemovalRow(cluster=row.cluster, name=row.name, version=new))
    if deleted:
        _prune_removals(session, new - REMOVALS_KEPT)
    session.info["routes_changed"] = True


def _prune_removals(session: Session, floor: int) -> None:
    """Forget removals at or below ``floor``; a gateway behind it gets a whole table."""
    if floor > version(session, FLOOR):
        session.execute(delete(RouteRemovalRow).where(RouteRemovalRow.version <= floor))
        session.execute(update(CounterRow).where(CounterRow.name == FLOOR).values(value=floor))


def _announce(session: Session) -> None:
    if session.info.pop("routes_changed", False):
        CHANGED.fire()
