"""Databases for tests: SQLite always; PostgreSQL at ``OPENEAS_TEST_POSTGRES_URL`` (default
127.0.0.1:5432, database ``test``) when reachable. Without it the PostgreSQL cases are skipped
with the reason, unless ``OPENEAS_REQUIRE_POSTGRES=1`` (set by .ci/run) makes that a failure.

Each PostgreSQL test session gets its own database, dropped at the end.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from controlplane.store import migrate

POSTGRES_URL = os.environ.get(
    "OPENEAS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
_UNREACHABLE = "PostgreSQL unreachable"


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say loudly, at the end of the run, that the PostgreSQL cases did not run."""
    skipped = [
        r for r in terminalreporter.stats.get("skipped", []) if _UNREACHABLE in str(r.longrepr)
    ]
    if skipped:
        terminalreporter.write_sep(
            "!",
            f"{len(skipped)} PostgreSQL cases SKIPPED ({POSTGRES_URL.split('@')[-1]} "
            "unreachable); CI runs them (OPENEAS_REQUIRE_POSTGRES=1)",
            red=True,
            bold=True,
        )


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """URL of a fresh database on the PostgreSQL server, for this test session."""
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            name = f"openeas_test_{uuid.uuid4().hex[:10]}"
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as e:
        admin.dispose()
        reason = f"{_UNREACHABLE} at {make_url(POSTGRES_URL).render_as_string()}: {e}"
        if os.environ.get("OPENEAS_REQUIRE_POSTGRES") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _reset_postgres(url: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each kind (no schema)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'openeas.db'}"
    url: str = request.getfixturevalue("postgres_server_url")
    _reset_postgres(url)
    return url


@pytest.fixture
def database_url(empty_database_url: str) -> str:
    """A database of each kind, migrated to head."""
    migrate.upgrade(empty_database_url)
    return empty_database_url
