"""The route feed's reads (:mod:`controlplane.store.route_feed`): what the gateways' route table is
made of, whole or as the delta after a version. Statements built once, bound per call: every
gateway's long-poll asks for the delta after each routing change."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from controlplane.store.tables import GroupRow, RouteRemovalRow, ServiceRow


def routable(s: Session, cluster: str) -> Sequence[ServiceRow]:
    """The services the gateway routes to (all but those being deleted)."""
    return s.scalars(
        select(ServiceRow).where(ServiceRow.cluster == cluster, ServiceRow.deleting.is_(False))
    ).all()


_ROUTABLE_PAGE = (
    select(ServiceRow)
    .where(
        ServiceRow.cluster == bindparam("cluster"),
        ServiceRow.deleting.is_(False),
        ServiceRow.id > bindparam("after_id"),
    )
    .order_by(ServiceRow.id)
    .limit(bindparam("limit"))
)


def routable_page(s: Session, cluster: str, after_id: int, limit: int) -> Sequence[ServiceRow]:
    """:func:`routable`, ``limit`` of them at most, those after id ``after_id`` in id order
    (the pages of a whole table)."""
    return s.scalars(
        _ROUTABLE_PAGE, {"cluster": cluster, "after_id": after_id, "limit": limit}
    ).all()


_CHANGED_ROUTES = select(ServiceRow).where(
    ServiceRow.cluster == bindparam("cluster"), ServiceRow.route_version > bindparam("after")
)
_REMOVED = select(RouteRemovalRow.kind, RouteRemovalRow.name).where(
    RouteRemovalRow.cluster == bindparam("cluster"), RouteRemovalRow.version > bindparam("after")
)
_CHANGED_GROUPS = select(GroupRow).where(
    GroupRow.cluster == bindparam("cluster"), GroupRow.route_version > bindparam("after")
)


def routes_changed_after(s: Session, cluster: str, version: int) -> Sequence[ServiceRow]:
    """Services whose route changed after ``version`` (those being deleted included)."""
    return s.scalars(_CHANGED_ROUTES, {"cluster": cluster, "after": version}).all()


def removed_after(s: Session, cluster: str, version: int) -> dict[str, list[str]]:
    """Services and groups deleted after ``version``, by kind."""
    out: dict[str, list[str]] = {}
    for kind, name in s.execute(_REMOVED, {"cluster": cluster, "after": version}):
        out.setdefault(kind, []).append(name)
    return out


def groups_changed_after(s: Session, cluster: str, version: int) -> Sequence[GroupRow]:
    """Groups whose routing (token, traffic mode) changed after ``version`` (-1: all)."""
    return s.scalars(_CHANGED_GROUPS, {"cluster": cluster, "after": version}).all()
