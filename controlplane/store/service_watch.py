"""Long-polls of one service's state: ``GET /api/v2/services/<cluster>/<name>?after=<state>
&wait=<s>`` answers as soon as the service differs from the state the caller last saw
(``eascmd create`` waiting for Running notices it at once instead of at its next poll).

A commit in this process that wrote a service wakes this process's waiters at once (one
SQLAlchemy hook, so no write path can forget it, fires :data:`controlplane.store.changes.SERVICES`);
commits in other processes (another control-plane replica's reconciler) are seen by
re-reading every :data:`REREAD_S`, only while someone waits. A service's state is named by
a digest of its public description.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from controlplane.store import changes
from controlplane.store.tables import ServiceRow

REREAD_S = 0.25  # a waiter's re-read, for commits made by other processes
MAX_WAIT_S = 30.0


def state_digest(public_json: bytes) -> str:
    """The name of a service's state as a caller saw it (its public description)."""
    return hashlib.sha256(public_json).hexdigest()[:20]


def install(sessions: sessionmaker[Session]) -> None:
    """Make every session of ``sessions`` announce commits that wrote a service."""
    event.listen(sessions, "after_flush", _note)
    event.listen(sessions, "after_commit", _announce)
    event.listen(sessions, "after_rollback", _forget)


def _note(session: Session, _context: Any) -> None:
    # After a flush, new/dirty/deleted still list what it wrote.
    written = (*session.new, *session.dirty, *session.deleted)
    if any(isinstance(row, ServiceRow) for row in written):
        session.info["services_written"] = True


def written(session: Session) -> None:
    """For writes made with Core statements, which the hooks do not see: this transaction
    wrote a service, so its commit wakes the waiters."""
    session.info["services_written"] = True


def _announce(session: Session) -> None:
    if session.info.pop("services_written", False):
        changes.SERVICES.fire()


def _forget(session: Session) -> None:
    session.info.pop("services_written", None)
