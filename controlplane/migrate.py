"""``openeas migrate``: Alembic upgrade/downgrade on the settings' database. The only way
the schema changes; servers refuse to start on an out-of-date schema instead of altering it."""

from __future__ import annotations

import importlib.util

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

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


def upgrade(url: str, to: str = "head") -> None:
    command.upgrade(alembic_config(url), to)


def downgrade(url: str, to: str) -> None:
    command.downgrade(alembic_config(url), to)


def pending(engine: Engine) -> bool:
    """True when the database is not at the newest revision."""
    head = ScriptDirectory(SCRIPT_LOCATION).get_current_head()
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision() != head
