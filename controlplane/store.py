"""Queries on stored services shared by the API's operations (:mod:`controlplane.services`),
the reconciler and the route feed: finding a service, what needs reconciling, writing what
was observed. The reconciler keeps only its loop; SQL lives here and in ``services``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import Select, or_, select
from sqlalchemy.orm import Session, sessionmaker

from controlplane import sealing
from controlplane.changes import commit_watch
from controlplane.desired import ServiceState
from controlplane.models import GroupRow, InstallationRow, RouteRemovalRow, ServiceRow, utcnow
from controlplane.resync import StoredSummary
from controlplane.sealing import TokenSealer
from controlplane.status import Status


def find(s: Session, cluster: str, name: str) -> ServiceRow | None:
    """The service row by its unique (cluster, name)."""
    return s.scalar(
        select(ServiceRow).where(ServiceRow.cluster == cluster, ServiceRow.name == name)
    )


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


def routable(s: Session, cluster: str) -> Sequence[ServiceRow]:
    """The services the gateway routes to (all but those being deleted)."""
    return s.scalars(
        select(ServiceRow).where(ServiceRow.cluster == cluster, ServiceRow.deleting.is_(False))
    ).all()


def routes_changed_after(s: Session, cluster: str, version: int) -> Sequence[ServiceRow]:
    """Services whose route changed after ``version`` (those being deleted included)."""
    return s.scalars(
        select(ServiceRow).where(ServiceRow.cluster == cluster, ServiceRow.route_version > version)
    ).all()


def removed_after(s: Session, cluster: str, version: int) -> dict[str, list[str]]:
    """Services and groups deleted after ``version``, by kind."""
    query = select(RouteRemovalRow.kind, RouteRemovalRow.name).where(
        RouteRemovalRow.cluster == cluster, RouteRemovalRow.version > version
    )
    out: dict[str, list[str]] = {}
    for kind, name in s.execute(query):
        out.setdefault(kind, []).append(name)
    return out


def groups_changed_after(s: Session, cluster: str, version: int) -> Sequence[GroupRow]:
    """Groups whose routing (token, traffic mode) changed after ``version`` (-1: all)."""
    return s.scalars(
        select(GroupRow).where(GroupRow.cluster == cluster, GroupRow.route_version > version)
    ).all()


def pending(cluster: str) -> Select[str]:
    """Names of the services with work pending: matches ``ix_services_pending`` exactly."""
    return select(ServiceRow.name).where(
        ServiceRow.cluster == cluster,
        or_(ServiceRow.generation > ServiceRow.observed_generation, ServiceRow.deleting),
    )


class ReconcileStore:
    """The reconciler's reads and writes, one short transaction each (run in a worker
    thread: the reconciler's loop never waits on the database)."""

    def __init__(self, sessions: sessionmaker[Session], cluster: str) -> None:
        self._sessions = sessions
        self.cluster = cluster

    def commits(self) -> Callable[[], bool]:
        """Whether anything was committed since its last call (:func:`commit_watch`)."""
        return commit_watch(self._sessions)

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
            return list(s.scalars(pending(self.cluster)))

    def summaries(self) -> list[StoredSummary]:
        """Every service as the last reconcile left it: one query, no JSON columns."""
        pending = or_(ServiceRow.generation > ServiceRow.observed_generation, ServiceRow.deleting)
        query = select(
            ServiceRow.name,
            pending,
            ServiceRow.total_instances,
            ServiceRow.running_instances,
            ServiceRow.template_hash,
        ).where(ServiceRow.cluster == self.cluster)
        with self._sessions() as s:
            return [StoredSummary(*row) for row in s.execute(query)]

    def state(self, name: str) -> tuple[ServiceState | None, str]:
        """What the reconciler acts on, and the status it last wrote."""
        with self._sessions() as s:
            row = find(s, self.cluster, name)
            if row is None:
                return None, ""
            state = ServiceState(
                name=row.name,
                uid=row.uid,
                generation=row.generation,
                spec=row.spec,
                stopped=row.stopped,
                deleting=row.deleting,
                restarts=row.restarts,
                retire=tuple(row.retired_instances or ()),
            )
            return state, row.status

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
            values = {
                "status": new.status,
                "reason": new.reason,
                "message": new.message[:4000],
                "total_instances": new.total,
                "pending_instances": new.pending,
                "running_instances": new.running,
                "replicas": replicas,
                "observed_generation": state.generation,
                "template_hash": template_hash,
            }
            if all(getattr(row, k) == v for k, v in values.items()):
                return True  # a resync of an unchanged service writes nothing
            changed_status = (row.status, row.reason) != (new.status, new.reason)
            for key, value in values.items():
                setattr(row, key, value)
            if changed_status:
                detail = (
                    new.message.splitlines()[-1]
                    if new.message
                    else (f"total {new.total}, pending {new.pending}, running {new.running}")
                )
                row.add_event(new.status, detail[:500], warning=new.status == "Failed")
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
