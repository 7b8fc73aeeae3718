"""Migrations: upgrade, downgrade and upgrade again on each database; models and migrations
describe the same schema."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from controlplane.store import migrate
from controlplane.store.db import make_engine
from controlplane.store.tables import Base
from tests.fixtures_db import _reset_postgres


def test_upgrade_downgrade_upgrade(empty_database_url: str) -> None:
    engine = make_engine(empty_database_url)
    migrate.upgrade(empty_database_url)
    assert {"services", "service_events"} <= set(inspect(engine).get_table_names())
    assert not migrate.pending(engine)
    migrate.downgrade(empty_database_url, "base")
    assert "services" not in inspect(engine).get_table_names()
    assert migrate.pending(engine)
    migrate.upgrade(empty_database_url)
    assert not migrate.pending(engine)
    engine.dispose()


def test_models_and_migrations_do_not_drift(database_url: str) -> None:
    engine = make_engine(database_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == []


def test_a_data_dir_that_does_not_exist_yet_is_made(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'not' / 'yet' / 'openeas.db'}"
    migrate.upgrade(url)  # no "unable to open database file"
    engine = make_engine(url)
    assert not migrate.pending(engine)
    engine.dispose()


def _migrate(url: str, data_dir: Path) -> subprocess.Popen[str]:
    """``openeas migrate`` as the chart runs it: its own process, the database by URL."""
    env = {
        **os.environ,
        "OPENEAS_DATABASE_URL": url,
        "OPENEAS_DATA_DIR": str(data_dir),
        "OPENEAS_SECRET_KEY": "sealing-key-for-tests-0123",
    }
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "openeas"), "migrate"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.fixture
def empty_postgres(postgres_server_url: str) -> str:
    _reset_postgres(postgres_server_url)
    return postgres_server_url


def test_a_migration_waits_for_the_one_holding_the_lock(
    empty_postgres: str, tmp_path: Path
) -> None:
    holder = make_engine(empty_postgres)
    with holder.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": migrate.LOCK_KEY})
        proc = _migrate(empty_postgres, tmp_path)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(3)  # started, connected, and waits
        assert migrate.pending(holder)
        assert "services" not in inspect(holder).get_table_names()
        conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": migrate.LOCK_KEY})
        conn.commit()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert not migrate.pending(holder)
    holder.dispose()


def test_migrations_started_together_run_once_and_all_succeed(
    empty_postgres: str, tmp_path: Path
) -> None:
    # As a hook Job and two control-plane pods' init containers would on a first install.
    procs = [_migrate(empty_postgres, tmp_path / str(i)) for i in range(3)]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    engine = make_engine(empty_postgres)
    assert not migrate.pending(engine)
    engine.dispose()
