"""PostgreSQL's upkeep after a burst of writes: when the services table is vacuumed, on a
real server, and when the leading reconciler asks for it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from controlplane.reconcile import reconciler as reconciler_mod
from controlplane.store import changes, upkeep
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.sealing import TokenSealer
from controlplane.store.services import Services
from testing.waiting import wait_until_async
from tests.controlplane.conftest import seed_spec
from tests.controlplane.test_reconciler import Harness
from tests.tasks import stop


@pytest.mark.parametrize(
    ("changed", "live", "worth"),
    [
        (0, 0, False),
        (999, 0, False),  # under the floor, however small the table
        (1000, 0, True),
        (1000, 10_000, True),  # a tenth
        (9_999, 100_000, False),  # under a tenth of a large table
        (10_000, 100_000, True),
        (30_000, 10_000, True),  # a burst: inserts, then their status writes
    ],
)
def test_a_table_is_vacuumed_when_it_churned(changed: int, live: int, worth: bool) -> None:
    assert upkeep.churned(changed, live) is worth


def test_a_churned_services_table_is_vacuumed_once(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "MIN_CHURN", 40)
    engine = make_engine(database_url)
    services = Services(make_sessions(engine), "local", TokenSealer(["upkeep-test-key-0123"]))
    for i in range(50):
        services.create(seed_spec(name=f"svc_{i}"))
    engine.dispose()  # the backends end, and with them their statistics are flushed
    engine = make_engine(database_url)
    try:
        if engine.dialect.name != "postgresql":
            assert upkeep.vacuum_if_churned(engine) is False
            return
        assert upkeep.vacuum_if_churned(engine) is True
        with engine.connect() as conn:
            vacuumed = text(
                "SELECT last_vacuum IS NOT NULL AND last_analyze IS NOT NULL "
                "FROM pg_stat_user_tables WHERE relname = 'services'"
            )
            assert conn.scalar(vacuumed) is True
        assert upkeep.vacuum_if_churned(engine) is False  # nothing written since
    finally:
        engine.dispose()


async def test_the_leader_asks_for_upkeep_once_a_burst_pauses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "MIN_WRITES", 3)
    monkeypatch.setattr(reconciler_mod, "QUIET_S", 0.05)
    engine = make_engine(f"sqlite:///{tmp_path / 'openeas.db'}")
    harness = Harness(make_sessions(engine))
    reconciler = harness.make_reconciler()
    asked: list[int] = []

    def tidy() -> bool:
        asked.append(1)
        return True

    monkeypatch.setattr(reconciler.store, "tidy", tidy)
    task = asyncio.create_task(reconciler._tidy())
    try:
        await asyncio.sleep(0)
        for _ in range(3):  # a burst
            changes.SERVICES.fire()
            await asyncio.sleep(0.01)
        assert asked == []  # not while it lasts
        await harness.until(lambda: asked == [1])
        changes.SERVICES.fire()  # a lone write afterwards
        await asyncio.sleep(0.3)
        assert asked == [1]
        for _ in range(3):
            changes.SERVICES.fire()
        await harness.until(lambda: asked == [1, 1])
    finally:
        await stop(task)
        engine.dispose()


async def test_a_failed_upkeep_is_logged_and_the_next_burst_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(upkeep, "MIN_WRITES", 1)
    monkeypatch.setattr(reconciler_mod, "QUIET_S", 0.05)
    engine = make_engine(f"sqlite:///{tmp_path / 'openeas.db'}")
    reconciler = Harness(make_sessions(engine)).make_reconciler()
    tries: list[int] = []

    def tidy() -> bool:
        tries.append(1)
        raise OperationalError("VACUUM", {}, Exception("connection lost"))

    monkeypatch.setattr(reconciler.store, "tidy", tidy)
    task = asyncio.create_task(reconciler._tidy())
    try:
        await asyncio.sleep(0)
        changes.SERVICES.fire()
        await wait_until_async(lambda: tries == [1], 5)
        changes.SERVICES.fire()
        await wait_until_async(lambda: tries == [1, 1], 5)
        assert "the services table's upkeep failed" in caplog.text
    finally:
        await stop(task)
        engine.dispose()
