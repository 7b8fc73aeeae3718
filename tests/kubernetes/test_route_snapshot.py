"""The route snapshot ConfigMap: the leader writes the whole table (gzip) into the release
namespace through the ``kubernetes`` client against the API stand-in, again only when the
route version moved, never while it does not lead; what it writes is what a gateway reads
(:func:`gateway.snapshot.load`). SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
import gzip
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.runtime.kubernetes.route_snapshot import KEY, RouteSnapshotPublisher
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.sealing import TokenSealer
from controlplane.store.services import Services
from gateway import snapshot
from testing.k8s_server import ApiStandIn
from testing.waiting import wait_until_async
from tests.controlplane.conftest import seed_spec
from tests.tasks import stop

RELEASE_NS = "openeas"


@pytest.fixture
def api() -> Iterator[ApiStandIn]:
    server = ApiStandIn(namespaces=("openeas-serving", RELEASE_NS)).start()
    yield server
    server.stop()


@pytest.fixture
def publisher(
    api: ApiStandIn, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[RouteSnapshotPublisher, Services]]:
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    settings = KubernetesSettings(
        kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")),
        request_timeout_seconds=5,
        route_snapshot_configmap="openeas-routes",
        route_snapshot_namespace=RELEASE_NS,
    )
    engine = make_engine(database_url)
    sessions = make_sessions(engine)
    services = Services(sessions, "local", TokenSealer(["sealing-key-for-tests-0123"]))
    yield RouteSnapshotPublisher(sessions, "local", 600_000, settings, interval_s=0.05), services
    engine.dispose()


def mounted(api: ApiStandIn, tmp_path: Path) -> snapshot.Snapshot | None:
    """The ConfigMap's key as the kubelet would mount it, read by the gateway's code."""
    config_map = api.get("configmaps", "openeas-routes", RELEASE_NS)
    if config_map is None:
        return None
    path = tmp_path / KEY
    path.write_bytes(base64.b64decode(config_map["binaryData"][KEY]))
    return snapshot.load(path)


def names_in(saved: snapshot.Snapshot) -> list[str]:
    return [r.service for page in saved.pages(1) for r in page.routes]


def test_the_leader_writes_the_table_a_gateway_reads_and_only_when_it_moves(
    api: ApiStandIn,
    publisher: tuple[RouteSnapshotPublisher, Services],
    tmp_path: Path,
) -> None:
    pub, services = publisher
    _, token = services.create(seed_spec(name="first"))
    assert pub.publish_once()
    saved = mounted(api, tmp_path)
    assert saved is not None
    assert names_in(saved) == ["first"]
    assert api.get("configmaps", "openeas-routes", "openeas-serving") is None  # not there
    writes = api.write_count()
    assert not pub.publish_once()  # nothing moved: nothing written
    assert api.write_count() == writes

    services.create(seed_spec(name="second"))
    assert pub.publish_once()
    again = mounted(api, tmp_path)
    assert again is not None and again.version > saved.version
    assert sorted(names_in(again)) == ["first", "second"]
    # A route per line (the gateway reads it a line at a time): head, routes, their end,
    # the table's end (no groups).
    config_map = api.get("configmaps", "openeas-routes", RELEASE_NS)
    assert config_map is not None
    text = gzip.decompress(base64.b64decode(config_map["binaryData"][KEY]))
    assert len(text.splitlines()) == 1 + again.routes + 2
    # Digests, never a token.
    assert token not in str(config_map)


async def test_only_while_leading(
    api: ApiStandIn, publisher: tuple[RouteSnapshotPublisher, Services]
) -> None:
    pub, services = publisher
    services.create(seed_spec(name="first"))
    leading = False
    task = asyncio.create_task(pub.run(lambda: leading))
    try:
        await asyncio.sleep(0.3)
        assert api.get("configmaps", "openeas-routes", RELEASE_NS) is None
        leading = True
        await wait_until_async(
            lambda: api.get("configmaps", "openeas-routes", RELEASE_NS) is not None, 5
        )
    finally:
        await stop(task)
