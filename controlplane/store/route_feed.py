"""The route table the gateway serves from, published by the control plane.

Built from the stored services (token digests, ready replica endpoints written by the
reconciler). Its version is a counter bumped in the same transaction as any change that
matters to routing — one SQLAlchemy hook, so no write path can forget it — which also stamps
each changed service with that version (``route_version``) and records deleted services
(``route_removals``). So a gateway asks for the changes after the version it has and gets
only those: one service's change costs work proportional to that service, not to N. Served
by long-poll at ``contract.wire.ROUTES_PATH``; long-polls in the process that commits a
change wake at once (:data:`controlplane.store.changes.ROUTES`), other processes see it at their
next poll of the counter.

Versions are handed out under the counter row's write lock, held to commit (PostgreSQL's
row lock, SQLite's database lock), so changes commit in version order and a reader that saw
version V has seen every change up to V.

Each route carries its token too, opened when an ``opener`` is given: EAS's signed predict
calls are an HMAC keyed by the token, so the gateway needs it (the table is served to
route-reader credentials only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import bindparam, delete, event, insert, inspect, select, update
from sqlalchemy.orm import InstanceState, Session, sessionmaker
from sqlalchemy.orm.attributes import set_committed_value

from contract.wire import GroupRoute, MirrorRoute, QueueRoute, Route, RouteTable
from controlplane.model.spec import StoredSpec
from controlplane.store import changes
from controlplane.store import route_queries as rq
from controlplane.store.changes import commit_watch
from controlplane.store.sealing import SealError
from controlplane.store.tables import CounterRow, GroupRow, RouteRemovalRow, ServiceRow

log = logging.getLogger(__name__)
Opener = Callable[[str], str]  # a sealed token → the token (controlplane.store.sealing)

COUNTER = "routes"
FLOOR = "routes_floor"  # removals at or below it are pruned: a gateway that far behind
REMOVALS_KEPT = 10_000  # gets a whole table; how many versions of removals are kept
_ROUTING_FIELDS = ("token_sha256", "status", "spec", "deleting", "stopped")
# What the resync reads of a service also stamps a new version (model.kept_rows.KeptRows).
RESYNC_FIELDS = (
    "generation",
    "observed_generation",
    "total_instances",
    "running_instances",
    "template_hash",
)
_GROUP_ROUTING_FIELDS = ("token_sha256", "traffic_mode")


_VERSION = select(CounterRow.value).where(CounterRow.name == bindparam("counter"))
_VERSIONS = select(CounterRow.name, CounterRow.value).where(CounterRow.name.in_((COUNTER, FLOOR)))


def version(session: Session, counter: str = COUNTER) -> int:
    return session.scalar(_VERSION, {"counter": counter}) or 0


def versions(session: Session) -> tuple[int, int]:
    """The route counter and the removals' floor, in one read: the feed's, and the
    resync's watermark (:class:`controlplane.model.kept_rows.KeptRows`)."""
    values: dict[str, int] = {name: value for name, value in session.execute(_VERSIONS)}
    return values.get(COUNTER, 0), values.get(FLOOR, 0)


def table(
    sessions: sessionmaker[Session],
    cluster: str,
    default_timeout_ms: int,
    after: int = -1,
    opener: Opener | None = None,
    *,
    page_size: int | None = None,
    page: str | None = None,
) -> RouteTable:
    """The changes after version ``after``, or the whole table when the caller has none
    (``after`` < 0), is too far behind (removals pruned) or ahead (a new database). With
    ``opener``, each route carries its token (else only its digest).

    With ``page_size``, a whole table comes in pages of that many routes: the first, then
    the one ``page`` names (the previous page's ``next_page``; ``after`` is then unused).
    Each page carries the version read before the first page's routes, so the changes after
    it, asked for once the last page is in, cover whatever changed while pages were read
    (a page may show a route newer than that version: the delta repeats it)."""
    with sessions() as s:
        if page is not None:
            at, after_id = parse_page(page)
            return _page(s, cluster, default_timeout_ms, opener, at, after_id, page_size)
        # Read first: a change after this shows up as a newer version.
        current, floor = versions(s)
        if after < floor or after > current:
            if page_size is not None:
                return _page(s, cluster, default_timeout_ms, opener, current, -1, page_size)
            routes = [_route(r, default_timeout_ms, opener) for r in rq.routable(s, cluster)]
            groups = [_group(g, opener) for g in rq.groups_changed_after(s, cluster, -1)]
            return RouteTable(version=current, routes=routes, groups=groups)
        changed = rq.routes_changed_after(s, cluster, after)
        removed = rq.removed_after(s, cluster, after)
        return RouteTable(
            version=current,
            routes=[_route(r, default_timeout_ms, opener) for r in changed if not r.deleting],
            full=False,
            removed=[r.name for r in changed if r.deleting] + removed.get("service", []),
            groups=[_group(g, opener) for g in rq.groups_changed_after(s, cluster, after)],
            removed_groups=removed.get("group", []),
        )


