"""The kubelet stand-in and the Service stand-in that the end-to-end outage tests stand on:
pods get a real replica process on their own address, turn Ready with it as ``podIP``,
serve through their preStop sleep once deleted, then go; a Service skips a dead backend."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import httpx
import pytest

from controlplane.runtime.kubernetes.client import DEPLOYMENT, KubeClient
from controlplane.runtime.kubernetes.manifests import TEMPLATE_HASH_LABEL
from controlplane.runtime.kubernetes.runtime import KubernetesRuntime
from controlplane.runtime.kubernetes.settings import KubernetesSettings
from testing.k8s_server import ApiStandIn
from testing.kubelet import Kubelet
from testing.service_proxy import ServiceProxy
from testing.waiting import wait_until, wait_until_async
from tests.kubernetes.conftest import Recorder, claimed
from tests.kubernetes.test_runtime import NAME, OBJECT, want


@pytest.fixture
def kubelet(k8s: ApiStandIn) -> Iterator[Kubelet]:
    node = Kubelet(k8s).start()
    yield node
    node.stop()


async def test_pods_run_real_replicas_until_their_prestop_has_passed(
    k8s: ApiStandIn, k8s_settings: KubernetesSettings, kubelet: Kubelet
) -> None:
    settings = k8s_settings.model_copy(update={"prestop_seconds": 1})
    runtime = await claimed(KubernetesRuntime(settings, Recorder()))
    try:
        await runtime.apply(want())

        async def serving() -> str | None:
            [replica] = (await runtime.observe(NAME)).replicas
            return replica.endpoint if replica.state == "Running" else None

        endpoint = await wait_until_async(serving, 30)
        [pod] = k8s.list("pods")
        answer = httpx.post(f"{endpoint}/v2/models/m/infer", content=b"{}").json()
        generation = pod["metadata"]["labels"][TEMPLATE_HASH_LABEL]
        assert answer == {
            "replica": pod["metadata"]["name"],
            "generation": generation,
            "model_name": "m",
            "received": 2,
        }

        KubeClient(settings).delete(DEPLOYMENT, OBJECT)  # its pods turn terminating
        deleted = time.monotonic()
        assert k8s.list("pods")[0]["metadata"].get("deletionTimestamp")
        assert httpx.get(f"{endpoint}/v2/health/ready").status_code == 200  # preStop: serving
        wait_until(lambda: not k8s.list("pods"), 30, what="the pod is gone")
        assert time.monotonic() - deleted >= 1.0
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{endpoint}/v2/health/ready")
        assert kubelet.finished == [pod["metadata"]["name"]]
    finally:
        await runtime.close()


def test_a_service_sends_connections_to_a_backend_that_accepts_them() -> None:
    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"hi")

        def log_message(self, *args: object) -> None:
            pass

    live = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    Thread(target=live.serve_forever, daemon=True).start()
    with socket.socket() as dead:  # bound, never listening: connections are refused
        dead.bind(("127.0.0.1", 0))
        backends = [dead.getsockname(), live.server_address]
        proxy = ServiceProxy([(str(h), int(p)) for h, p in backends]).start()
        try:
            for _ in range(4):  # whichever backend comes first
                assert httpx.get(proxy.url, headers={"Connection": "close"}).text == "hi"
        finally:
            proxy.stop()
            live.shutdown()
