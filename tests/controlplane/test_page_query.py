"""The service list's page query (controlplane.store.services.page_query), as a table: every
sort, order, page size and page, by number and by the previous page's token, answers what
sorting all the rows in Python answers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta
from typing import Literal

import pytest
from sqlalchemy import update

from controlplane.store.db import make_engine, make_sessions
from controlplane.store.sealing import TokenSealer
from controlplane.store.services import Services, SortKey
from controlplane.store.tables import ServiceRow
from tests.controlplane.conftest import seed_spec

NAMES = ["m", "c", "x", "a", "q", "b", "z"]
STATUS = {"m": "Running", "c": "Stopped", "x": "Running", "a": "Failed", "q": "Stopped"}


@pytest.fixture
def services(database_url: str) -> Iterator[Services]:
    engine = make_engine(database_url)
    sessions = make_sessions(engine)
    found = Services(sessions, "local", TokenSealer(["sealing-key-for-tests-0123"]))
    for name in NAMES:
        found.create(seed_spec(name=name, metadata={"instance": 0}))
    with sessions() as s:  # created_at ties two rows (the id breaks them), updated_at differs
        rows = {r.name: r for r in s.query(ServiceRow)}
        for i, name in enumerate(NAMES):
            at = rows["m"].created_at + timedelta(seconds=i // 2)
            s.execute(
                update(ServiceRow)
                .where(ServiceRow.name == name)
                .values(
                    created_at=at,
                    updated_at=at + timedelta(seconds=(7 - i) * 3),
                    status=STATUS.get(name, "Creating"),
                )
            )
        s.commit()
    yield found
    engine.dispose()


def _expected(services: Services, sort: SortKey, order: str) -> list[str]:
    with services._reads() as s:
        rows = list(s.query(ServiceRow))
    column = {"name": "name", "createTime": "created_at", "updateTime": "updated_at"}
    field = column.get(sort, sort)
    ordered = sorted(rows, key=lambda r: (getattr(r, field), r.id), reverse=order == "desc")
    return [r.name for r in ordered]


@pytest.mark.parametrize(
    ("sort", "order"),
    list(itertools.product(["name", "createTime", "updateTime", "status"], ["asc", "desc"])),
)
def test_pages_by_number_and_by_token_match_a_sort_of_every_row(
    services: Services, sort: SortKey, order: Literal["asc", "desc"]
) -> None:
    expected = _expected(services, sort, order)
    for size in (1, 2, 3, 7, 10):
        pages = [expected[i : i + size] for i in range(0, len(expected) + size, size)]
        token = None
        for number, page in enumerate(pages, start=1):
            rows, total, _ = services.page(page=number, size=size, sort=sort, order=order)
            assert ([r.name for r in rows], total) == (page, len(NAMES)), (size, number)
            rows, _, token = services.page(
                page=1, size=size, sort=sort, order=order, page_token=token
            )
            assert [r.name for r in rows] == page, (size, number, "token")
            if token is None:
                break
    running, total, _ = services.page(page=1, size=10, status="Running", sort=sort, order=order)
    assert [r.name for r in running] == [n for n in expected if STATUS.get(n) == "Running"]
    assert total == 2
