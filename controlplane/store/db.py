"""Engine and sessions for SQLite (default) and PostgreSQL, from the settings' URL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc, make_url
from sqlalchemy.orm import Session, sessionmaker


def make_engine(url: str) -> Engine:
    # Enough pooled connections for the API's concurrent requests, the reconciler and the
    # long-polls together: beyond the pool, each checkout opens and closes a connection.
    kwargs: dict[str, Any] = {}
    database = make_url(url).database
    if not url.startswith("sqlite") or (database and database != ":memory:"):
        kwargs |= {"pool_size": 20, "max_overflow": 20}  # (in-memory SQLite: one connection)
    if url.startswith("sqlite") and database and database != ":memory:":
        # A data dir named in OPENEAS_DATA_DIR that does not exist yet is made, not a
        # traceback ("unable to open database file").
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    if url.startswith("sqlite"):
        # FastAPI runs sync handlers in a thread pool; the reconciler has its own thread.
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
    engine = create_engine(url, **kwargs)
    if url.startswith("sqlite"):
        event.listen(engine, "connect", _sqlite_pragmas)
        WriteTurns(engine)
    else:
        IdlePing(engine)
    return engine


class IdlePing:
    """SQLAlchemy's pre-ping, for connections that sat in the pool ``IDLE_S`` or more: a
    server restarted meanwhile costs a fresh connection, not an error. A connection given
    back less than ``IDLE_S`` ago was working then; pinging it too (``pool_pre_ping``)
    cost every request a round trip to the server, which under load was a quarter of a
    describe. A server gone within that window fails that request once, and the pool's
    connections are replaced (SQLAlchemy invalidates them on the disconnect error)."""

    IDLE_S = 2.0

    def __init__(self, engine: Engine) -> None:
        self._dialect = engine.dialect
        event.listen(engine, "checkin", self._checkin)
        event.listen(engine, "checkout", self._checkout)

    def _checkin(self, _dbapi: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    def _checkout(self, dbapi: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("idle_since", None)
        if since is None or time.monotonic() - since < self.IDLE_S:
            return  # new, or used just now
        if not self._dialect._do_ping_w_event(dbapi):
            raise exc.InvalidatePoolError()  # the pool reconnects, all its connections


class WriteTurns:
    """This process's SQLite write transactions take turns on a lock of their own instead
    of SQLite's busy handler, which sleeps in growing steps while the database is locked:
    under concurrent writes most of a create was spent asleep with the lock free.

    A transaction takes its turn at its first statement that is not a read (pysqlite begins
    the transaction there) and gives it back when it ends (commit, rollback, close). A turn
    not given within the busy timeout is not waited for further: the write then waits in
    SQLite's busy handler as it would without turns, so a lost turn can slow writes, never
    stop them. Other processes on the file (a second control plane, ``openeas gc``) still
    meet this one in SQLite's lock."""

    WAIT_S = 30.0

    def __init__(self, engine: Engine) -> None:
        self._lock = threading.Lock()
        self._holder: int | None = None  # id() of the DBAPI connection holding the turn
        dialect = engine.dialect
        for name in ("do_commit", "do_rollback", "do_close"):
            setattr(dialect, name, self._ending(getattr(dialect, name)))
        event.listen(engine, "before_cursor_execute", self._before)

    def _before(self, conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip()[:6].upper() in ("SELECT", "PRAGMA"):
            return
        dbapi = id(conn.connection.dbapi_connection)
        if self._holder != dbapi and self._lock.acquire(timeout=self.WAIT_S):
            self._holder = dbapi

    def _ending(self, end: Callable[[Any], None]) -> Callable[[Any], None]:
        def ended(connection: Any) -> None:
            try:
                end(connection)
            finally:
                # Given the pool's proxy (a commit, a reset) or the DBAPI connection (a close).
                if self._holder == id(getattr(connection, "dbapi_connection", connection)):
                    self._holder = None
                    self._lock.release()

        return ended


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")  # ON DELETE CASCADE for events
    cur.execute("PRAGMA journal_mode=WAL")  # readers do not block the reconciler's writes
    # In WAL mode NORMAL syncs at checkpoints, not at every commit: the database stays
    # consistent after a power loss (the last commits may be lost), and a create costs no
    # fsync — the embedded default's throughput (PostgreSQL is the production database).
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def read_sessions(sessions: sessionmaker[Session]) -> sessionmaker[Session]:
    """Sessions for reads alone, from ``sessions``' engine: on PostgreSQL outside any
    transaction (each statement sees what was committed when it began, as READ COMMITTED
    does within one), which saves each read the round trips of its BEGIN and ROLLBACK. On
    SQLite the same sessions (pysqlite opens no transaction for a read)."""
    engine: Engine = sessions.kw["bind"]
    if engine.dialect.name == "sqlite":
        return sessions
    return sessionmaker(engine.execution_options(isolation_level="AUTOCOMMIT"))


def make_sessions(engine: Engine) -> sessionmaker[Session]:
    from controlplane.store import route_feed, service_watch

    sessions = sessionmaker(engine, expire_on_commit=False)
    route_feed.install(sessions)
    service_watch.install(sessions)
    return sessions