PAGE_SIZE_MAX = 5000  # routes per page of a whole table
PAGE_SIZE_DEFAULT = 1000  # (a page that names none: the API's only)


def _page(
    s: Session,
    cluster: str,
    default_timeout_ms: int,
    opener: Opener | None,
    at: int,
    after_id: int,
    page_size: int | None,
) -> RouteTable:
    """The page of the whole table at version ``at`` whose routes follow service id
    ``after_id`` (-1: the first page, which also carries every group)."""
    size = min(PAGE_SIZE_MAX, page_size or PAGE_SIZE_DEFAULT)
    rows = rq.routable_page(s, cluster, after_id, size + 1)  # one more: is there a next?
    more = len(rows) > size
    rows = rows[:size]
    first = after_id < 0
    groups = rq.groups_changed_after(s, cluster, -1) if first else []
    return RouteTable(
        version=at,
        routes=[_route(r, default_timeout_ms, opener) for r in rows],
        groups=[_group(g, opener) for g in groups],
        next_page=f"{at}.{rows[-1].id}" if more else None,
        continued=not first,
    )


def pages(
    sessions: sessionmaker[Session],
    cluster: str,
    default_timeout_ms: int,
    page_size: int = PAGE_SIZE_DEFAULT,
) -> Iterator[RouteTable]:
    """The whole table, page after page (no tokens), as a gateway reads it: for those who
    go through it once (the route snapshot) without holding all its routes at once."""
    table_ = table(sessions, cluster, default_timeout_ms, page_size=page_size)
    yield table_
    while table_.next_page is not None:
        table_ = table(
            sessions, cluster, default_timeout_ms, page_size=page_size, page=table_.next_page
        )
        yield table_


def parse_page(page: str) -> tuple[int, int]:
    """A ``next_page`` as :func:`_page` wrote it: the table's version and the last service
    id sent. ValueError for anything else."""
    at, dot, after = page.partition(".")
    after_id = int(after) if dot else -1
    if after_id < 0:
        raise ValueError(f"not a route-table page: {page!r}")
    return int(at), after_id


def _token(row: rq.RouteRow | ServiceRow | GroupRow, opener: Opener | None) -> str | None:
    """``row``'s token, None without an opener or when no configured key opens it: its
    signed calls are refused, its token itself still opens it (the digest is all that
    needs)."""
    if opener is None:
        return None
    try:
        return opener(row.token)
    except SealError as e:
        kind = "group" if isinstance(row, GroupRow) else "service"
        log.warning("%s %r: %s", kind, row.name, e)
        return None


def _route(
    row: rq.RouteRow | ServiceRow, default_timeout_ms: int, opener: Opener | None = None
) -> Route:
    """The route of a service, read as :data:`route_queries.RouteRow` or whole."""
    rpc = row.spec.metadata.rpc
    mirror = row.spec.metadata.mirror
    endpoints = endpoints_of(row.replicas)
    return Route(
        service=row.name,
        token_sha256=row.token_sha256,
        token=_token(row, opener),
        endpoints=endpoints,
        grpc_endpoints=endpoints_of(row.replicas, "grpc_endpoint"),
        timeout_ms=rpc.keepalive or default_timeout_ms,
        # EAS's rate_limit is per instance: the gateway's bucket is for the whole service.
        rate_limit=rpc.rate_limit * max(1, len(endpoints)) if rpc.rate_limit else None,
        max_queue_size=rpc.max_queue_size,
        status=row.status,
        group=row.spec.metadata.group,
        weight=row.spec.metadata.group_weight,
        grouping=row.spec.metadata.grouping,
        wakeable=row.spec.to_zero and not row.stopped and not row.deleting,
        mirror=MirrorRoute(ratio=mirror.ratio, targets=mirror.targets, tolerance=mirror.tolerance)
        if mirror is not None and mirror.ratio > 0
        else None,
        queue=_queue(row.spec),
    )


def _queue(spec: StoredSpec) -> QueueRoute | None:
    queue = spec.queue
    if not spec.is_async or queue is None:
        return None
    return QueueRoute(
        source_max_length=queue.source.max_length,
        source_max_payload_bytes=queue.source.max_payload_bytes,
        source_auto_evict=queue.source.auto_evict,
        sink_max_length=queue.sink.max_length,
        sink_max_payload_bytes=queue.sink.max_payload_bytes,
        sink_auto_evict=queue.sink.auto_evict,
        max_delivery=queue.max_delivery,
        window=spec.window,
        default_path=queue.default_path,
    )


