"""SQLite write turns (controlplane.store.db.WriteTurns): concurrent writers of one process all
get through, and every way a transaction ends gives its turn back."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, insert, select, text
from sqlalchemy.pool import NullPool

from controlplane.store import db, migrate
from controlplane.store.tables import CounterRow


def test_concurrent_writers_take_turns_and_every_ending_gives_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db.WriteTurns, "WAIT_S", 3.0)  # a turn kept would cost this much
    url = f"sqlite:///{tmp_path / 'x.db'}"
    migrate.upgrade(url)
    engine = db.make_engine(url)
    started = time.monotonic()

    def writer(n: int) -> None:
        for i in range(40):
            with engine.begin() as conn:
                conn.execute(insert(CounterRow), {"name": f"w{n}_{i}", "value": i})

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # A rollback, a connection returned mid-transaction, and an error each end a turn.
    with engine.connect() as conn:
        conn.execute(insert(CounterRow), {"name": "rolled back", "value": 0})
        conn.rollback()
    with engine.connect() as conn:
        conn.execute(insert(CounterRow), {"name": "returned", "value": 0})
    with pytest.raises(Exception, match="UNIQUE"), engine.begin() as conn:
        conn.execute(insert(CounterRow), {"name": "w0_0", "value": 0})
    with engine.begin() as conn:
        conn.execute(text("UPDATE counters SET value = value + 1 WHERE name = 'w0_0'"))
        count = conn.scalar(select(func.count()).select_from(CounterRow))
    assert count is not None and count >= 240
    assert time.monotonic() - started < 3.0  # no write waited out a turn
    engine.dispose()


def test_postgresql_pings_only_a_connection_that_sat_idle(
    postgres_server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection given back just now is used without a ping; one idle for IDLE_S is
    pinged first, and when its server side is gone the pool connects afresh instead of
    failing the request."""
    monkeypatch.setattr(db.IdlePing, "IDLE_S", 0.3)
    engine = db.make_engine(postgres_server_url)
    pings: list[int] = []
    ping = engine.dialect.do_ping

    def counted(dbapi: Any) -> bool:
        pings.append(1)
        return ping(dbapi)

    monkeypatch.setattr(engine.dialect, "do_ping", counted)
    try:
        for _ in range(5):
            with engine.connect() as conn:
                pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        assert pings == []  # busy: no round trip before each use
        killer = create_engine(postgres_server_url, poolclass=NullPool)
        with killer.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        time.sleep(0.4)
        with engine.connect() as conn:  # the pool's connections were killed meanwhile
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
        assert len(pings) >= 1
    finally:
        engine.dispose()
