"""Long-polls of one service's state: ``GET /api/v2/services/<cluster>/<name>?after=<state>
&wait=<s>`` answers as soon as the service differs from the state the caller last saw
(``eascmd create`` waiting for Running notices it at once instead of at its next poll).

A commit in this process that wrote a service wakes this process's waiters at once (one
SQLAlchemy hook, so no write path can forget it); commits in other processes (another
control-plane replica's reconciler) are seen by re-reading every :data:`REREAD_S`, only
while someone waits. A service's state is named by a digest of its public description.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
import weakref
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from controlplane.models import ServiceRow

REREAD_S = 0.25  # a waiter's re-read, for commits made by other processes
MAX_WAIT_S = 30.0


class Commits:
    """How many commits in this process wrote a service; waiters on any event loop wake
    when it moves. A waiter notes the count before it reads, so a commit landing between
    its read and its wait is not lost."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self._events: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event] = (
            weakref.WeakKeyDictionary()
        )

    def fire(self) -> None:
        """From any thread (the API and the reconciler commit in worker threads)."""
        with self._lock:
            self.count += 1
        for loop, moved in list(self._events.items()):
            if not loop.is_closed():
                loop.call_soon_threadsafe(moved.set)

    async def wait_past(self, seen: int, timeout: float) -> None:
        """Until the count is past ``seen``, or ``timeout`` seconds."""
        moved = self._events.setdefault(asyncio.get_running_loop(), asyncio.Event())
        moved.clear()  # before the check: a fire after it sets the event again
        if self.count != seen:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await moved.wait()


SERVICE_COMMITS = Commits()


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
        SERVICE_COMMITS.fire()


def _forget(session: Session) -> None:
    session.info.pop("services_written", None)
