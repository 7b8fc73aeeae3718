"""Service groups: one endpoint (``/api/predict/<group>``) in front of several services,
each keeping its own replicas and direct endpoint — routing, not deployment.

A group exists while it has members: :func:`follow` (called in the transaction that changes
a member's ``metadata.group`` or deletes it) makes the group's row with the first member and
removes it with the last. The row holds what is the group's own: the traffic mode and the
group token (stable while members are released and retired, so callers of a blue-green
group never change credentials).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from contract.wire import token_digest
from controlplane.model.errors import GroupNotFound
from controlplane.store.sealing import TokenSealer
from controlplane.store.tables import GroupRow, ServiceRow

TrafficMode = Literal["auto", "customized"]


def find(s: Session, cluster: str, name: str) -> GroupRow | None:
    query = select(GroupRow).where(GroupRow.cluster == cluster, GroupRow.name == name)
    return s.scalar(query)


def follow(s: Session, row: ServiceRow, before: str | None, sealer: TokenSealer) -> None:
    """Group rows after ``row``'s group changed from ``before`` (or ``row`` is going)."""
    after = None if row.deleting else row.group_name
    if after is not None and after != before and find(s, row.cluster, after) is None:
        token = secrets.token_urlsafe(32)
        sealed, digest = sealer.seal(token), token_digest(token)
        s.add(GroupRow(cluster=row.cluster, name=after, token=sealed, token_sha256=digest))
    if before is not None and before != after:
        others = select(func.count(ServiceRow.id)).where(
            ServiceRow.cluster == row.cluster,
            ServiceRow.group_name == before,
            ServiceRow.deleting.is_(False),
            ServiceRow.id != row.id,
        )
        group = find(s, row.cluster, before)
        if group is not None and not s.scalar(others):
            s.delete(group)


def shares(mode: str, members: Sequence[ServiceRow]) -> dict[str, float]:
    """Each member's expected share of group traffic (what the gateway's round-robin
    converges to): members taking group traffic with a ready replica, by weight
    ("customized") or by ready replicas ("auto"); 0 for the others."""
    weights = {
        m.name: (m.running_instances if mode == "auto" else m.spec.metadata.group_weight)
        if m.spec.metadata.grouping and m.running_instances > 0
        else 0
        for m in members
    }
    total = sum(weights.values())
    return {name: (w / total if total else 0.0) for name, w in weights.items()}


@dataclass(frozen=True)
class Group:
    row: GroupRow
    members: Sequence[ServiceRow]  # not being deleted, by name


class Groups:
    """Reads and the group's own settings, for the REST API."""

    def __init__(self, sessions: sessionmaker[Session], cluster: str, sealer: TokenSealer) -> None:
        self._sessions = sessions
        self.cluster = cluster
        self.sealer = sealer

    def list(self) -> list[Group]:
        with self._sessions() as s:
            rows = s.scalars(
                select(GroupRow).where(GroupRow.cluster == self.cluster).order_by(GroupRow.name)
            ).all()
            members = _members(s, self.cluster, [r.name for r in rows])
        return [Group(r, [m for m in members if m.group_name == r.name]) for r in rows]

    def get(self, cluster: str, name: str) -> Group:
        with self._sessions() as s:
            return self._group(s, cluster, name)

    def set_mode(self, cluster: str, name: str, mode: TrafficMode) -> Group:
        with self._sessions() as s:
            group = self._group(s, cluster, name)
            group.row.traffic_mode = mode
            s.commit()
            return group

    def rotate_token(self, cluster: str, name: str) -> tuple[Group, str]:
        token = secrets.token_urlsafe(32)
        with self._sessions() as s:
            group = self._group(s, cluster, name)
            group.row.token = self.sealer.seal(token)
            group.row.token_sha256 = token_digest(token)
            s.commit()
            return group, token

    def token(self, cluster: str, name: str) -> tuple[Group, str]:
        """The explicit admin call that opens the group's sealed token."""
        group = self.get(cluster, name)
        return group, self.sealer.open(group.row.token)

    def _group(self, s: Session, cluster: str, name: str) -> Group:
        row = find(s, cluster, name) if cluster == self.cluster else None
        if row is None:
            raise GroupNotFound(f"no group named {name!r}: see 'eascmd group list'")
        return Group(row, _members(s, cluster, [name]))


def _members(s: Session, cluster: str, groups: list[str]) -> Sequence[ServiceRow]:
    """The members of ``groups`` not being deleted, by name (one indexed query)."""
    return s.scalars(
        select(ServiceRow)
        .where(
            ServiceRow.cluster == cluster,
            ServiceRow.group_name.in_(groups),
            ServiceRow.deleting.is_(False),
        )
        .order_by(ServiceRow.name)
    ).all()
