"""The route table: swaps that keep live state, and changes reaching the gateway — from an
in-process source and from a control plane over HTTP (the ``ROUTES_PATH`` long-poll)."""

from __future__ import annotations

import http.client
import json
import logging

import pytest

from contract.wire import GroupRoute, RouteTable, token_digest
from gateway.route_source import ControlPlaneRouteSource
from gateway.routing.balancer import EndpointPool
from gateway.routing.route_table import RouteChange, RouteState
from testing.waiting import seconds_until
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import (
    SERVICE,
    TOKEN,
    Echo,
    FakeControlPlane,
    Gateway,
    LoopThread,
    route,
    table,
)

P = f"/api/predict/{SERVICE}"
ADMIN = "admin-token-for-tests"


def status_of(gw: Gateway, token: str = TOKEN, path: str = f"{P}/v2") -> int:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": token})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def health(gw: Gateway) -> dict[str, object]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        conn.request("GET", "/gateway/healthz")
        doc: dict[str, object] = json.loads(conn.getresponse().read())
        return doc
    finally:
        conn.close()


def test_swap_keeps_live_state() -> None:
    state = RouteState(EndpointPool(), default_timeout_ms=1234)
    state.apply(table(route(["http://h:1"], rate_limit=5, max_queue_size=3)))
    first = state.get(SERVICE)
    assert first is not None and first.bucket is not None
    first.in_flight.count = 2
    first.endpoints[0].outstanding = 2
    state.apply(
        table(route(["http://h:1", "http://h:2"], rate_limit=5, max_queue_size=4), version=2)
    )
    second = state.get(SERVICE)
    assert second is not None and second is not first
    assert second.bucket is first.bucket  # same rate: same bucket
    assert second.in_flight is first.in_flight and second.in_flight.limit == 4
    assert second.endpoints[0] is first.endpoints[0] and second.endpoints[0].outstanding == 2
    state.apply(table(route(["http://h:1"], rate_limit=9, timeout_ms=0), version=3))
    third = state.get(SERVICE)
    assert third is not None and third.bucket is not first.bucket
    assert third.timeout_s == pytest.approx(1.234)  # 0 means the platform default
    state.apply(table(version=4))
    assert state.get(SERVICE) is None and state.version == 4


def test_the_token_index_follows_deltas() -> None:
    """Digest → service, for the gRPC door: kept by each change, never rebuilt."""
    state = RouteState(EndpointPool(), default_timeout_ms=1000)
    state.apply(table(route([], service="a", token="token-a"), route([], service="b")))
    found = state.by_token(b"token-a")
    assert found is not None and found.service == "a"
    assert state.by_token(TOKEN.encode()) is state.get("b")
    assert state.by_token(b"nobody") is None
    # a rotates to a new token and b takes a's old one, in one delta
    swap = [route([], service="a", token="token-a2"), route([], service="b", token="token-a")]
    state.apply(RouteTable(version=2, routes=swap, full=False))
    assert state.by_token(b"token-a") is state.get("b")
    assert state.by_token(b"token-a2") is state.get("a")
    assert state.by_token(TOKEN.encode()) is None
    state.apply(RouteTable(version=3, routes=[], full=False, removed=["b"]))
    assert state.by_token(b"token-a") is None and len(state.by_digest) == 1
    state.apply(table(route([], service="c", token="token-c"), version=4))  # whole table
    assert list(state.by_digest.values()) == ["c"]


def test_the_group_token_index_follows_deltas() -> None:
    """Group token digest → group: a rotation or removal stops the old token at once."""
    state = RouteState(EndpointPool(), default_timeout_ms=1000)

    def group(token: str) -> GroupRoute:
        return GroupRoute(group="g", token_sha256=token_digest(token), traffic_mode="auto")

    digest = {t: bytes.fromhex(token_digest(t)) for t in ("t1", "t2")}
    state.apply(RouteTable(version=1, routes=[], groups=[group("t1")]))
    assert state.group_by_digest == {digest["t1"]: "g"}
    state.apply(RouteTable(version=2, routes=[], groups=[group("t2")], full=False))
    assert state.group_by_digest == {digest["t2"]: "g"}
    state.apply(RouteTable(version=3, routes=[], removed_groups=["g"], full=False))
    assert state.group_by_digest == {} and state.groups == {}


