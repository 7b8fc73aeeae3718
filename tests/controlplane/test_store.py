"""The store's hot queries read their indexes (SQLite's query plan), so a poll or a page
costs the same with 10 services or 10,000."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Select, text

from controlplane.store import migrate, queries
from controlplane.store.db import make_engine


def plan(url: str, query: Select[str]) -> str:
    engine = make_engine(url)
    sql = str(query.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        rows = conn.execute(text("EXPLAIN QUERY PLAN " + sql)).fetchall()
    engine.dispose()
    return " | ".join(str(r[-1]) for r in rows)


def test_the_reconcilers_poll_reads_only_the_pending_index(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    migrate.upgrade(url)
    assert plan(url, queries.pending("local")) == (
        "SEARCH services USING INDEX ix_services_pending (cluster=?)"
    )
