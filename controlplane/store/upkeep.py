"""PostgreSQL upkeep after a burst of writes: ``VACUUM (ANALYZE)`` of the services table.

A burst of creates leaves the table's visibility map unset until autovacuum's next turn
(up to ``autovacuum_naptime``, a minute by default, and longer on a large table), so a
page by ``pageNumber`` and the list's count visit every row's heap page instead of only the
index. The leading reconciler calls :func:`vacuum_if_churned` once the writes have paused
after at least :data:`MIN_WRITES` of them; it vacuums only when PostgreSQL's own counters say
the table churned. SQLite needs none of this (its indexes answer alone). The control
plane's role owns the table (it migrates it); a role that does not gets PostgreSQL's
warning instead, and autovacuum alone.
"""

from __future__ import annotations

import logging

from sqlalchemy import text
from sqlalchemy.engine import Engine

log = logging.getLogger(__name__)

MIN_WRITES = 500  # service commits in this process before the table's counters are read
MIN_CHURN = 1000  # rows inserted, updated or deleted since the last vacuum
CHURN_SHARE = 0.1  # ... and at least this share of the live rows

_CHURN = text(
    "SELECT n_ins_since_vacuum + n_dead_tup, n_live_tup FROM pg_stat_user_tables "
    "WHERE relid = 'services'::regclass"
)


def churned(changed: int, live: int) -> bool:
    """Whether a table with ``live`` rows, ``changed`` of them written since its last vacuum,
    is worth vacuuming now."""
    return changed >= max(MIN_CHURN, CHURN_SHARE * live)


def vacuum_if_churned(engine: Engine) -> bool:
    """Vacuum and analyze the services table when it churned; whether it did. Nothing on
    SQLite."""
    if engine.dialect.name != "postgresql":
        return False
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        counts = conn.execute(_CHURN).one_or_none()
        if counts is None or not churned(int(counts[0]), int(counts[1])):
            return False
        conn.execute(text("VACUUM (ANALYZE) services"))
    log.info("upkeep: vacuumed the services table after %d writes", counts[0])
    return True
