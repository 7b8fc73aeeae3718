"""Queries on stored services shared by the API's operations (:mod:`controlplane.store.services`),
the reconciler and the route feed: finding a service, what needs reconciling, writing what
was observed. The reconciler keeps only its loop; SQL lives here and in ``services``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, bindparam, insert, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from controlplane.model.kept_rows import KeptRows
from controlplane.model.states import ServiceState, Status, StoredSummary
from controlplane.store import route_feed, sealing, service_watch, upkeep
from controlplane.store import route_queries as rq
from controlplane.store.changes import commit_watch
from controlplane.store.sealing import TokenSealer
from controlplane.store.tables import (
    EventRow,
    GroupRow,
    InstallationRow,
    ServiceRow,
    utcnow,
)

# Built once, bound per call: every describe and every write of a service finds its row.
_FIND = select(ServiceRow).where(
    ServiceRow.cluster == bindparam("cluster"), ServiceRow.name == bindparam("name")
)


def find(s: Session, cluster: str, name: str) -> ServiceRow | None:
    """The service row by its unique (cluster, name)."""
    return s.scalar(_FIND, {"cluster": cluster, "name": name})


def token_taken(s: Session, cluster: str, digest: str, by: int | None = None) -> bool:
    """Whether a service of ``cluster`` other than the row ``by``, or a group of it, has
    the token ``digest`` (the gateway's gRPC door routes by the token alone: a service
    holding a group's token would take that group's calls)."""
    query = select(ServiceRow.id).where(
        ServiceRow.cluster == cluster, ServiceRow.token_sha256 == digest
    )
    if by is not None:
        query = query.where(ServiceRow.id != by)
    if s.scalar(query.limit(1)) is not None:
        return True
    group = select(GroupRow.id).where(GroupRow.cluster == cluster, GroupRow.token_sha256 == digest)
    return s.scalar(group.limit(1)) is not None


def pending(cluster: str) -> Select[str]:
    """Names of the services with work pending: matches ``ix_services_pending`` exactly."""
    return select(ServiceRow.name).where(
        ServiceRow.cluster == cluster,
        or_(ServiceRow.generation > ServiceRow.observed_generation, ServiceRow.deleting),
    )


@dataclass(frozen=True)
class StatusWrite:
    """What one reconcile observed, to store for the generation it acted on."""

    state: ServiceState
    status: Status
    replicas: list[dict[str, object]]
    template_hash: str = ""

    def values(self) -> dict[str, Any]:
        new = self.status
        return {
            "status": new.status,
            "reason": new.reason,
            "message": new.message[:4000],
            "total_instances": new.total,
            "pending_instances": new.pending,
            "running_instances": new.running,
            "replicas": self.replicas,
            "observed_generation": self.state.generation,
            "template_hash": self.template_hash,
        }

    def event(self) -> dict[str, Any]:
        """The event a change of status records."""
        new = self.status
        detail = (
            new.message.splitlines()[-1]
            if new.message
            else f"total {new.total}, pending {new.pending}, running {new.running}"
        )
        kind = "Warning" if new.status == "Failed" else "Normal"
        return {"type": kind, "reason": new.status, "message": detail[:500]}


_STATUS_FIELDS = (
    "status",
    "reason",
    "message",
    "total_instances",
    "pending_instances",
    "running_instances",
    "replicas",
    "observed_generation",
    "template_hash",
)
_SERVICES = ServiceRow.metadata.tables["services"]
_services = _SERVICES.c
_INSERT_EVENTS = insert(EventRow.metadata.tables["service_events"])
# One statement for a batch of status writes; the row's version is checked and bumped as
# the ORM's optimistic concurrency does, so a concurrent API write is never overwritten.
_WRITE_STATUS = (
    update(_SERVICES)
    .where(_services.id == bindparam("_id"), _services.version == bindparam("_version"))
    .values(
        version=_services.version + 1,
        updated_at=bindparam("updated_at"),
        **{field: bindparam(field) for field in _STATUS_FIELDS},
    )
)


# A resync's view of a row (controlplane.model.states.StoredSummary, in its order).
_SUMMARY = select(
    _services.name,
    or_(_services.generation > _services.observed_generation, _services.deleting),
    _services.total_instances,
    _services.running_instances,
    _services.template_hash,
)
_HAS_REPLICAS = or_(_services.total_instances > 0, _services.running_instances > 0)
# What a resync reads of a row that a status write sets: a write that changes one stamps
# the row, as a routing change does (controlplane.model.kept_rows.KeptRows).
_SUMMARY_FIELDS = tuple(f for f in route_feed.RESYNC_FIELDS if f != "generation")


def _routes_differ(before: Any, values: dict[str, Any]) -> bool:
    """Whether a status write changes the service's route (its status, its endpoints)."""
    if before.status != values["status"]:
        return True
    endpoints = route_feed.endpoints_of
    return bool(
        endpoints(before.replicas) != endpoints(values["replicas"])
        or endpoints(before.replicas, "grpc_endpoint")
        != endpoints(values["replicas"], "grpc_endpoint")
    )


