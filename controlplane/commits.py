"""Whether anything was committed to the database since a poll last looked: the polls for
other control-plane processes' commits ask this before they read."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker


def commit_watch(sessions: sessionmaker[Session]) -> Callable[[], bool]:
    """A poll for other processes' commits asks this first: False when nothing was committed
    to the database since its last call, True when something may have been (on its first
    call, and always but for a SQLite file). Idle, a poll then costs a call of microseconds
    on the event loop instead of a session's read in a worker thread."""
    engine = sessions.kw["bind"]
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return _always
    return DataVersion(database)


def _always() -> bool:
    return True


class DataVersion:
    """SQLite's ``PRAGMA data_version`` on a connection of its own that never writes: it
    moves with every commit of any other connection, this process's included (a read of
    the WAL index, no lock waited for). An error says "may have changed": the poll reads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._seen: int | None = None

    def __call__(self) -> bool:
        try:
            if self._conn is None:
                # timeout=0: busy (a WAL being recovered) is an error, not a wait on the loop
                self._conn = sqlite3.connect(
                    self.path, timeout=0, isolation_level=None, check_same_thread=False
                )
            now: int = self._conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            self._seen = None
            return True
        changed = now != self._seen
        self._seen = now
        return changed