def test_grpc_endpoints_are_routed_and_released_like_http_ones() -> None:
    state = RouteState(EndpointPool(), default_timeout_ms=1000)
    changes: list[RouteChange] = []
    state.listeners.append(changes.append)
    both = route(["http://h:8000"]).model_copy(update={"grpc_endpoints": ["http://h:8001"]})
    state.apply(table(both))
    entry = state.get(SERVICE)
    assert entry is not None and [ep.port for ep in entry.grpc_endpoints] == [8001]
    assert {ep.port for ep in changes[-1].added} == {8000, 8001}
    state.apply(RouteTable(version=2, routes=[route([])], full=False))
    assert {ep.port for ep in changes[-1].released} == {8000, 8001}


def test_a_delta_touches_only_its_services_and_releases_unlisted_replicas() -> None:
    state = RouteState(EndpointPool(), default_timeout_ms=1000)
    changes: list[RouteChange] = []
    state.listeners.append(changes.append)
    shared, own = "http://h:1", "http://h:2"
    state.apply(table(route([shared, own], service="a"), route([shared], service="b")))
    assert {ep.base_url for ep in changes[-1].added} == {shared, own}
    b = state.get("b")
    assert b is not None

    delta = RouteTable(version=2, routes=[route([], service="c")], full=False, removed=["a"])
    state.apply(delta)
    assert set(state.services) == {"b", "c"} and state.version == 2
    assert state.get("b") is b  # untouched by a change to other services
    assert {ep.base_url for ep in changes[-1].released} == {own}  # b still lists the shared one
    assert changes[-1].added == frozenset()

    counted = b.in_flight  # made by b's first call
    rotated = route([shared], service="b", token="rotated-token")
    state.apply(RouteTable(version=3, routes=[rotated], full=False))
    again = state.get("b")
    assert again is not None and again is not b and again.in_flight is counted
    assert changes[-1].released == frozenset() and changes[-1].added == frozenset()
    state.apply(RouteTable(version=4, routes=[], full=False, removed=["b", "gone-already"]))
    assert {ep.base_url for ep in changes[-1].released} == {shared}
    assert set(state.services) == {"c"}


def test_changes_through_a_static_source(make_gateway: GatewayFactory, echo: Echo) -> None:
    gw = make_gateway(table(route([echo.url])))
    assert status_of(gw) == 200
    # Token rotation: the old token stops working at once, the new one works.
    gw.publish(table(route([echo.url], token="rotated-token"), version=2))
    assert status_of(gw) == 401
    assert status_of(gw, "rotated-token") == 200
    # Scale to zero, then back.
    gw.publish(table(route([], token="rotated-token", status="Waiting"), version=3))
    assert status_of(gw, "rotated-token") == 503
    gw.publish(table(route([echo.url], token="rotated-token"), version=4))
    assert status_of(gw, "rotated-token") == 200
    # Stop / delete: the service is gone.
    gw.publish(table(version=5))
    assert status_of(gw, "rotated-token") == 404


def test_a_whole_table_in_pages_replaces_the_last_at_its_last_page() -> None:
    """Each page's routes replace theirs at once (the rest of the last table serves
    meanwhile); the last page drops what no page listed and moves the version. A first page
    again (the read started over) begins anew; what earlier pages sent stays until then."""
    state = RouteState(EndpointPool(), default_timeout_ms=1000)
    state.apply(table(route([], service="old"), route([], service="kept"), version=1))
    kept = state.get("kept")
    assert kept is not None
    counted = kept.in_flight
    first = RouteTable(
        version=5, routes=[route([], service="a"), route([], service="kept")], next_page="5.2"
    )
    second = RouteTable(version=5, routes=[route([], service="b")], continued=True, next_page="x")
    last = RouteTable(version=5, routes=[route([], service="c", token="c")], continued=True)
    state.apply(first)
    assert state.version == 1 and set(state.services) == {"old", "kept", "a"}
    again = state.get("kept")
    assert again is not None and again is not kept and again.in_flight is counted
    state.apply(second)
    for page in (first, second, last):  # read over from its first page
        state.apply(page)
    assert state.version == 5 and set(state.services) == {"a", "kept", "b", "c"}
    assert len(state.by_digest) == 2  # the test token, c's
    found = state.by_token(b"c")
    assert found is not None and found.service == "c"


