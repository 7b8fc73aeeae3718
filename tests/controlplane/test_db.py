"""SQLite write turns (controlplane.store.db.WriteTurns): concurrent writers of one process all
get through, and every way a transaction ends gives its turn back."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select, text

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
