"""``openeas migrate``: Alembic upgrade/downgrade on the settings' database. The only way
the schema changes; servers refuse to start on an out-of-date schema instead of altering it.

Runs once at a time: on PostgreSQL, :func:`exclusive` holds an advisory lock around a whole
migration (the chart may start one from a hook Job and one per control-plane pod's init
container at once); the ones that waited find the schema at head and change nothing.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

from controlplane.store.db import make_engine

log = logging.getLogger(__name__)

# The advisory lock's key: any 64-bit number, the same in every version of OpenEAS ("oeasmig").
LOCK_KEY = 0x6F6561736D6967

# Alembic's scripts (``migrations/``) import the control plane's models; we only need their
# folder, found without importing it, so the floors stay one-way.
_SPEC = importlib.util.find_spec("migrations")
assert _SPEC is not None and _SPEC.submodule_search_locations is not None
SCRIPT_LOCATION = str(_SPEC.submodule_search_locations[0])


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["url"] = url
    return config


@contextmanager
def exclusive(url: str) -> Iterator[None]:
    """Hold the migration lock of ``url``'s database (PostgreSQL; SQLite serializes writers
    itself). Session-level: released when the block ends, or by the server when this
    process dies, so a killed migration blocks nobody."""
    engine = make_engine(url)
    try:
        if engine.dialect.name != "postgresql":
            yield
            return
        with engine.connect() as conn:
            got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": LOCK_KEY}).scalar()
            if not got:
                log.info("migrate: another migration runs; waiting for it")
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": LOCK_KEY})
            conn.commit()  # the lock outlives the transaction; no transaction stays open
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LOCK_KEY})
                conn.commit()
    finally:
        engine.dispose()


def upgrade(url: str, to: str = "head") -> None:
    command.upgrade(alembic_config(url), to)


def downgrade(url: str, to: str) -> None:
    command.downgrade(alembic_config(url), to)


def pending(engine: Engine) -> bool:
    """True when the database is not at the newest revision."""
    head = ScriptDirectory(SCRIPT_LOCATION).get_current_head()
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision() != head
