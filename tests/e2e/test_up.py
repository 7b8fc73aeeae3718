"""The seed's journey on one machine, end to end: ``openeas up`` as a subprocess, the model
repository in the OSS stand-in, ``eascmd`` for every operation, real Triton replicas and the
official ``tritonclient`` through the gateway. Prints the timings the closing notes quote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from eas_prediction import PredictClient, StringRequest

from testing.waiting import WaitTimeout, seconds_until, wait_until
from tests.fixtures_triton import check_example_models, descendants, free_port, is_alive

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


class Platform:
    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp = tmp
        self.env = env
        self.port = free_port()
        self.grpc_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        print(f"{time.monotonic():.1f} start", flush=True)
        log = (self.tmp / "up.log").open("a")
        self.proc = subprocess.Popen(
            [
                str(BIN / "openeas"),
                *("up", "--port", str(self.port), "--grpc-port", str(self.grpc_port)),
            ],
            cwd=self.tmp,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )

        def ready() -> bool:
            try:
                return httpx.get(self.url + "/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        try:
            wait_until(ready, 60, interval=0.1, what="openeas up answers /readyz")
        except WaitTimeout as e:
            raise AssertionError((self.tmp / "up.log").read_text()[-3000:]) from e

    def stop(self) -> list[int]:
        """SIGTERM ``openeas up``; the processes it had started (all must be gone after)."""
        print(f"{time.monotonic():.1f} stop", flush=True)
        assert self.proc is not None
        children = descendants(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) == 0
        return children

    def eascmd(self, *args: str, check: bool = True) -> str:
        print(f"{time.monotonic():.1f} eascmd {args[:2]}", flush=True)
        done = subprocess.run(
            [str(BIN / "eascmd"), *args],
            cwd=self.tmp,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    def describe(self, name: str = "triton_test") -> dict[str, Any]:
        token = (self.tmp / "data" / "admin_token").read_text().strip()
        r = httpx.get(
            f"{self.url}/api/v2/services/local/{name}", headers={"Authorization": f"Bearer {token}"}
        )
        body: dict[str, Any] = r.json()
        return body

    def wait_routable(self, endpoint: str, token: str, timeout: float = 1.0) -> None:
        """The gateway serves the service within ``timeout`` (it follows the route table)."""
        url = f"http://{endpoint}/v2/health/ready"
        wait_until(
            lambda: httpx.get(url, headers={"Authorization": token}).status_code == 200,
            timeout,
            what="the gateway picks up the replica",
        )

    def wait_for(self, check: Any, timeout: float = 120) -> float:
        """Seconds until ``check(describe())`` held; fails with the last description."""
        last: list[dict[str, Any]] = []

        def holds() -> bool:
            last[:] = [self.describe()]
            return bool(check(last[0]))

        try:
            return seconds_until(holds, timeout, what="service state")
        except WaitTimeout as e:
            raise AssertionError(last) from e


@pytest.fixture
def platform(tmp_path: Path, oss_model_repo: str, oss_env: dict[str, str]) -> Iterator[Platform]:
    env = {
        **os.environ,
        **oss_env,
        "HOME": str(tmp_path / "home"),
        "OPENEAS_DATA_DIR": str(tmp_path / "data"),
    }
    env = {k: v for k, v in env.items() if not k.startswith(("EAS_", "OPENEAS_ADMIN"))}
    p = Platform(tmp_path, env)
    p.start()
    yield p
    if p.proc is not None and p.proc.poll() is None:
        p.proc.terminate()
        try:
            p.proc.wait(30)
        except subprocess.TimeoutExpired:
            p.proc.kill()  # its replicas die with it (PR_SET_PDEATHSIG)
            p.proc.wait()


def seed_client(url: str, token: str) -> dict[str, Any]:
    """The seed's client script, URL and token filled in."""
    client = httpclient.InferenceServerClient(url=url, verbose=False)
    image = httpclient.InferInput("input", [1, 299, 299, 3], "FP32")
    image.set_data_from_numpy(np.random.rand(1, 299, 299, 3).astype(np.float32), binary_data=True)
    output = httpclient.InferRequestedOutput("InceptionV3/Predictions/Softmax", binary_data=True)
    result = client.infer(
        "inception_graphdef", inputs=[image], outputs=[output], headers={"Authorization": token}
    )
    body: dict[str, Any] = result.get_response()
    return body


