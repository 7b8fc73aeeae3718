"""Mirroring through the real gateway: exactly ``ratio`` % of a service's requests are copied
to its targets after the caller has its answer; a slow or dead shadow changes nothing for the
caller; the answers are compared (byte-equal, or Triton outputs within a tolerance, JSON and
binary) and counted per target; shadows in flight are bounded."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import statistics
import struct
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from contract.wire import MirrorRoute, Route, RouteTable
from gateway.mirroring.mirror import MAX_IN_FLIGHT
from testing.waiting import wait_until
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import TOKEN, Gateway, LoopThread, dead_port, route

INFER = "/api/predict/primary/v2/models/m/infer"


@dataclass
class Replica:
    """A tiny replica answering every request with ``answer`` — with ``held``, only once the
    test calls :meth:`release` (as slow as the test needs)."""

    lt: LoopThread
    answer: tuple[int, dict[str, str], bytes] = (200, {}, b"same")
    held: bool = False
    bodies: list[bytes] = field(default_factory=list)
    url: str = ""
    runner: web.AppRunner | None = None
    gate: asyncio.Event | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.read())
        if self.held:
            assert self.gate is not None
            await self.gate.wait()
        status, headers, body = self.answer
        return web.Response(status=status, headers=headers, body=body)

    def release(self) -> None:
        assert self.gate is not None
        self.lt.call(self.gate.set)

    async def _start(self) -> None:
        self.gate = asyncio.Event()
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    def start(self) -> Replica:
        self.lt.run(self._start())
        return self

    def close(self) -> None:
        if self.runner is not None:
            self.lt.run(self.runner.cleanup())


@pytest.fixture
def replicas(lt: LoopThread) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for r in started:
        r.close()


def replica(pool: list[Replica], lt: LoopThread, **kw: object) -> Replica:
    r = Replica(lt, **kw).start()  # type: ignore[arg-type]
    pool.append(r)
    return r


def mirrored(
    primary: Replica,
    targets: dict[str, list[str]],
    *,
    ratio: int = 100,
    tolerance: float | None = None,
    unrouted: tuple[str, ...] = (),
    target_timeout_ms: int = 10_000,
) -> RouteTable:
    """Service ``primary`` mirrored to ``targets`` (name → replica URLs) and to services the
    gateway has no route for (``unrouted``)."""
    mirror = MirrorRoute(ratio=ratio, targets=[*targets, *unrouted], tolerance=tolerance)
    routes: list[Route] = [
        route([primary.url], service="primary").model_copy(update={"mirror": mirror}),
        route([primary.url], service="plain"),  # the same replica, unmirrored: a baseline
    ]
    for name, urls in targets.items():
        token = f"token-of-{name}-xyz"
        routes.append(route(urls, service=name, token=token, timeout_ms=target_timeout_ms))
    return RouteTable(version=1, routes=routes)


def post(port: int, n: int, path: str = INFER, body: bytes = b'{"inputs": []}') -> list[float]:
    """``n`` calls in a row; their latencies (each must be answered 200)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("POST", path, body=body, headers={"Authorization": TOKEN})
        resp = conn.getresponse()
        resp.read()
        took.append(time.perf_counter() - t0)
        assert resp.status == 200
    conn.close()
    return took


_SAMPLE = re.compile(
    r"^openeas_gateway_mirror_requests_total"
    r'\{service="primary",target="(\w+)",result="(\w+)"\} (\d+)$'
)


