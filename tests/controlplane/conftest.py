"""Control-plane fixtures: the API app on each database, behind FastAPI's test client or
served by uvicorn in a thread (:class:`LiveServer`); the autoscaling leader."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import uvicorn
from fastapi.testclient import TestClient

from controlplane.api.app import create_app
from controlplane.elasticity.scaling_loop import Autoscaling
from controlplane.settings import Settings
from controlplane.store.db import make_engine
from tests.tasks import stop

if TYPE_CHECKING:
    from tests.controlplane.test_reconciler import Harness

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
def autoscaling() -> Autoscaling | None:
    """The API's autoscaling (a test module that needs one overrides this)."""
    return None


@pytest.fixture
def client(settings: Settings, autoscaling: Autoscaling | None) -> Iterator[TestClient]:
    engine = make_engine(settings.sqlalchemy_url)
    with TestClient(create_app(settings, engine, autoscaling=autoscaling)) as c:
        c.headers["Authorization"] = f"Bearer {ADMIN}"
        yield c
    engine.dispose()


class LiveServer:
    """An ASGI app served by uvicorn on a loopback port, in a thread of its own; ``beside``
    (e.g. a reconciler's ``run``) runs as a task in the same event loop, cancelled when the
    server stops, and a crash of it fails :meth:`stop`."""

    def __init__(
        self, app: Any, beside: Callable[[], Coroutine[Any, Any, None]] | None = None
    ) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.beside = beside
        self.crashed: BaseException | None = None
        self.thread = threading.Thread(target=asyncio.run, args=(self._serve(sock),), daemon=True)
        self.thread.start()
        while not self.server.started and self.thread.is_alive():
            self.thread.join(0.02)

    async def _serve(self, sock: socket.socket) -> None:
        task = asyncio.create_task(self.beside()) if self.beside is not None else None
        try:
            await self.server.serve(sockets=[sock])
        finally:
            if task is not None:
                try:
                    await stop(task)
                except BaseException as e:
                    self.crashed = e

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        if self.crashed is not None:
            raise self.crashed


@pytest.fixture
def live_api(settings: Settings) -> Iterator[LiveServer]:
    engine = make_engine(settings.sqlalchemy_url)
    server = LiveServer(create_app(settings, engine))
    yield server
    server.stop()
    engine.dispose()


@pytest.fixture
async def leader(harness: Harness) -> AsyncIterator[tuple[Harness, Autoscaling]]:
    """A reconciler leading with autoscaling (ticks every 0.1 s), stopped after the test."""
    scaling = Autoscaling(harness.sessions, harness.services, tick_s=0.1)
    reconciler = harness.make_reconciler(lease_ttl=1.0, autoscaling=scaling)
    task = asyncio.create_task(reconciler.run())
    await harness.until(lambda: scaling.signals.leading)
    yield harness, scaling
    await stop(task)
    assert not scaling.signals.leading
