"""Waking services at zero, through the real gateway and its long-poll route feed from a fake
control plane: held requests are answered once a replica is ready (one wake-up push for all
of them, the cold start in ``openeas_gateway_cold_start_seconds``), 450 past the hold bound, 504
when no replica comes within the service's timeout, 401 at once and no wake-up for a wrong
token, 503 at once for services that do not wake, and a group whose only member is at zero."""

from __future__ import annotations

import http.client
import json
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from contract.wire import GroupRoute, Route, RouteTable, token_digest
from gateway.route_source import ControlPlaneRouteSource
from testing.waiting import wait_until
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import (
    TOKEN,
    Echo,
    FakeControlPlane,
    Gateway,
    LoopThread,
    route,
    table,
)

ADMIN = "routes-token-for-the-wake-tests"
ASLEEP = route([], wakeable=True, status="ScaledToZero", timeout_ms=10_000)
PATH = "/api/predict/svc/v2/models/m/infer"


@pytest.fixture
def cp(lt: LoopThread) -> Iterator[FakeControlPlane]:
    plane = FakeControlPlane(ADMIN, table(ASLEEP))
    lt.run(plane.start())
    yield plane
    lt.run(plane.stop())


@pytest.fixture
def gateway(make_gateway: GatewayFactory, cp: FakeControlPlane) -> Callable[..., Gateway]:
    def start(**settings: Any) -> Gateway:
        source = ControlPlaneRouteSource(cp.url, ADMIN, wait_s=2.0, backoff_max_s=0.2)
        return make_gateway(
            source=source,
            controlplane_url=cp.url,
            routes_token=ADMIN,
            report_interval_s=0,
            **settings,
        )

    return start


def call(gw: Gateway, path: str = PATH, token: str | None = TOKEN) -> tuple[int, Any, float]:
    """(status, JSON body, seconds taken) of one POST."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    conn.request("POST", path, body=b'{"inputs": []}', headers=headers)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, json.loads(body) if body else None, time.monotonic() - started


def concurrently(n: int, fn: Callable[[], Any]) -> list[Any]:
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: fn(), range(n)))


def wake_after(lt: LoopThread, cp: FakeControlPlane, delay: float, new: RouteTable) -> None:
    """The control plane's answer to a wake-up: a ready replica ``delay`` s later."""

    def on_wake(_: str) -> int:
        lt.loop.call_later(delay, cp.publish, new)
        return 200

    cp.on_wake = on_wake


