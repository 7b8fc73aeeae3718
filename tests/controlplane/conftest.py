"""Control-plane fixtures: the API app on each database, behind FastAPI's test client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controlplane.api.app import create_app
from controlplane.db import make_engine
from controlplane.settings import Settings

ADMIN = "admin-token-for-tests-0123456789"


def seed_spec(**changes: Any) -> dict[str, Any]:
    """The seed's config, typed correctly."""
    spec: dict[str, Any] = {
        "name": "triton_test",
        "processor": "triton",
        "processor_params": ["--model-repository=oss://triton-model-repo/models", "--allow-http=true"],
        "metadata": {"instance": 1, "cpu": 4, "gpu": 1, "memory": 10000, "resource": "eas-r-1"},
    }
    spec.update(changes)
    return spec


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings(
        data_dir=tmp_path,
        database_url=database_url,
        admin_token=ADMIN,
        public_url="http://gateway.example:8080",
        intranet_url="http://openeas-gateway.openeas.svc.cluster.local",
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    engine = make_engine(settings.sqlalchemy_url)
    with TestClient(create_app(settings, engine)) as c:
        c.headers["Authorization"] = f"Bearer {ADMIN}"
        yield c
    engine.dispose()