def _group(row: GroupRow, opener: Opener | None = None) -> GroupRoute:
    return GroupRoute(
        group=row.name,
        token_sha256=row.token_sha256,
        token=_token(row, opener),
        traffic_mode="auto" if row.traffic_mode == "auto" else "customized",
    )


def endpoints_of(replicas: list[dict[str, Any]] | None, key: str = "endpoint") -> list[str]:
    """The endpoints a route lists for ``replicas`` as stored by the reconciler."""
    # Old replicas still serve during a rolling update; stopping ones carry no endpoint.
    # ``.get``: replicas stored before gRPC was published carry no "grpc_endpoint".
    return [r[key] for r in replicas or [] if r["state"] == "Running" and r.get(key)]


Routed = ServiceRow | GroupRow
_KIND = {ServiceRow: "service", GroupRow: "group"}


def _routing_changes(session: Session) -> tuple[list[Routed], list[Routed]]:
    """The services and groups of this flush whose route changes, and those deleted."""
    changed = [obj for obj in session.new if isinstance(obj, Routed)]
    changed += [obj for obj in session.dirty if isinstance(obj, Routed) and _routes(obj)]
    return changed, [obj for obj in session.deleted if isinstance(obj, Routed)]


def _routes(row: Routed) -> bool:
    state: InstanceState[Routed] = inspect(row)
    service = isinstance(row, ServiceRow)
    fields = _ROUTING_FIELDS + RESYNC_FIELDS if service else _GROUP_ROUTING_FIELDS
    if any(state.attrs[f].history.has_changes() for f in fields):
        return True
    if isinstance(row, GroupRow):
        return False
    # A replica's other fields (pull progress, messages) change often and route nothing.
    replicas = state.attrs["replicas"].history
    return replicas.has_changes() and [endpoints_of(v) for v in replicas.deleted] != [
        endpoints_of(v) for v in replicas.added
    ]


class VersionWatch:
    """The route counter as this process sees it, for the long-polls: one reader polls the
    database every ``interval`` (and at once on a commit in this process) while any
    long-poll waits, so idle cost does not grow with the number of gateways polling this
    control plane, and is nil when none does. A tick with nothing committed since the last
    (:func:`controlplane.store.changes.commit_watch`: SQLite) reads nothing. In a burst of
    commits it reads at most once per :data:`changes.BURST_GAP_S` (:class:`changes.Spacing`),
    so each gateway gets one delta per gap instead of one per commit; a lone change is read
    at once."""

    def __init__(self, sessions: sessionmaker[Session], interval: float) -> None:
        self._sessions = sessions
        self._written = commit_watch(sessions)
        self._spacing = changes.Spacing(changes.BURST_GAP_S)
        self.interval = interval
        self._current: int | None = None
        self._waiters = 0
        self._task: asyncio.Task[None] | None = None
        self._moved: asyncio.Condition | None = None

    def _read(self) -> int:
        with self._sessions() as s:
            return version(s)

    async def wait_past(self, after: int, timeout: float) -> bool:
        """True as soon as the version differs from ``after``, False after ``timeout``."""
        if self._moved is None:
            self._moved = asyncio.Condition()
        self._waiters += 1
        try:
            # A fresh read, unless the reader runs and holds ``after`` (a long-poll waiting
            # in steps, or many gateways up to date): it sees a change within ``interval``.
            if self._task is None or self._current != after:
                await self._moved_to(await asyncio.to_thread(self._read))
            if self._task is None:
                self._task = asyncio.create_task(self._poll())
            async with self._moved:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):  # see changes.Changes.wait
                        await self._moved.wait_for(lambda: self._current != after)
            return self._current != after
        finally:
            self._waiters -= 1

    async def _poll(self) -> None:
        try:
            while self._waiters:
                await changes.ROUTES.wait(self.interval)
                if self._written():
                    await self._spacing.turn()
                    await self._moved_to(await asyncio.to_thread(self._read))
        finally:
            self._task = None

    async def _moved_to(self, current: int) -> None:
        assert self._moved is not None
        if current != self._current:
            self._current = current
            async with self._moved:
                self._moved.notify_all()


def install(sessions: sessionmaker[Session]) -> None:
    """Make every session of ``sessions`` bump the route version when routing changes."""
    event.listen(sessions, "after_flush", _collect)
    event.listen(sessions, "before_commit", _bump_version)
    event.listen(sessions, "after_commit", _announce)
    event.listen(sessions, "after_rollback", _forget)