def metric(gw: Gateway, name: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    found = re.search(rf'^{name}\{{service="svc"\}} (\d+)$', text, re.M)
    return int(found.group(1)) if found else 0


def cold_starts(gw: Gateway) -> int:
    return metric(gw, "openeas_gateway_cold_start_seconds_count")


def in_flight(gw: Gateway) -> int:
    return metric(gw, "openeas_gateway_in_flight_requests")


def test_held_requests_are_answered_after_one_wake_up(
    gateway: Callable[..., Gateway], cp: FakeControlPlane, lt: LoopThread, echo: Echo
) -> None:
    gw = gateway()
    wake_after(lt, cp, 0.5, table(route([echo.url]), version=2))
    answers = concurrently(16, lambda: call(gw))
    assert [status for status, _, _ in answers] == [200] * 16
    assert min(took for _, _, took in answers) >= 0.4  # held until the replica was ready
    assert cp.wakes == ["svc"]  # one push for the sixteen
    assert len(echo.seen) == 16
    assert cold_starts(gw) == 1
    # Awake: no more holding, no more wake-ups.
    assert call(gw)[0] == 200 and cp.wakes == ["svc"] and cold_starts(gw) == 1


def test_past_the_hold_bound_is_450_and_a_slow_wake_up_is_504(
    gateway: Callable[..., Gateway], cp: FakeControlPlane, lt: LoopThread
) -> None:
    lt.call(lambda: cp.publish(table(ASLEEP.model_copy(update={"timeout_ms": 1500}), version=2)))
    gw = gateway(wake_queue=3)
    with ThreadPoolExecutor(5) as pool:  # the control plane never brings a replica
        calls = [pool.submit(call, gw) for _ in range(5)]
        # Held requests are in flight for the autoscaler's load report (demand it sees).
        wait_until(lambda: in_flight(gw) == 3, 5)
        answers = [c.result() for c in calls]
    assert in_flight(gw) == 0
    statuses = sorted(status for status, _, _ in answers)
    assert statuses == [450, 450, 504, 504, 504]
    full = next(body for status, body, _ in answers if status == 450)
    assert full["title"] == "Queue Full" and "retry" in full["detail"]
    assert "holds 3 requests" in full["detail"]
    assert all(took < 1.0 for status, _, took in answers if status == 450)  # at once
    late = next(body for status, body, _ in answers if status == 504)
    assert "scaled to zero" in late["detail"] and "1500 ms" in late["detail"]
    assert all(took >= 1.4 for status, _, took in answers if status == 504)
    assert cp.wakes == ["svc"]
    assert cold_starts(gw) == 0


def test_the_services_own_queue_size_bounds_the_hold(
    gateway: Callable[..., Gateway], cp: FakeControlPlane, lt: LoopThread
) -> None:
    small = ASLEEP.model_copy(update={"max_queue_size": 1, "timeout_ms": 1000})
    lt.call(lambda: cp.publish(table(small, version=2)))
    gw = gateway()
    statuses = sorted(status for status, _, _ in concurrently(3, lambda: call(gw)))
    assert statuses == [450, 450, 504]


def test_a_wrong_or_missing_token_is_401_at_once_and_wakes_nothing(
    gateway: Callable[..., Gateway], cp: FakeControlPlane
) -> None:
    gw = gateway()
    for token in ("not-the-token-0123456789", None):
        status, body, took = call(gw, token=token)
        assert status == 401 and took < 1.0, body
    time.sleep(0.3)  # a push would have been sent by now
    assert cp.wakes == []


@pytest.mark.parametrize(
    "asleep",
    [
        route([], status="Stopped"),  # stopped: not wakeable
        route([], status="ScaledToZero").model_copy(update={"status": "Running"}),  # instance 0
    ],
    ids=["stopped", "instance-0-without-autoscaler"],
)
def test_services_that_do_not_wake_answer_503_at_once(
    gateway: Callable[..., Gateway], cp: FakeControlPlane, lt: LoopThread, asleep: Route
) -> None:
    lt.call(lambda: cp.publish(table(asleep, version=2)))
    gw = gateway()
    status, body, took = call(gw)
    assert status == 503 and took < 1.0, body
    assert "no ready replica" in body["detail"]
    time.sleep(0.3)
    assert cp.wakes == []


def test_a_refused_wake_up_is_503(gateway: Callable[..., Gateway], cp: FakeControlPlane) -> None:
    cp.on_wake = lambda _: 409  # e.g. stopped meanwhile: the route was not updated yet
    gw = gateway()
    status, body, took = call(gw)
    assert status == 503 and took < 5.0
    assert "has no autoscaler with min 0" in body["detail"]


def test_a_service_stopped_while_waking_releases_its_requests_with_503(
    gateway: Callable[..., Gateway], cp: FakeControlPlane, lt: LoopThread
) -> None:
    gw = gateway()
    wake_after(lt, cp, 0.3, table(route([], status="Stopped"), version=2))
    status, body, took = call(gw)
    assert status == 503 and took < 5.0, body


GROUP_TOKEN = "group-token-for-the-wake-tests"


def test_a_group_whose_only_member_is_at_zero_wakes_it(
    gateway: Callable[..., Gateway], cp: FakeControlPlane, lt: LoopThread, echo: Echo
) -> None:
    member = ASLEEP.model_copy(update={"group": "g", "grouping": True})
    standalone = route([echo.url], service="other", token="other-token-0123456789").model_copy(
        update={"group": "g", "grouping": False}
    )
    group = GroupRoute(group="g", token_sha256=token_digest(GROUP_TOKEN), traffic_mode="auto")
    lt.call(lambda: cp.publish(RouteTable(version=2, routes=[member, standalone], groups=[group])))
    awake = member.model_copy(update={"endpoints": [echo.url], "status": "Running"})
    woken = RouteTable(version=3, routes=[awake, standalone], groups=[group])
    wake_after(lt, cp, 0.3, woken)
    gw = gateway()
    assert call(gw, "/api/predict/g/v2/models/m/infer", token="wrong-token-0123456")[0] == 401
    assert cp.wakes == []
    status, body, took = call(gw, "/api/predict/g/v2/models/m/infer", token=GROUP_TOKEN)
    assert status == 200 and took >= 0.25, body
    assert body["path_qs"] == "/v2/models/m/infer"
    assert cp.wakes == ["svc"]


def test_a_route_from_an_older_control_plane_is_not_wakeable() -> None:
    older = route([]).model_dump(exclude={"wakeable"})
    assert "wakeable" not in older
    assert Route.model_validate(older).wakeable is False


@pytest.mark.slow
def test_grpc_calls_wake_the_service_and_are_answered(
    gateway: Callable[..., Gateway], cp: FakeControlPlane, lt: LoopThread, triton_server: Any
) -> None:
    """The gRPC door holds calls for a service at zero like the HTTP door (one wake-up, the
    request's bytes kept meanwhile), and the wake queue bound is RESOURCE_EXHAUSTED."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from gateway.grpc.server import start_grpc

    gw = gateway(wake_queue=4)
    door = lt.run(start_grpc(gw.runner.gateway.grpc_door(), host="127.0.0.1", port=0))
    awake = route([triton_server.base_url]).model_copy(
        update={"grpc_endpoints": [f"http://127.0.0.1:{triton_server.grpc_port}"]}
    )
    wake_after(lt, cp, 0.5, table(awake, version=2))
    client = grpcclient.InferenceServerClient(url=door.address)

    def infer(i: int) -> Any:
        x = np.full(4, float(i), dtype=np.float32)
        inputs = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(x)
        try:
            result = client.infer("add_sub", inputs, headers={"authorization": TOKEN})
        except InferenceServerException as e:
            return e.status()
        return result.as_numpy("OUTPUT0").tolist()

    try:
        started = time.monotonic()
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(infer, range(6)))
        took = time.monotonic() - started
    finally:
        client.close()
        lt.run(door.close(grace_s=1.0))
    full = [i for i, a in enumerate(answers) if a == "StatusCode.RESOURCE_EXHAUSTED"]
    assert len(full) == 2, answers  # past the bound of 4
    for i, answer in enumerate(answers):
        assert i in full or answer == [2.0 * i] * 4, answers  # each its own sum
    assert took >= 0.4  # held until the replica was ready
    assert cp.wakes == ["svc"]
    assert cold_starts(gw) == 1
