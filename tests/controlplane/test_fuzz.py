"""The control plane answers whatever a schema-driven client sends with a 2xx or a 4xx, never
a 5xx: schemathesis generates requests from our own OpenAPI document (a bounded budget per
operation, so the suite stays fast)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from controlplane.api.app import create_app
from controlplane.settings import Settings
from controlplane.store.db import make_engine
from tests.controlplane.conftest import ADMIN

AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from controlplane.store import migrate

    data = Path(tmp_path_factory.mktemp("fuzz"))
    fuzz_settings = Settings(data_dir=data, admin_token=ADMIN)
    migrate.upgrade(fuzz_settings.sqlalchemy_url)
    engine = make_engine(fuzz_settings.sqlalchemy_url)
    app = create_app(fuzz_settings, engine)
    # The route long-poll holds a request for up to ``wait`` seconds by design: left out.
    yield schemathesis.openapi.from_asgi("/openapi.json", app).exclude(path_regex="^/internal/")
    engine.dispose()


# Every operation's budget in one test: it grows with the API (the fast tests' 60 s is for
# one behaviour each).
@pytest.mark.timeout(300)
def test_no_request_makes_a_server_error(api_schema: Any) -> None:
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 15  # the services, groups and health operations

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=12,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,  # the same examples every run: a red run is reproducible
            derandomize=True,
        )
        def check(case: Any) -> None:
            response = case.call(headers=AUTH)
            statuses[response.status_code] += 1
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path}: {response.text[:300]}")

        check()
    assert failures == []
    # It reached the handlers, not only the validation in front of them.
    assert sum(statuses.values()) >= 150 and statuses[200] >= 10, statuses


def test_the_openapi_document_states_what_the_api_enforces(api_schema: Any) -> None:
    spec = api_schema.raw_schema["components"]["schemas"]
    service = spec["ServiceSpec"]["properties"]
    assert service["name"]["pattern"].startswith("^[a-z]")
    assert service["processor"]["enum"] == ["triton"]
    assert "pattern" in service["token"]
    metadata = spec["Metadata"]["properties"]
    assert (metadata["instance"]["minimum"], metadata["instance"]["maximum"]) == (0, 100)
    assert metadata["group"]["pattern"] == service["name"]["pattern"]
    assert metadata["traffic_state"]["anyOf"][0]["enum"] == ["grouping", "standalone"]
