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
        "processor_params": [
            "--model-repository=oss://triton-model-repo/models",
            "--allow-http=true",
        ],
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


class LiveServer:
    """The control-plane app served by uvicorn on a loopback port, in a thread."""

    def __init__(self, app: Any) -> None:
        import socket
        import threading

        import uvicorn

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]})
        self.thread.start()
        while not self.server.started:
            self.thread.join(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def live_api(settings: Settings) -> Iterator[LiveServer]:
    engine = make_engine(settings.sqlalchemy_url)
    server = LiveServer(create_app(settings, engine))
    yield server
    server.stop()
    engine.dispose()