def _collect(session: Session, _context: Any) -> None:
    """Note what this flush changed for routing (history is still there after a flush)."""
    changed, deleted = _routing_changes(session)
    pending = session.info.setdefault("routing", ({}, set()))
    pending[0].update({(type(row), row.id): row for row in changed})
    pending[1].update((_KIND[type(row)], row.cluster, row.name) for row in deleted)


def _bump_version(session: Session) -> None:
    """Stamp this transaction's routing changes with a new version, as its last statements:
    the counter's row lock (which keeps versions in commit order) is held only from here to
    the commit, so concurrent writes queue behind these statements (on PostgreSQL one, for
    the services), not their whole work."""
    session.flush()
    changed, deleted = session.info.pop("routing", ({}, set()))
    if not changed and not deleted:
        return
    service_ids = [row_id for kind, row_id in changed if kind is ServiceRow]
    group_ids = [row_id for kind, row_id in changed if kind is GroupRow]
    new = _stamp_new_version(session, service_ids)
    if group_ids:
        _stamp(session, GroupRow, group_ids, new)
    for row in changed.values():
        set_committed_value(row, "route_version", new)
    if deleted:
        session.execute(
            insert(RouteRemovalRow),
            [{"kind": k, "cluster": c, "name": n, "version": new} for k, c, n in sorted(deleted)],
        )
        _prune_removals(session, new - REMOVALS_KEPT)
    session.info["routes_changed"] = True


def stamp(session: Session, service_ids: list[int]) -> int | None:
    """For writes made with Core statements, which the hooks do not see: mark the services
    ``service_ids`` as changed for routing at a new version, returned (None: no id). Call it
    as the transaction's last statement (it takes the counter's lock, held to the commit)."""
    if not service_ids:
        return None
    new = _stamp_new_version(session, service_ids)
    session.info["routes_changed"] = True
    return new


# Core statements, built once: every create and routing change runs both.
_COUNTERS = CounterRow.metadata.tables["counters"]
_NEXT_VERSION = (
    update(_COUNTERS)
    .where(_COUNTERS.c.name == COUNTER)
    .values(value=_COUNTERS.c.value + 1)
    .returning(_COUNTERS.c.value)
)
_STAMPS = {
    model: update(table)
    .where(table.c.id.in_(bindparam("ids", expanding=True)))
    .values(route_version=bindparam("new_version"))
    for model, table in (
        (ServiceRow, ServiceRow.metadata.tables["services"]),
        (GroupRow, GroupRow.metadata.tables["service_groups"]),
    )
}


# PostgreSQL: the counter's bump and the services' stamp in one statement (one round trip
# under the counter's lock instead of two). Both data-modifying CTEs run whatever matches.
_BUMPED = _NEXT_VERSION.cte("bumped")
_SERVICES = ServiceRow.metadata.tables["services"]
_STAMP_SERVICES_AT_NEW_VERSION = select(_BUMPED.c.value).add_cte(
    update(_SERVICES)
    .where(_SERVICES.c.id.in_(bindparam("ids", expanding=True)))
    .values(route_version=select(_BUMPED.c.value).scalar_subquery())
    .cte("stamped")
)


def _stamp_new_version(session: Session, service_ids: list[int]) -> int:
    """A new version, with the services ``service_ids`` stamped at it (none: only the bump)."""
    conn = session.connection()
    together = bool(service_ids) and conn.dialect.name == "postgresql"
    if together:
        new = conn.scalar(_STAMP_SERVICES_AT_NEW_VERSION, {"ids": service_ids})
    else:
        new = conn.scalar(_NEXT_VERSION)
    assert new is not None, "the routes counter is missing: run 'openeas migrate'"
    if service_ids and not together:
        _stamp(session, ServiceRow, service_ids, int(new))
    return int(new)


def _stamp(session: Session, model: type[Routed], ids: list[int], new: int) -> None:
    session.connection().execute(_STAMPS[model], {"ids": ids, "new_version": new})


def _forget(session: Session) -> None:
    session.info.pop("routing", None)


def _prune_removals(session: Session, floor: int) -> None:
    """Forget removals at or below ``floor``; a gateway behind it gets a whole table."""
    if floor > version(session, FLOOR):
        session.execute(delete(RouteRemovalRow).where(RouteRemovalRow.version <= floor))
        session.execute(update(CounterRow).where(CounterRow.name == FLOOR).values(value=floor))


def _announce(session: Session) -> None:
    if session.info.pop("routes_changed", False):
        changes.ROUTES.fire()
