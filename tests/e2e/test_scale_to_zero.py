"""Scale to zero end to end, in seconds: the real control plane (API, reconciler, autoscaler,
local runtime with stand-in replica processes) and the real gateway reading its route feed
with the route-reader token, as ``openeas up`` wires them. A service at zero is woken by its
first authenticated requests, which are held and answered; a wrong token wakes nothing; it
goes back to zero after its grace period; the cold start is an event and a metric."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from controlplane.server import ControlPlane, bind
from controlplane.settings import Settings
from controlplane.store import migrate
from gateway.app import GatewayRunner, start_gateway
from gateway.route_source import ControlPlaneRouteSource
from gateway.settings import GatewaySettings
from processors import registry
from processors.base import Processor
from testing.waiting import wait_until
from tests.controlplane.test_local_runtime import fake_plan
from tests.gateway.harness import LoopThread

ADMIN = "admin-token-for-the-zero-tests-0123"
ROUTES = "routes-token-for-the-zero-tests-0123"
NAME = "sleepy"


@dataclass
class Stack:
    api: httpx.Client
    gateway: GatewayRunner

    def service(self) -> Any:
        return self.api.get(f"/api/v2/services/local/{NAME}").json()

    def events(self, reason: str) -> list[str]:
        body = self.api.get(f"/api/v2/services/local/{NAME}/events").json()
        return [e["Message"] for e in body["Events"] if e["Reason"] == reason]

    def predict(self, token: str) -> tuple[int, float]:
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", self.gateway.port, timeout=30)
        conn.request(
            "POST", f"/api/predict/{NAME}/v2/models/m/infer", b"{}", {"Authorization": token}
        )
        resp = conn.getresponse()
        resp.read()
        conn.close()
        return resp.status, time.monotonic() - started

    def metrics(self) -> str:
        conn = http.client.HTTPConnection("127.0.0.1", self.gateway.port, timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        return text


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    monkeypatch.setitem(registry._LOADED, "fake", Processor("fake", validate=list, plan=fake_plan))
    monkeypatch.setenv("FAKE_READY_AFTER", "0.5")  # the replica's "model load"
    settings = Settings(data_dir=tmp_path, admin_token=ADMIN, routes_token=ROUTES)
    migrate.upgrade(settings.sqlalchemy_url)
    lt = LoopThread()
    plane = ControlPlane(settings)
    sock = bind("127.0.0.1", 0)
    internal = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def start() -> tuple[asyncio.Task[None], GatewayRunner]:
        serving = asyncio.create_task(plane.serve(sock))
        gateway = await start_gateway(
            GatewaySettings(controlplane_url=internal, routes_token=SecretStr(ROUTES)),
            ControlPlaneRouteSource(internal, ROUTES, wait_s=5.0),
            host="127.0.0.1",
            port=0,
        )
        return serving, gateway

    serving, gateway = lt.run(start())
    api = httpx.Client(base_url=internal, headers={"Authorization": f"Bearer {ADMIN}"})
    try:
        yield Stack(api, gateway)
    finally:
        api.close()
        lt.run(gateway.close(grace_s=1.0))
        plane.stop()
        lt.run(asyncio.wait_for(serving, 30), timeout=40)
        lt.close()


def test_a_service_at_zero_is_woken_by_its_requests_and_sleeps_again(stack: Stack) -> None:
    spec = {
        "name": NAME,
        "processor": "fake",
        "processor_params": ["serve"],
        "metadata": {"instance": 0},
        "autoscaler": {
            "min": 0,
            "max": 2,
            "scaleStrategies": [{"metricName": "qps", "threshold": 100}],
            "behavior": {"onZero": {"scaleDownGracePeriodSeconds": 2}},
        },
    }
    created = stack.api.post("/api/v2/services", json=spec)
    assert created.status_code == 200, created.text
    token = created.json()["Token"]
    wait_until(lambda: stack.service()["Status"] == "ScaledToZero", 20)
    assert stack.service()["Message"] == "scaled to zero, wakes on request"

    # Once the gateway has the route (404 before), a wrong token is 401 at once.
    wait_until(lambda: stack.predict("wrong-token-0123456789")[0] != 404, 10)
    status, took = stack.predict("wrong-token-0123456789")
    assert status == 401 and took < 1.0
    time.sleep(1.0)
    assert stack.events("Woken") == []
    assert json.loads(stack.service()["ServiceConfig"])["metadata"]["instance"] == 0

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: stack.predict(token), range(4)))
    assert [status for status, _ in answers] == [200] * 4, answers
    assert stack.events("Woken") == ["scaled 0→1: woken by a request"]
    found = re.search(
        rf'^openeas_gateway_cold_start_seconds_count\{{service="{NAME}"\}} 1$',
        stack.metrics(),
        re.M,
    )
    assert found is not None
    wait_until(lambda: stack.events("ColdStart"), 10)
    (cold,) = stack.events("ColdStart")
    print(cold)
    assert cold.startswith("cold start ") and "(woken by a request)" in cold
    assert "Triton load" in cold

    # Awake, it answers at once; idle for the grace period, it goes back to zero.
    status, took = stack.predict(token)
    assert status == 200 and took < 1.0
    wait_until(lambda: stack.service()["Status"] == "ScaledToZero", 20)
    assert json.loads(stack.service()["ServiceConfig"])["metadata"]["instance"] == 0
    assert stack.events("Autoscaled")[-1].startswith("scaled 1→0: no request for")
