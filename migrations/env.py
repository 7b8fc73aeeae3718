"""Alembic environment: the database URL comes from the same Settings object the servers
use (``OPENEAS_DATABASE_URL`` / the data dir's SQLite file), via ``openeas migrate``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from controlplane.settings import Settings
from controlplane.store.db import make_engine
from controlplane.store.tables import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # ALTER TABLE on SQLite
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    url = config.attributes.get("url") or Settings().sqlalchemy_url
    engine = make_engine(url)
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()
