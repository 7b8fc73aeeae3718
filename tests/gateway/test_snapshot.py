"""The route snapshot: saved when the control plane stops answering and on shutdown, and
served by a gateway that starts while the control plane hangs (stopped with SIGSTOP: the
kernel accepts its connections, nothing answers) — with its health saying so."""

from __future__ import annotations

import logging
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.wire import RouteTable
from gateway import snapshot
from gateway.route_source import ControlPlaneRouteSource
from testing.waiting import seconds_until, wait_until
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import TOKEN, Echo, FakeControlPlane, LoopThread, route, table
from tests.gateway.test_route_table import ADMIN, health, status_of


@pytest.fixture
def hung() -> Iterator[socket.socket]:
    """A control plane that accepts connections and never answers."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as s:
        yield s


def source_at(port: int) -> ControlPlaneRouteSource:
    return ControlPlaneRouteSource(
        f"http://127.0.0.1:{port}", ADMIN, wait_s=1.0, backoff_initial_s=0.02, backoff_max_s=0.2
    )


def test_a_gateway_started_while_the_control_plane_hangs_serves_its_snapshot(
    make_gateway: GatewayFactory,
    hung: socket.socket,
    echo: Echo,
    lt: LoopThread,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    saved = tmp_path / "routes.json"
    snapshot.save(saved, table(route([echo.url]), version=7))
    port = hung.getsockname()[1]
    gw = make_gateway(
        source=source_at(port),
        wait_routes=False,
        route_snapshot=str(saved),
        connect_timeout_ms=300,
    )
    assert seconds_until(lambda: health(gw)["status"] == "ok", 10) > 0.2  # waited for the CP
    doc = health(gw)
    assert str(doc["serving_from"]).startswith(f"snapshot {saved} saved at ")
    assert "(version 7)" in str(doc["serving_from"])
    assert doc["control_plane"] == "connecting"
    assert status_of(gw) == 200
    assert "serving the snapshot" in caplog.text

    # The control plane answers again (its hung connections are reset): its table replaces
    # the snapshot whole, and the health says where routes come from now.
    hung.close()
    fresh = FakeControlPlane(ADMIN, table(route([echo.url], token="fresh"), version=1), port)
    lt.run(fresh.start())
    try:
        wait_until(lambda: health(gw)["serving_from"] == "control_plane", 15)
        assert status_of(gw, "fresh") == 200
        assert status_of(gw) == 401
    finally:
        lt.run(fresh.stop())


def test_without_a_snapshot_it_says_it_serves_nothing(
    make_gateway: GatewayFactory,
    hung: socket.socket,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    gw = make_gateway(
        source=source_at(hung.getsockname()[1]),
        wait_routes=False,
        route_snapshot=str(tmp_path / "none.json"),
        connect_timeout_ms=200,
    )
    wait_until(lambda: "serving nothing until it answers" in caplog.text, 10)
    doc = health(gw)
    assert (doc["status"], doc["serving_from"]) == ("starting", "nothing yet")
    assert status_of(gw) == 404


def test_saved_when_the_control_plane_goes_and_on_close(
    make_gateway: GatewayFactory, lt: LoopThread, echo: Echo, tmp_path: Path
) -> None:
    saved = tmp_path / "state" / "routes.json"
    cp = FakeControlPlane(ADMIN, table(route([echo.url]), version=3))
    lt.run(cp.start())
    gw = make_gateway(source=source_at(cp.port), route_snapshot=str(saved))
    assert health(gw)["serving_from"] == "control_plane"
    assert not saved.exists()  # steady state writes nothing
    lt.run(cp.stop())
    wait_until(saved.exists, 10)
    kept = RouteTable.model_validate_json(saved.read_bytes())
    assert (kept.version, [r.service for r in kept.routes]) == (3, ["svc"])
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert TOKEN.encode() not in saved.read_bytes()  # digests only
    assert kept.routes[0].token is None  # the route had its token (signed calls' key)

    saved.unlink()
    gw.close()
    assert RouteTable.model_validate_json(saved.read_bytes()).version == 3


def test_an_unreadable_snapshot_is_ignored(tmp_path: Path) -> None:
    bad = tmp_path / "routes.json"
    bad.write_text('{"version": "x"}')
    assert snapshot.load(bad) is None
    assert snapshot.load(tmp_path / "missing.json") is None


@pytest.mark.parametrize(("own", "shared", "served"), [(None, 9, 9), (4, 9, 9), (12, 9, 12)])
def test_a_new_gateway_pod_serves_the_newer_of_its_own_and_the_shared_snapshot(
    make_gateway: GatewayFactory,
    hung: socket.socket,
    echo: Echo,
    tmp_path: Path,
    own: int | None,
    shared: int,
    served: int,
) -> None:
    """The shared one is what the leading control plane keeps in a ConfigMap (gzip, as
    :mod:`controlplane.runtime.kubernetes.route_snapshot` encodes it; the kubelet mounts
    it): a pod on a new node has no file of its own, and serves it."""
    from controlplane.runtime.kubernetes.route_snapshot import encode

    mounted = tmp_path / "configmap" / "routes.json.gz"
    mounted.parent.mkdir()
    mounted.write_bytes(encode(table(route([echo.url]), version=shared)))
    mine = tmp_path / "routes.json"
    if own is not None:
        snapshot.save(mine, table(route([echo.url], token="old"), version=own))
    gw = make_gateway(
        source=source_at(hung.getsockname()[1]),
        wait_routes=False,
        route_snapshot=str(mine),
        route_snapshot_shared=str(mounted),
        connect_timeout_ms=300,
    )
    wait_until(lambda: health(gw)["status"] == "ok", 10)
    where = str(health(gw)["serving_from"])
    assert f"(version {served})" in where
    assert where.startswith(f"snapshot {mounted if served == shared else mine} saved at ")
    assert status_of(gw, TOKEN if served == shared else "old") == 200
    # Its own file is still written to (never the read-only mount).
    assert mounted.read_bytes()[:2] == b"\x1f\x8b"


def test_a_damaged_shared_snapshot_is_ignored(tmp_path: Path) -> None:
    bad = tmp_path / "routes.json.gz"
    bad.write_bytes(b"\x1f\x8b" + b"\x00" * 20)
    assert snapshot.load(bad) is None
