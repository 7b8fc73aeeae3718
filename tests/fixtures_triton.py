"""Real Triton for the suite (pytest plugin, listed in ``tests/conftest.py``).

``triton_server`` is one session-wide ``tritonserver`` (found by
``processors.triton.binary.locate``, the same lookup replicas use) serving ``examples/models``
on free loopback ports; the gateway and processor tests share it so the suite pays Triton's
start-up once. Helpers here are plain functions other tests import: ``free_port``,
``wait_ready``, ``descendants``/``is_alive`` (orphan checks) and ``check_example_models``
(inference on both example models with the official client, checked against numpy).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from processors.triton import binary

EXAMPLE_MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"
READY_TIMEOUT_S = 60.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(
    base_url: str,
    process: subprocess.Popen[bytes],
    log: Path,
    *,
    path: str = "/v2/health/ready",
    timeout: float = READY_TIMEOUT_S,
) -> None:
    """Poll ``base_url + path`` until 200; fail with the log's tail if the process exits or
    time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode} before ready:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(base_url + path, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"not ready after {timeout:.0f} s:\n{_tail(log)}")


def descendants(pid: int) -> list[int]:
    """Live (non-zombie) processes below ``pid``, children first, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command name: state, ppid, ...
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z":
            parents.setdefault(int(ppid), []).append(int(entry.name))
    found: list[int] = []
    queue = [pid]
    while queue:
        children = parents.get(queue.pop(0), [])
        found += children
        queue += children
    return found


def is_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@cache
def _inception() -> ModuleType:
    """The example inception model's module, for its numpy ``predict``; the python backend's
    utils module it imports only exists inside Triton, so a blank one stands in."""
    sys.modules.setdefault("triton_python_backend_utils", ModuleType("triton_python_backend_utils"))
    path = EXAMPLE_MODELS / "inception_graphdef" / "1" / "model.py"
    spec = importlib.util.spec_from_file_location("example_inception_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_example_models(url: str, headers: dict[str, str] | None = None) -> None:
    """Infer on ``add_sub`` and ``inception_graphdef`` through ``url`` (``host:port[/path]``,
    what ``tritonclient.http`` takes) and assert the numbers are right."""
    client = httpclient.InferenceServerClient(url=url)
    try:
        a = np.array([1.5, 2.0, -3.0, 4.25], dtype=np.float32)
        b = np.array([0.5, -1.0, 2.0, 8.0], dtype=np.float32)
        inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(a, binary_data=True)
        inputs[1].set_data_from_numpy(b, binary_data=False)
        result: Any = client.infer("add_sub", inputs, headers=headers)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)

        image = np.random.default_rng(7).random((1, 299, 299, 3), dtype=np.float32)
        picture = httpclient.InferInput("input", [1, 299, 299, 3], "FP32")
        picture.set_data_from_numpy(image, binary_data=True)
        softmax = "InceptionV3/Predictions/Softmax"
        wanted = [httpclient.InferRequestedOutput(softmax, binary_data=True)]
        result = client.infer("inception_graphdef", [picture], outputs=wanted, headers=headers)
        got = result.as_numpy(softmax)
        assert got.shape == (1, 1001)
        np.testing.assert_allclose(got, _inception().predict(image), rtol=1e-6)
    finally:
        client.close()


@dataclass(frozen=True)
class TritonServer:
    """A running tritonserver: ``http_url`` is what ``tritonclient.http`` takes."""

    http_port: int
    grpc_port: int
    metrics_port: int
    log: Path
    model_repository: Path

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.http_url}"


def launch_triton(
    log: Path, *extra: str, new_session: bool = False
) -> tuple[TritonServer, subprocess.Popen[bytes]]:
    """Start tritonserver on ``examples/models`` (plus ``extra`` flags) on free loopback
    ports and wait until it is ready."""
    server = binary.locate()
    triton = TritonServer(free_port(), free_port(), free_port(), log, EXAMPLE_MODELS)
    argv = [
        str(server.binary),
        f"--model-repository={EXAMPLE_MODELS}",
        *extra,
        f"--http-port={triton.http_port}",
        f"--grpc-port={triton.grpc_port}",
        f"--metrics-port={triton.metrics_port}",
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--metrics-address=127.0.0.1",
        *server.args,
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv,
            env=server.environ(os.environ),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=new_session,
        )
    wait_ready(triton.base_url, process, log)
    return triton, process


@pytest.fixture(scope="session")
def triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """One tritonserver on ``examples/models`` for the whole session."""
    triton, process = launch_triton(tmp_path_factory.mktemp("triton") / "tritonserver.log")
    try:
        yield triton
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
