"""The audit trail: every write and every refused request on the API, in the database.

Written by the API's audit middleware (``controlplane.api.auth``) once a request's status
is known, or by the request's own transaction (:meth:`AuditTrail.record_in`: a create's
entry commits with the service, or not at all); read by ``GET /api/v2/audit`` (``eascmd
audit``). Entries older than the retention setting (``OPENEAS_AUDIT_RETENTION_DAYS``) are
deleted, at most once an hour per replica, by whichever replica writes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session, sessionmaker

from controlplane.store.tables import AuditRow, utcnow

PRUNE_S = 3600.0
MAX_ENTRIES = 1000
_INSERT = insert(AuditRow.metadata.tables["audit_log"])


@dataclass(frozen=True)
class Entry:
    principal: str
    action: str
    resource: str
    status: int
    request_id: str
    source_ip: str


class AuditTrail:
    def __init__(self, sessions: sessionmaker[Session], retention_days: float) -> None:
        self._sessions = sessions
        self._retention = timedelta(days=retention_days)
        self._pruned = float("-inf")  # the first write prunes
        self._lock = threading.Lock()

    def record(self, entry: Entry) -> None:
        """``entry`` in a transaction of its own."""
        with self._sessions() as s, s.begin():
            self.record_in(s, entry)

    def record_in(self, session: Session, entry: Entry) -> None:
        """``entry`` in ``session``'s transaction: committed with it, or not at all."""
        row = {
            "time": utcnow(),
            "principal": entry.principal[:64],
            "action": entry.action[:64],
            "resource": entry.resource[:128],
            "status": entry.status,
            "request_id": entry.request_id[:64],
            "source_ip": entry.source_ip[:64],
        }
        session.execute(_INSERT, row)  # a Core statement: no unit of work for one row
        if self._due():
            session.execute(delete(AuditRow).where(AuditRow.time < utcnow() - self._retention))

    def entries(
        self,
        since: datetime | None = None,
        principal: str | None = None,
        resource: str | None = None,
        limit: int = 100,
    ) -> list[AuditRow]:
        """Newest first."""
        query = select(AuditRow).order_by(AuditRow.time.desc(), AuditRow.id.desc())
        if since is not None:
            query = query.where(AuditRow.time >= since)
        if principal:
            query = query.where(AuditRow.principal == principal)
        if resource:
            query = query.where(AuditRow.resource == resource)
        with self._sessions() as s:
            return list(s.scalars(query.limit(min(limit, MAX_ENTRIES))))

    def _due(self) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._pruned < PRUNE_S:
                return False
            self._pruned = now
            return True
