"""controlplane.model.roles: who may do what, as a table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.model.roles import (
    ROOT,
    ROUTE_READER,
    Kind,
    Principal,
    kind,
    like_pattern,
    refusal,
)

DEV = Principal("OEAKDEV", "developer", ("team_a_*", "shared"))
DEV_ALL = Principal("OEAKDEVALL", "developer")
VIEWER = Principal("OEAKVIEW", "viewer", ("team_a_*",))
ADMIN_KEY = Principal("OEAKADMIN", "admin", ("nothing-*",))

CASES = [
    # principal, action, resource, allowed
    (ROOT, "CreateAccessKey", None, True),
    (ROOT, "SomethingNew", "x", True),
    (ADMIN_KEY, "DeleteService", "any", True),  # an admin's globs do not narrow it
    (DEV, "CreateService", "team_a_1", True),
    (DEV, "CreateService", "team_b_1", False),
    (DEV, "CreateService", None, True),  # no name: the spec check answers
    (DEV, "DeleteService", "shared", True),
    (DEV, "DeleteService", "shared2", False),
    (DEV, "ListServices", None, True),
    (DEV, "DescribeService", "team_b_1", False),
    (DEV, "CreateAccessKey", None, False),
    (DEV, "ListAuditEntries", None, False),
    (DEV, "SomethingNew", "team_a_1", False),  # unclassified: admin only
    (DEV, "GetRouteTable", None, False),
    (DEV_ALL, "UpdateService", "anything", True),
    (VIEWER, "DescribeService", "team_a_1", True),
    (VIEWER, "DescribeService", "team_b_1", False),
    (VIEWER, "DeleteService", "team_a_1", False),
    (VIEWER, "DescribeServiceToken", "team_a_1", False),  # a token is not a viewer's to read
    (VIEWER, "ListServices", None, True),
    (ROUTE_READER, "GetRouteTable", None, True),
    (ROUTE_READER, "ReportLoad", None, True),
    (ROUTE_READER, "ListServices", None, False),
    (ROUTE_READER, "DescribeService", "x", False),
]


@pytest.mark.parametrize(("principal", "action", "resource", "allowed"), CASES)
def test_decisions(principal: Principal, action: str, resource: str | None, allowed: bool) -> None:
    why = refusal(principal, action, resource)
    assert (why is None) == allowed, why
    if why is not None:
        assert action in why or (resource or "") in why


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("ListServices", Kind.READ),
        ("DeleteService", Kind.WRITE),
        ("DeleteAccessKey", Kind.ADMIN),
        ("WakeService", Kind.INTERNAL),
        ("NoSuchAction", Kind.ADMIN),
        ("", Kind.ADMIN),
    ],
)
def test_actions_are_classified_and_unknown_ones_are_admin_only(
    action: str, expected: Kind
) -> None:
    assert kind(action) is expected


def test_every_named_route_is_classified() -> None:
    """A route of the app whose name= is not in the table is admin-only by default: list
    them, so a new SDK action is classified on purpose."""
    import tempfile
    from pathlib import Path

    from fastapi.routing import APIRoute

    from controlplane.api.app import create_app
    from controlplane.model.roles import ACTIONS
    from controlplane.settings import Settings
    from controlplane.store.db import make_engine

    with tempfile.TemporaryDirectory() as d:
        settings = Settings(data_dir=Path(d), admin_token="t" * 32)
        engine = make_engine(settings.sqlalchemy_url)
        app = create_app(settings, engine)
        engine.dispose()

    def walk(routes: list[Any]) -> Iterator[APIRoute]:
        for r in routes:
            if isinstance(r, APIRoute):
                yield r
            elif hasattr(r, "original_router"):  # an included router, kept nested
                yield from walk(r.original_router.routes)

    api = [r for r in walk(app.routes) if r.path.startswith(("/api/v2", "/internal"))]
    assert len(api) > 20
    assert sorted(r.name for r in api if r.name not in ACTIONS) == []


@pytest.mark.parametrize(
    ("glob", "name", "covered", "like"),
    [
        ("team_a_*", "team_a_1", True, "team\\_a\\_%"),
        ("team_a_*", "teamxa_1", False, "team\\_a\\_%"),  # _ is itself, not any character
        ("team_a_*", "team_a_", True, "team\\_a\\_%"),
        ("svc?", "svc1", True, "svc_"),
        ("svc?", "svc12", False, "svc_"),
        ("*", "anything", True, "%"),
        ("exact", "exact", True, "exact"),
        ("exact", "exact2", False, "exact"),
        ("a*b", "axxb", True, "a%b"),
        ("a*b", "axxbc", False, "a%b"),
    ],
)
def test_globs_read_alike_in_python_and_as_like_patterns(
    glob: str, name: str, covered: bool, like: str
) -> None:
    assert Principal("k", "viewer", (glob,)).covers(name) is covered
    assert like_pattern(glob) == like