def test_a_whole_table_is_read_in_pages(
    make_gateway: GatewayFactory, control_plane: FakeControlPlane, lt: LoopThread, echo: Echo
) -> None:
    names = [f"s{i}" for i in range(5)]
    whole = table(*(route([echo.url], service=n, token=f"token-{n}") for n in names), version=3)
    lt.call(lambda: control_plane.publish(whole))
    source = cp_source(control_plane)
    source.page_size = 2
    gw = make_gateway(source=source)

    def served(name: str) -> bool:
        return status_of(gw, f"token-{name}", f"/api/predict/{name}/v2") == 200

    assert seconds_until(lambda: all(served(name) for name in names)) < 2
    assert control_plane.pages == ["3.2", "3.4"]
    assert health(gw)["route_table_version"] == 3
    lt.call(lambda: control_plane.publish(table(route([echo.url], service="s0"), version=4)))
    assert seconds_until(lambda: health(gw)["route_table_version"] == 4) < 2
    assert (3, 2.0) in control_plane.polls  # then long-polls after the pages' version


@pytest.fixture
def control_plane(lt: LoopThread, echo: Echo) -> FakeControlPlane:
    cp = FakeControlPlane(ADMIN, table(route([echo.url])))
    lt.run(cp.start())
    return cp


def cp_source(cp: FakeControlPlane, admin: str = ADMIN) -> ControlPlaneRouteSource:
    return ControlPlaneRouteSource(
        cp.url, admin, wait_s=2.0, backoff_initial_s=0.02, backoff_max_s=0.2
    )


def test_control_plane_changes_arrive_within_a_second(
    make_gateway: GatewayFactory, control_plane: FakeControlPlane, lt: LoopThread, echo: Echo
) -> None:
    gw = make_gateway(source=cp_source(control_plane))
    assert status_of(gw) == 200
    assert health(gw)["control_plane"] == "ok"
    assert control_plane.polls[0][0] == -1  # first poll asks for the full table

    cp = control_plane
    lt.call(lambda: cp.publish(table(route([echo.url], token="new-token"), version=2)))
    assert seconds_until(lambda: status_of(gw, "new-token") == 200) < 1.0
    assert status_of(gw) == 401
    lt.call(lambda: cp.publish(table(route([], token="new-token"), version=3)))
    assert seconds_until(lambda: status_of(gw, "new-token") == 503) < 1.0
    lt.call(lambda: cp.publish(table(version=4)))
    assert seconds_until(lambda: status_of(gw, "new-token") == 404) < 1.0
    assert health(gw)["route_table_version"] == 4
    # Long-polls carry the version the gateway has.
    assert (3, 2.0) in cp.polls


def test_control_plane_down_keeps_serving(
    make_gateway: GatewayFactory,
    control_plane: FakeControlPlane,
    lt: LoopThread,
    echo: Echo,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    gw = make_gateway(source=cp_source(control_plane))
    assert status_of(gw) == 200
    port = control_plane.port
    lt.run(control_plane.stop())
    seconds_until(lambda: str(health(gw)["control_plane"]).startswith("unreachable since "))
    doc = health(gw)
    assert doc["status"] == "ok" and doc["route_table_version"] == 1
    assert all(status_of(gw) == 200 for _ in range(20))  # predictions continue
    metrics = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=5)
    metrics.request("GET", "/metrics")
    assert b"openeas_gateway_control_plane_up 0" in metrics.getresponse().read()

    # It comes back (restarted: its version counter started again) with a new token.
    restarted = FakeControlPlane(ADMIN, table(route([echo.url], token="after-restart")), port)
    lt.run(restarted.start())
    try:
        assert seconds_until(lambda: status_of(gw, "after-restart") == 200, 5.0) < 3.0
        assert health(gw)["control_plane"] == "ok"
    finally:
        lt.run(restarted.stop())
    # The outage and the recovery were logged, and no token with them.
    assert "control plane unreachable" in caplog.text
    assert "control plane reachable again" in caplog.text
    text = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert not [t for t in (ADMIN, TOKEN, "after-restart") if t in text]


def test_control_plane_refusing_the_admin_token(
    make_gateway: GatewayFactory, control_plane: FakeControlPlane
) -> None:
    gw = make_gateway(source=cp_source(control_plane, "wrong"), wait_routes=False)
    seconds_until(lambda: "HTTP 401" in str(health(gw)["control_plane"]))
    assert health(gw)["status"] == "starting"
    assert "wrong" not in json.dumps(health(gw))