def results(gw: Gateway) -> Counter[tuple[str, str]]:
    """``openeas_gateway_mirror_requests_total`` of service ``primary``, from ``/metrics``."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    found: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            found[(m[1], m[2])] = int(m[3])
    return found


def test_exactly_the_ratio_is_mirrored(
    make_gateway: GatewayFactory, replicas: list[Replica], lt: LoopThread
) -> None:
    primary, shadow = replica(replicas, lt), replica(replicas, lt)
    gw = make_gateway(mirrored(primary, {"b": [shadow.url]}, ratio=7))
    post(gw.port, 1000)
    wait_until(lambda: results(gw)[("b", "match")] == 70, what="70 matches")
    assert len(primary.bodies) == 1000 and len(shadow.bodies) == 70  # exact, not ≈ 7 %
    assert shadow.bodies[0] == b'{"inputs": []}'
    assert results(gw) == {("b", "match"): 70}
    # A body streamed past the buffer is not copied: the shadow's share counts as skipped.
    post(gw.port, 100, body=b"x" * (512 * 1024))
    wait_until(lambda: results(gw)[("b", "skipped")] == 7, what="7 skipped")
    assert len(shadow.bodies) == 70


def test_a_slow_shadow_costs_the_caller_nothing_and_in_flight_shadows_are_bounded(
    make_gateway: GatewayFactory, replicas: list[Replica], lt: LoopThread
) -> None:
    primary, slow = replica(replicas, lt), replica(replicas, lt, held=True)
    gw = make_gateway(mirrored(primary, {"b": [slow.url]}))
    post(gw.port, 5, "/api/predict/plain/v2/models/m/infer")  # warm both paths up
    baseline = post(gw.port, MAX_IN_FLIGHT + 4, "/api/predict/plain/v2/models/m/infer")
    with_mirror = post(gw.port, MAX_IN_FLIGHT + 4)
    # Every shadow is still waiting for its answer; the caller's latency stays that of the
    # unmirrored service on the same replica. A caller held by its shadow would wait for
    # the client's 10 s timeout; a loaded machine delays one call by tenths of a second.
    assert max(with_mirror) < 2.0 + max(baseline), (baseline, with_mirror)
    assert statistics.median(with_mirror) < 0.2 + statistics.median(baseline)
    wait_until(lambda: len(slow.bodies) == MAX_IN_FLIGHT, what="shadows sent")
    assert results(gw) == {("b", "skipped"): 4}  # past the bound: not sent
    slow.release()
    wait_until(lambda: results(gw)[("b", "match")] == MAX_IN_FLIGHT, what="shadows answered")
    assert results(gw) == {("b", "match"): MAX_IN_FLIGHT, ("b", "skipped"): 4}
    assert len(slow.bodies) == MAX_IN_FLIGHT


def test_a_dead_late_or_missing_shadow_is_an_error_the_caller_never_sees(
    make_gateway: GatewayFactory, replicas: list[Replica], lt: LoopThread
) -> None:
    primary, late = replica(replicas, lt), replica(replicas, lt, held=True)
    targets = {"dead": [f"http://127.0.0.1:{dead_port()}"], "unready": [], "late": [late.url]}
    gw = make_gateway(mirrored(primary, targets, unrouted=("gone",), target_timeout_ms=300))
    post(gw.port, 10)  # every one 200
    want = {(name, "error"): 10 for name in ("dead", "unready", "gone", "late")}
    wait_until(lambda: results(gw) == want, what="errors counted")


def test_answers_are_compared_per_target(
    make_gateway: GatewayFactory, replicas: list[Replica], lt: LoopThread
) -> None:
    primary = replica(replicas, lt, answer=(200, {}, b"answer"))
    equal = replica(replicas, lt, answer=(200, {}, b"answer"))
    other = replica(replicas, lt, answer=(200, {}, b"answer, but different"))
    failing = replica(replicas, lt, answer=(500, {}, b"answer"))
    targets = {"equal": [equal.url], "other": [other.url], "failing": [failing.url]}
    gw = make_gateway(mirrored(primary, targets))
    post(gw.port, 3)
    want = {("equal", "match"): 3, ("other", "mismatch"): 3, ("failing", "mismatch"): 3}
    wait_until(lambda: results(gw) == want, what="compared")


def infer_json(values: list[float]) -> bytes:
    out = {"name": "y", "datatype": "FP32", "shape": [1, len(values)], "data": values}
    return json.dumps({"model_name": "m", "model_version": "1", "outputs": [out]}).encode()


def infer_binary(values: list[float], version: str = "1") -> tuple[int, dict[str, str], bytes]:
    blob = struct.pack(f"<{len(values)}f", *values)
    out = {
        "name": "y",
        "datatype": "FP32",
        "shape": [1, len(values)],
        "parameters": {"binary_data_size": len(blob)},
    }
    header = json.dumps({"model_name": "m", "model_version": version, "outputs": [out]})
    headers = {"Inference-Header-Content-Length": str(len(header))}
    return 200, headers, header.encode() + blob


@pytest.mark.parametrize("binary", [False, True])
def test_tensors_within_the_tolerance_match(
    make_gateway: GatewayFactory, replicas: list[Replica], lt: LoopThread, binary: bool
) -> None:
    def answer(values: list[float], version: str) -> tuple[int, dict[str, str], bytes]:
        if binary:
            return infer_binary(values, version)
        return 200, {"Content-Type": "application/json"}, infer_json(values)

    primary = replica(replicas, lt, answer=answer([1.0, 2.0, 3.0], "1"))
    close = replica(replicas, lt, answer=answer([1.0004, 2.0, 2.9996], "2"))
    far = replica(replicas, lt, answer=answer([1.0, 2.0, 3.01], "2"))
    gw = make_gateway(mirrored(primary, {"close": [close.url], "far": [far.url]}, tolerance=1e-3))
    post(gw.port, 4)
    want = {("close", "match"): 4, ("far", "mismatch"): 4}
    wait_until(lambda: results(gw) == want, what="compared within the tolerance")
