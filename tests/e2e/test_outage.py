"""The data plane outlives the control plane: ``openeas controlplane`` and ``openeas
gateway`` as separate processes, a real Triton replica, and the control plane stopped with
SIGSTOP (hung: the kernel still accepts its connections, nothing answers). Predictions go
on; a gateway restarted meanwhile serves from its route snapshot and says so; once the
control plane runs again the gateway follows it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testing.waiting import wait_until
from tests.fixtures_triton import EXAMPLE_MODELS, free_port

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
ADMIN = "outage-admin-token-0123456789abcdef"
ROUTES = "outage-routes-token-0123456789abcdef"
ADD_SUB = {
    "inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]},
    ]
}


class Processes:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.cp_port, self.gw_port = free_port(), free_port()
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OPENEAS_", "EAS_"))},
            "OPENEAS_DATA_DIR": str(tmp / "data"),
            "OPENEAS_ADMIN_TOKEN": ADMIN,
            "OPENEAS_ROUTES_TOKEN": ROUTES,
            "OPENEAS_CONTROLPLANE_URL": f"http://127.0.0.1:{self.cp_port}",
            "OPENEAS_GATEWAY_ROUTE_SNAPSHOT": str(tmp / "gateway" / "routes.json"),
            "OPENEAS_GATEWAY_CONNECT_TIMEOUT_MS": "500",
        }
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, *argv: str) -> subprocess.Popen[bytes]:
        with (self.tmp / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                [str(BIN / "openeas"), *argv], env=self.env, stdout=log, stderr=log
            )
        self.procs.append(proc)
        return proc

    def gateway(self) -> subprocess.Popen[bytes]:
        return self.spawn("gateway", "gateway", "--port", str(self.gw_port))

    def gateway_health(self) -> dict[str, Any]:
        r = httpx.get(f"http://127.0.0.1:{self.gw_port}/gateway/healthz", timeout=2)
        doc: dict[str, Any] = r.json()
        return doc

    def predict(self, token: str) -> int:
        url = f"http://127.0.0.1:{self.gw_port}/api/predict/outage/v2/models/add_sub/infer"
        r = httpx.post(url, json=ADD_SUB, headers={"Authorization": token}, timeout=10)
        if r.status_code == 200:
            assert r.json()["outputs"][0]["data"] == [2, 3, 4, 5]
        return r.status_code

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    p = Processes(tmp_path)
    yield p
    p.close()


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_a_hung_control_plane_stops_no_prediction(procs: Processes) -> None:
    cp = procs.spawn("controlplane", "controlplane", "--port", str(procs.cp_port), "--migrate")
    api = f"http://127.0.0.1:{procs.cp_port}"
    wait_until(lambda: answers(api + "/readyz"), 60, what="the control plane is ready")
    procs.gateway()
    health = f"http://127.0.0.1:{procs.gw_port}/gateway/healthz"
    wait_until(lambda: answers(health), 30, what="the gateway has its route table")
    admin = {"Authorization": f"Bearer {ADMIN}"}
    spec = {
        "name": "outage",
        "processor": "triton",
        "processor_params": [f"--model-repository={EXAMPLE_MODELS}"],
        "metadata": {"instance": 1, "cpu": 1, "gpu": 0, "memory": 2000},
    }
    created = httpx.post(api + "/api/v2/services", json=spec, headers=admin, timeout=30)
    assert created.status_code == 200, created.text
    token = httpx.get(api + "/api/v2/services/local/outage/token", headers=admin).json()["Token"]
    wait_until(lambda: procs.predict(token) == 200, 120, what="the service serves")

    cp.send_signal(signal.SIGSTOP)
    try:
        started, served = time.monotonic(), 0
        while time.monotonic() - started < 3:
            assert procs.predict(token) == 200
            served += 1
        assert served > 10

        # A gateway restarted while the control plane hangs: it saved the table on its way
        # out, serves it again after the connect timeout, and its health says from where.
        gw = procs.procs[-1]
        gw.terminate()
        assert gw.wait(30) == 0
        procs.gateway()
        wait_until(lambda: answers(health), 30, what="the gateway serves its snapshot")
        doc = procs.gateway_health()
        assert str(doc["serving_from"]).startswith("snapshot "), doc
        assert doc["control_plane"] == "connecting"
        assert all(procs.predict(token) == 200 for _ in range(20))
        assert procs.predict("wrong-token") == 401
    finally:
        cp.send_signal(signal.SIGCONT)
    wait_until(
        lambda: procs.gateway_health()["serving_from"] == "control_plane",
        60,
        what="the gateway follows the control plane again",
    )
    assert procs.predict(token) == 200