class ReconcileStore:
    """The reconciler's reads and writes, one short transaction each (run in a worker
    thread: the reconciler's loop never waits on the database)."""

    def __init__(self, sessions: sessionmaker[Session], cluster: str) -> None:
        self._sessions = sessions
        self.cluster = cluster
        self._pending = pending(cluster)  # built once: the poll runs it on every commit

    def commits(self) -> Callable[[], bool]:
        """Whether anything was committed since its last call (:func:`commit_watch`)."""
        return commit_watch(self._sessions)

    def tidy(self) -> bool:
        """The services table vacuumed if a burst churned it (:mod:`upkeep`)."""
        return upkeep.vacuum_if_churned(self._sessions.kw["bind"])

    def installation(self) -> str:
        """The database's installation id (written by migration 0005)."""
        with self._sessions() as s:
            uid = s.scalar(select(InstallationRow.uid))
        if uid is None:
            raise RuntimeError("the installation table is empty: run 'openeas migrate'")
        return str(uid)

    def needing_work(self) -> list[str]:
        """Services with a generation not yet acted on, or being deleted (read through the
        partial index of exactly those: the poll costs nothing while nothing changes)."""
        with self._sessions() as s:
            return list(s.scalars(self._pending))

    def resync_rows(self, kept: KeptRows, observed: Iterable[str]) -> list[StoredSummary]:
        """What :meth:`summaries` answers for ``observed``, reading only the rows stamped
        since ``kept``'s last pass (every row with replicas on a first pass, or when the
        removals since then were pruned), then those the runtime runs that ``kept`` does not
        hold. The route counter is read first (:class:`KeptRows` says why that is safe)."""
        with self._sessions() as s:
            current, floor = route_feed.versions(s)
            whole = kept.version < floor or kept.version > current
            if whole:
                kept.reset()
                query = _SUMMARY.where(_services.cluster == self.cluster, _HAS_REPLICAS)
                removed: list[str] = []
            else:
                after = _services.route_version > kept.version
                query = _SUMMARY.where(_services.cluster == self.cluster, after)
                removed = rq.removed_after(s, self.cluster, kept.version).get("service", [])
            kept.fold(current, [StoredSummary(*row) for row in s.execute(query)], removed)
            unknown = kept.unknown(observed)
            extra = []
            if unknown:
                named = _services.name.in_(unknown)
                extra = [
                    StoredSummary(*row)
                    for row in s.execute(_SUMMARY.where(_services.cluster == self.cluster, named))
                ]
        return kept.rows() + extra

    def summaries(self, observed: Iterable[str] | None = None) -> list[StoredSummary]:
        """Services as the last reconcile left them: one query, no JSON columns. With
        ``observed`` (the names the runtime runs), only the rows a resync can find drifted
        or orphaned: those named, and those that asked for or had replicas. A row at zero
        that the runtime does not run matches it already, so services at zero (most of a
        large installation) cost the resync nothing."""
        query = _SUMMARY.where(_services.cluster == self.cluster)
        if observed is not None:
            query = query.where(or_(_HAS_REPLICAS, _services.name.in_(list(observed))))
        with self._sessions() as s:
            return [StoredSummary(*row) for row in s.execute(query)]

    def states(self, names: Iterable[str]) -> dict[str, tuple[ServiceState, str]]:
        """What the reconciler acts on for each of ``names`` that exists, and the status it
        last wrote: one query (a name without a row is absent)."""
        query = select(
            ServiceRow.name,
            ServiceRow.uid,
            ServiceRow.generation,
            ServiceRow.spec,
            ServiceRow.stopped,
            ServiceRow.deleting,
            ServiceRow.restarts,
            ServiceRow.retired_instances,
            ServiceRow.status,
        ).where(ServiceRow.cluster == self.cluster, ServiceRow.name.in_(list(names)))
        with self._sessions() as s:
            return {
                row.name: (
                    _state(row),
                    row.status,
                )
                for row in s.execute(query)
            }

    def write_statuses(self, writes: Sequence[StatusWrite]) -> set[str]:
        """Store each write for the generation it acted on, in one transaction of a few
        statements whatever their number; returns the services that changed meanwhile (a
        new generation, deleted, or written concurrently by the API): act on them again.
        A write that changes nothing writes nothing (a resync of an unchanged service)."""
        if not writes:
            return set()
        by_name = {w.state.name: w for w in writes}
        columns = [getattr(_services, f) for f in ("id", "name", "generation", "version")]
        query = select(*columns, *(getattr(_services, f) for f in _STATUS_FIELDS)).where(
            _services.cluster == self.cluster, _services.name.in_(list(by_name))
        )
        with self._sessions() as s:
            rows = s.execute(query).all()
            changed = set(by_name).difference(row.name for row in rows)
            now = utcnow()
            updates: list[dict[str, Any]] = []
            events: list[dict[str, Any]] = []
            routed: list[int] = []
            for row in rows:
                write = by_name[row.name]
                if row.generation != write.state.generation:
                    changed.add(row.name)
                    continue
                values = write.values()
                if all(getattr(row, k) == v for k, v in values.items()):
                    continue
                if (row.status, row.reason) != (values["status"], values["reason"]):
                    events.append({"service_id": row.id, "created_at": now, **write.event()})
                if _routes_differ(row, values) or any(
                    getattr(row, f) != values[f] for f in _SUMMARY_FIELDS
                ):
                    routed.append(row.id)  # the gateways' table, or the resync's rows
                updates.append({"_id": row.id, "_version": row.version, "updated_at": now})
                updates[-1].update(values)
            if not updates:
                return changed
            conn = s.connection()  # Core statements on the session's transaction
            done = conn.execute(_WRITE_STATUS, updates).rowcount
            if done != len(updates):  # the API wrote some meanwhile: all again, afresh
                s.rollback()
                return set(by_name)
            if events:
                conn.execute(_INSERT_EVENTS, events)
            route_feed.stamp(s, routed)
            service_watch.written(s)
            s.commit()
            return changed

    def state(self, name: str) -> tuple[ServiceState | None, str]:
        """What the reconciler acts on, and the status it last wrote."""
        with self._sessions() as s:
            row = find(s, self.cluster, name)
            if row is None:
                return None, ""
            return _state(row), row.status

    def write_status(
        self,
        state: ServiceState,
        new: Status,
        replicas: list[dict[str, object]],
        template_hash: str,
    ) -> bool:
        """Store status for the generation acted on; False when the service changed
        meanwhile (act on the new generation instead). Writes nothing when nothing changed.
        Raises StaleDataError (retry) when the API wrote the row concurrently."""
        with self._sessions() as s:
            row = find(s, self.cluster, state.name)
            if row is None or row.generation != state.generation:
                return False
            write = StatusWrite(state, new, replicas, template_hash)
            values = write.values()
            if all(getattr(row, k) == v for k, v in values.items()):
                return True  # a resync of an unchanged service writes nothing
            changed_status = (row.status, row.reason) != (new.status, new.reason)
            for key, value in values.items():
                setattr(row, key, value)
            if changed_status:
                event = write.event()
                row.add_event(event["reason"], event["message"], warning=event["type"] == "Warning")
            row.updated_at = utcnow()
            s.commit()
            return True

    def forget(self, name: str) -> None:
        """Remove a deleted service's row once its replicas are gone."""
        with self._sessions() as s:
            row = find(s, self.cluster, name)
            if row is not None and row.deleting:
                s.delete(row)
                s.commit()


def seal_tokens(sessions: sessionmaker[Session], sealer: TokenSealer, *, reseal: bool) -> int:
    """Seal tokens stored in clear (from before sealing), or with ``reseal`` every token
    under the first key (a key rotation). One pass at migrate time; returns how many."""
    done = 0
    with sessions() as s:
        rows: list[ServiceRow | GroupRow] = [*s.scalars(select(ServiceRow))]
        rows += s.scalars(select(GroupRow))
        for row in rows:
            if reseal or not row.token.startswith(sealing.PREFIX):
                row.token = sealer.reseal(row.token)
                done += 1
        s.commit()
    return done


def _state(row: Any) -> ServiceState:
    """``row``'s state for the reconciler: a :class:`ServiceRow`, or a result row with the
    same columns."""
    return ServiceState(
        name=row.name,
        uid=row.uid,
        generation=row.generation,
        spec=row.spec,
        stopped=row.stopped,
        deleting=row.deleting,
        restarts=row.restarts,
        retire=tuple(row.retired_instances or ()),
    )
