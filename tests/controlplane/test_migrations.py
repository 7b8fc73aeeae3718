"""Migrations: upgrade, downgrade and upgrade again on each database; models and migrations
describe the same schema."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from controlplane import migrate
from controlplane.db import make_engine
from controlplane.models import Base


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
