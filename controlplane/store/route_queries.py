"""The route feed's reads (:mod:`controlplane.store.route_feed`): what the gateways' route table is
made of, whole or as the delta after a version. Statements built once, bound per call: every
gateway's long-poll asks for the delta after each routing change."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, bindparam, select
from sqlalchemy.orm import Session

from controlplane.model.spec import StoredSpec
from controlplane.store.tables import GroupRow, RouteRemovalRow, ServiceRow

# What a route is made of (route_feed._route): these columns alone, as plain rows: no ORM
# object per service, and no JSON column a route does not read.
_ROUTE_COLUMNS = (
    ServiceRow.id,
    ServiceRow.name,
    ServiceRow.token_sha256,
    ServiceRow.token,
    ServiceRow.replicas,
    ServiceRow.status,
    ServiceRow.spec,
    ServiceRow.stopped,
    ServiceRow.deleting,
)
RouteRow = Row[tuple[int, str, str, str, Any, str, StoredSpec, bool, bool]]

_ROUTABLE = select(*_ROUTE_COLUMNS).where(
    ServiceRow.cluster == bindparam("cluster"), ServiceRow.deleting.is_(False)
)
_ROUTABLE_PAGE = (
    _ROUTABLE.where(ServiceRow.id > bindparam("after_id"))
    .order_by(ServiceRow.id)
    .limit(bindparam("limit"))
)
_CHANGED_ROUTES = select(*_ROUTE_COLUMNS).where(
    ServiceRow.cluster == bindparam("cluster"), ServiceRow.route_version > bindparam("after")
)
_REMOVED = select(RouteRemovalRow.kind, RouteRemovalRow.name).where(
    RouteRemovalRow.cluster == bindparam("cluster"), RouteRemovalRow.version > bindparam("after")
)
_CHANGED_GROUPS = select(GroupRow).where(
    GroupRow.cluster == bindparam("cluster"), GroupRow.route_version > bindparam("after")
)


def routable(s: Session, cluster: str) -> Sequence[RouteRow]:
    """The services the gateway routes to (all but those being deleted)."""
    return s.execute(_ROUTABLE, {"cluster": cluster}).all()


def routable_page(s: Session, cluster: str, after_id: int, limit: int) -> Sequence[RouteRow]:
    """:func:`routable`, ``limit`` of them at most, those after id ``after_id`` in id order
    (the pages of a whole table)."""
    return s.execute(
        _ROUTABLE_PAGE, {"cluster": cluster, "after_id": after_id, "limit": limit}
    ).all()


def routes_changed_after(s: Session, cluster: str, version: int) -> Sequence[RouteRow]:
    """Services whose route changed after ``version`` (those being deleted included)."""
    return s.execute(_CHANGED_ROUTES, {"cluster": cluster, "after": version}).all()


def removed_after(s: Session, cluster: str, version: int) -> dict[str, list[str]]:
    """Services and groups deleted after ``version``, by kind."""
    out: dict[str, list[str]] = {}
    for kind, name in s.execute(_REMOVED, {"cluster": cluster, "after": version}):
        out.setdefault(kind, []).append(name)
    return out


def groups_changed_after(s: Session, cluster: str, version: int) -> Sequence[GroupRow]:
    """Groups whose routing (token, traffic mode) changed after ``version`` (-1: all)."""
    return s.scalars(_CHANGED_GROUPS, {"cluster": cluster, "after": version}).all()