def test_seed_journey(platform: Platform, oss_model_repo: str) -> None:
    config = platform.tmp / "triton.config"
    config.write_text(
        '{"name": "triton_test", "processor": "triton",\n'
        f' "processor_params": ["--model-repository={oss_model_repo}", "--allow-http=true"],\n'
        ' "metadata": {"instance": 1, "cpu": 2, "gpu": 0, "memory": 4000}}\n'
    )
    started = time.monotonic()
    out = platform.eascmd("create", str(config))
    create_s = time.monotonic() - started
    lines = out.splitlines()
    assert lines[0].startswith("[RequestId]: ")
    assert f"| Internet Endpoint | {platform.url}/api/predict/triton_test" in out
    assert lines[6:8] == [
        "[OK] Service is now deploying",
        "[OK] Successfully synchronized resources",
    ]
    assert "[OK] Waiting [Total: 1, Pending: 1, Running: 0]" in lines
    assert lines[-2:] == [
        "[OK] Running [Total: 1, Pending: 0, Running: 1]",
        "[OK] Service is running",
    ]
    token = lines[4].split("|")[2].strip()
    endpoint = f"127.0.0.1:{platform.port}/api/predict/triton_test"

    body = seed_client(endpoint, token)
    assert body["model_name"] == "inception_graphdef" and body["model_version"] == "1"
    assert body["outputs"][0]["shape"] == [1, 1001]
    check_example_models(endpoint, {"Authorization": token})
    # EAS's prediction SDK in its default mode: it signs with the token, which the gateway
    # has from the control plane's route table
    sdk = PredictClient(f"127.0.0.1:{platform.port}", "triton_test/v2/models/add_sub/infer")
    sdk.set_token(token)
    sdk.init()
    try:
        data = [1.5, 2.0, -3.0, 4.25]
        tensors = [{"name": n, "shape": [4], "datatype": "FP32", "data": data}
                   for n in ("INPUT0", "INPUT1")]  # fmt: skip
        answer = json.loads(
            sdk.predict(StringRequest(json.dumps({"inputs": tensors}))).response_data
        )
        assert {o["name"]: o["data"] for o in answer["outputs"]}["OUTPUT0"] == [3.0, 4.0, -6.0, 8.5]
    finally:
        sdk.destroy()
    replica = platform.describe()["Replicas"][0]["endpoint"]
    check_example_models(replica.removeprefix("http://"))
    # the gRPC door: the printed address, the official client, the same token
    grpc_address = f"127.0.0.1:{platform.grpc_port}"
    assert f"gRPC (tritonclient.grpc) on {grpc_address}" in (platform.tmp / "up.log").read_text()
    grpc = grpcclient.InferenceServerClient(url=grpc_address)
    try:
        a = np.array([1.5, 2.0, -3.0, 4.25], dtype=np.float32)
        inputs = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        result: Any = grpc.infer("add_sub", inputs, headers={"authorization": f"Bearer {token}"})
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    finally:
        grpc.close()
    replica_log = platform.eascmd("logs", "triton_test", "--tail", "200")
    assert "Started HTTPService at" in replica_log, replica_log[-2000:]

    # scale to 2
    platform.eascmd("modify", "triton_test", "-Dmetadata.instance=2")
    assert platform.describe()["RunningInstance"] == 2

    # modify the params: rolling, predictions keep working throughout
    failures: list[str] = []
    successes: list[float] = []
    done = threading.Event()

    def traffic() -> None:
        while not done.is_set():
            try:
                seed_client(endpoint, token)
                successes.append(time.monotonic())
            except Exception as e:  # every failure is a finding
                failures.append(str(e))

    thread = threading.Thread(target=traffic)
    thread.start()
    platform.eascmd(
        "modify",
        "triton_test",
        "-Dprocessor_params=" + (f'["--model-repository={oss_model_repo}", "--log-verbose=1"]'),
    )
    done.set()
    thread.join()
    assert failures == [], failures[:5]
    assert len(successes) >= 5, successes  # predictions really ran through the rollout
    desc = platform.describe()
    assert desc["Status"] == "Running" and desc["ObservedGeneration"] == 3
    assert all(r["current"] for r in desc["Replicas"]) and len(desc["Replicas"]) == 2

    # stop → Stopped and no replica process; start → Running
    platform.eascmd("stop", "triton_test")
    platform.wait_for(lambda d: d["Status"] == "Stopped")
    assert (
        httpx.get(
            f"http://{endpoint}/v2/health/ready", headers={"Authorization": token}
        ).status_code
        == 503
    )
    platform.eascmd("start", "triton_test")
    platform.wait_for(lambda d: d["Status"] == "Running")
    platform.eascmd("modify", "triton_test", "-Dmetadata.instance=1")

    # kill the replica's process: it comes back
    victim = next(
        pid
        for pid in descendants(platform.proc.pid)  # type: ignore[union-attr]
        if "processor" in Path(f"/proc/{pid}/cmdline").read_text()
    )
    os.kill(victim, signal.SIGKILL)
    platform.wait_for(lambda d: d["Status"] != "Running", timeout=10)
    back_s = platform.wait_for(lambda d: d["Status"] == "Running")
    assert platform.describe()["Replicas"][0]["restarts"] == 1
    seed_client(endpoint, token)

    # restart the platform: no orphans, and the service comes back to its spec
    children = platform.stop()
    wait_until(lambda: not [p for p in children if is_alive(p)], 30, what="no orphans")
    platform.start()
    platform.wait_for(
        lambda d: d["Status"] == "Running" and d["Replicas"] and d["Replicas"][0]["restarts"] == 0
    )
    platform.wait_routable(endpoint, token)  # the gateway follows within a second
    seed_client(endpoint, token)

    # even a SIGKILLed platform leaves no replica behind
    assert platform.proc is not None
    children = descendants(platform.proc.pid)
    platform.proc.kill()
    platform.proc.wait()
    wait_until(lambda: not [p for p in children if is_alive(p)], 60, what="no orphans")
    platform.start()
    platform.wait_for(lambda d: d["Status"] == "Running")

    # delete → gone
    platform.eascmd("delete", "triton_test")
    platform.wait_for(lambda d: d.get("status") == 404)
    assert "No services." in platform.eascmd("list")
    # No log names the service token; the admin token only where `openeas up` shows it to
    # its user, once, on the first start (the console is that log here).
    admin = (platform.tmp / "data" / "admin_token").read_text().strip()
    logs = sorted(platform.tmp.rglob("*.log"))
    assert len(logs) >= 2, logs  # up.log and the replicas' logs
    for log in logs:
        lines = log.read_text(errors="replace").splitlines()
        assert not [line for line in lines if token in line], log
        shown = [line for line in lines if admin in line]
        if log.name == "up.log":
            assert len(shown) == 1 and "admin token (shown once" in shown[0], shown
        else:
            assert shown == [], log
    print(f"\ncreate→Running {create_s:.1f}s; killed replica back in {back_s:.1f}s")
