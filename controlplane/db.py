"""Engine and sessions for SQLite (default) and PostgreSQL, from the settings' URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker


def make_engine(url: str) -> Engine:
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    database = make_url(url).database
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
    return engine


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


def make_sessions(engine: Engine) -> sessionmaker[Session]:
    from controlplane import route_feed, service_watch

    sessions = sessionmaker(engine, expire_on_commit=False)
    route_feed.install(sessions)
    service_watch.install(sessions)
    return sessions
