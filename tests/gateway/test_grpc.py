"""gRPC through the gateway against real Triton, with the official ``tritonclient.grpc``
client unchanged: every tenant RPC (unary and the decoupled model's stream), every refusal
status, 1 MB outputs equal to the HTTP door's, service selection by token, metrics."""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import re
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from multiprocessing.pool import ThreadPool
from pathlib import Path
from typing import Any

import hpack
import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from contract.wire import GroupRoute, Route, RouteTable, token_digest
from gateway.grpc import h2wire as h2
from gateway.grpc.relay import ClientConn
from gateway.grpc.server import GrpcRunner, start_grpc
from testing.waiting import wait_until
from tests.fixtures_triton import TritonServer, free_port, launch_triton
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import SERVICE, TOKEN, Gateway, LoopThread, route, table

OTHER_TOKEN = "other-" + "y" * 26


def grpc_route(triton: TritonServer | None, **kw: Any) -> Route:
    """The harness's route with the replica's gRPC port published (none when ``triton`` is
    None)."""
    base = route([triton.base_url] if triton else [], **kw)
    grpc = [f"http://127.0.0.1:{triton.grpc_port}"] if triton else []
    return base.model_copy(update={"grpc_endpoints": grpc})


class Door:
    """A gateway with its gRPC door open, in the test loop thread."""

    def __init__(self, gw: Gateway, runner: GrpcRunner) -> None:
        self.gw = gw
        self.runner = runner

    def client(self) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(url=self.runner.address)

    def publish(self, new: RouteTable) -> None:
        self.gw.publish(new)

    def metrics(self) -> str:
        return self.gw.lt.call(lambda: self.gw.runner.gateway.render_metrics().decode())


@pytest.fixture
def open_door(make_gateway: GatewayFactory, lt: LoopThread) -> Iterator[Any]:
    opened: list[GrpcRunner] = []

    def factory(routes: RouteTable, **settings: Any) -> Door:
        gw = make_gateway(routes, **settings)
        runner = lt.run(start_grpc(gw.runner.gateway.grpc_door(), host="127.0.0.1", port=0))
        opened.append(runner)
        return Door(gw, runner)

    yield factory
    for runner in opened:
        lt.run(runner.close(grace_s=1.0))


@pytest.fixture
def door(open_door: Any, triton_server: TritonServer) -> Door:
    result: Door = open_door(table(grpc_route(triton_server)))
    return result


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def add_sub_inputs() -> tuple[
    list[grpcclient.InferInput], npt.NDArray[np.float32], npt.NDArray[np.float32]
]:
    a = np.array([1.5, 2.0, -3.0, 4.25], dtype=np.float32)
    b = np.array([0.5, -1.0, 2.0, 8.0], dtype=np.float32)
    inputs = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a, b


def status_of(call: Any) -> str:
    with pytest.raises(InferenceServerException) as e:
        call()
    status = e.value.status()
    assert isinstance(status, str)
    return status


@pytest.mark.slow  # starts Triton
def test_unary_rpcs(door: Door, triton_server: TritonServer) -> None:
    client = door.client()
    direct = grpcclient.InferenceServerClient(url=f"127.0.0.1:{triton_server.grpc_port}")
    try:
        for headers in (bearer(), {"authorization": TOKEN}):  # Bearer or EAS's bare token
            assert client.is_server_live(headers=headers)
            assert client.is_server_ready(headers=headers)
            assert client.is_model_ready("add_sub", headers=headers)
            inputs, a, b = add_sub_inputs()
            result: Any = client.infer("add_sub", inputs, headers=headers)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        meta: Any = client.get_server_metadata(headers=bearer(), as_json=True)
        assert meta == direct.get_server_metadata(as_json=True)
        model: Any = client.get_model_metadata("add_sub", headers=bearer(), as_json=True)
        assert model == direct.get_model_metadata("add_sub", as_json=True)
        config: Any = client.get_model_config("add_sub", headers=bearer(), as_json=True)
        assert config == direct.get_model_config("add_sub", as_json=True)
        stats: Any = client.get_inference_statistics("add_sub", headers=bearer(), as_json=True)
        assert stats["model_stats"][0]["name"] == "add_sub"
        # Triton's own answers pass unchanged: an unknown model is its NOT_FOUND... or its
        # INVALID_ARGUMENT, whichever it says directly.
        want = status_of(lambda: direct.get_model_metadata("nope"))
        assert status_of(lambda: client.get_model_metadata("nope", headers=bearer())) == want
    finally:
        client.close()
        direct.close()
    assert 'openeas_gateway_grpc_requests_total{service="svc",code="OK"}' in door.metrics()


@pytest.mark.slow  # starts Triton
def test_streaming_decoupled_model(door: Door) -> None:
    """ModelStreamInfer both ways: two requests on one stream, each answered three times."""
    client = door.client()
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(
        callback=lambda result, error: answers.put((result, error)), headers=bearer()
    )
    try:
        for n, data in enumerate(([1.0, 2.0], [3.0, 4.0, 5.0])):
            values = np.array(data, dtype=np.float32)
            tensor = grpcclient.InferInput("IN", [len(data)], "FP32")
            tensor.set_data_from_numpy(values)
            count = grpcclient.InferInput("COUNT", [1], "INT32")
            count.set_data_from_numpy(np.array([3], dtype=np.int32))
            client.async_stream_infer("repeat", [tensor, count], request_id=str(n))
            for i in range(3):
                result, error = answers.get(timeout=30)
                assert error is None
                np.testing.assert_array_equal(result.as_numpy("OUT"), values)
                assert result.as_numpy("INDEX").tolist() == [i]
                assert result.get_response().id == str(n)
    finally:
        client.stop_stream()
        client.close()
    # The stream held one place in the service's in-flight count, given back at its end.
    gateway = door.gw.runner.gateway
    in_flight = door.gw.lt.call(lambda: gateway.routes.services[SERVICE].in_flight)
    wait_until(lambda: in_flight.count == 0, 10, what="the stream leaves the in-flight count")
    assert in_flight.requests == 1


@pytest.mark.slow  # starts Triton
def test_one_mib_outputs_equal_http(door: Door, triton_server: TritonServer) -> None:
    payload = np.random.default_rng(3).integers(0, 256, 1 << 20, dtype=np.uint8)
    client = door.client()
    http = httpclient.InferenceServerClient(url=f"{door.gw.hostport}/api/predict/{SERVICE}")
    try:
        g = grpcclient.InferInput("INPUT0", [payload.size], "UINT8")
        g.set_data_from_numpy(payload)
        got: Any = client.infer("identity", [g], headers=bearer())
        h = httpclient.InferInput("INPUT0", [payload.size], "UINT8")
        h.set_data_from_numpy(payload, binary_data=True)
        want: Any = http.infer("identity", [h], headers={"Authorization": TOKEN})
        assert got.as_numpy("OUTPUT0").tobytes() == want.as_numpy("OUTPUT0").tobytes()
        assert got.as_numpy("OUTPUT0").tobytes() == payload.tobytes()
    finally:
        client.close()
        http.close()


@pytest.mark.slow  # starts Triton
def test_token_selects_the_service(open_door: Any, triton_server: TritonServer) -> None:
    """Two services behind one address: each token reaches its own (per metrics)."""
    other = grpc_route(triton_server, service="other", token=OTHER_TOKEN)
    door: Door = open_door(table(grpc_route(triton_server), other))
    client = door.client()
    try:
        assert client.is_server_ready(headers=bearer(OTHER_TOKEN))
        assert client.is_server_ready(headers=bearer(OTHER_TOKEN))
        assert client.is_server_ready(headers=bearer())
    finally:
        client.close()
    metrics = door.metrics()
    assert 'openeas_gateway_grpc_requests_total{service="other",code="OK"} 2' in metrics
    assert 'openeas_gateway_grpc_requests_total{service="svc",code="OK"} 1' in metrics
    # and the autoscaler's load report counts them as the HTTP door's
    touched = door.gw.lt.call(lambda: door.gw.runner.gateway.activity.drain())
    assert {name: f.take(1.0)[0] for name, f in touched.items()} == {"other": 2, "svc": 1}


ADMIN_CALLS = {
    "RepositoryIndex": lambda c, h: c.get_model_repository_index(headers=h),
    "RepositoryModelLoad": lambda c, h: c.load_model("add_sub", headers=h),
    "RepositoryModelUnload": lambda c, h: c.unload_model("add_sub", headers=h),
    "SystemSharedMemoryStatus": lambda c, h: c.get_system_shared_memory_status(headers=h),
    "SystemSharedMemoryRegister": lambda c, h: c.register_system_shared_memory(
        "r", "/k", 8, headers=h
    ),
    "SystemSharedMemoryUnregister": lambda c, h: c.unregister_system_shared_memory(headers=h),
    "CudaSharedMemoryStatus": lambda c, h: c.get_cuda_shared_memory_status(headers=h),
    "CudaSharedMemoryUnregister": lambda c, h: c.unregister_cuda_shared_memory(headers=h),
    "TraceSetting": lambda c, h: c.get_trace_settings(headers=h),
    "LogSettings": lambda c, h: c.get_log_settings(headers=h),
}


@pytest.mark.slow  # starts Triton
def test_refusals(door: Door) -> None:
    client = door.client()
    try:
        assert status_of(lambda: client.is_server_ready()) == "StatusCode.UNAUTHENTICATED"
        wrong = bearer("wrong-" + "z" * 26)
        assert status_of(lambda: client.is_server_ready(headers=wrong)) == (
            "StatusCode.UNAUTHENTICATED"
        )
        for name, call in ADMIN_CALLS.items():
            assert status_of(lambda call=call: call(client, bearer())) == (
                "StatusCode.PERMISSION_DENIED"
            ), name
            # The token is checked first, as on the HTTP door.
            assert status_of(lambda call=call: call(client, {})) == "StatusCode.UNAUTHENTICATED"
    finally:
        client.close()
    metrics = door.metrics()
    assert 'openeas_gateway_grpc_requests_total{service="",code="UNAUTHENTICATED"}' in metrics
    assert 'openeas_gateway_grpc_requests_total{service="svc",code="PERMISSION_DENIED"}' in metrics


@pytest.mark.slow  # starts Triton
def test_no_ready_replica_is_unavailable(door: Door) -> None:
    door.publish(table(grpc_route(None, status="Waiting"), version=2))
    client = door.client()
    try:
        assert status_of(lambda: client.is_server_ready(headers=bearer())) == (
            "StatusCode.UNAVAILABLE"
        )
    finally:
        client.close()


def test_a_replica_refusing_connections_is_unavailable(open_door: Any) -> None:
    closed = route([]).model_copy(update={"grpc_endpoints": [f"http://127.0.0.1:{free_port()}"]})
    door: Door = open_door(table(closed))
    client = door.client()
    try:
        assert status_of(lambda: client.is_server_ready(headers=bearer())) == (
            "StatusCode.UNAVAILABLE"
        )
    finally:
        client.close()
    gateway = door.gw.runner.gateway
    entry = door.gw.lt.call(lambda: gateway.routes.services[SERVICE])
    assert entry.grpc_endpoints[0].down_until > 0  # tried last for a moment


@pytest.mark.slow  # starts Triton
def test_limits_are_resource_exhausted(open_door: Any, triton_server: TritonServer) -> None:
    door: Door = open_door(table(grpc_route(triton_server, rate_limit=1)))
    client = door.client()
    try:
        assert client.is_server_ready(headers=bearer())
        assert status_of(lambda: client.is_server_ready(headers=bearer())) == (
            "StatusCode.RESOURCE_EXHAUSTED"
        )
    finally:
        client.close()


def test_route_timeout_is_deadline_exceeded(open_door: Any) -> None:
    """A replica that accepts the connection and never answers: the route's timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        stuck = route([], timeout_ms=300).model_copy(
            update={"grpc_endpoints": [f"http://127.0.0.1:{port}"]}
        )
        door: Door = open_door(table(stuck))
        client = door.client()
        try:
            with pytest.raises(InferenceServerException) as e:
                client.is_server_ready(headers=bearer())
            assert e.value.status() == "StatusCode.DEADLINE_EXCEEDED"
            assert "300 ms" in str(e.value.message())
        finally:
            client.close()


@pytest.mark.slow  # starts Triton
def test_authority_selects_the_service(open_door: Any, triton_server: TritonServer) -> None:
    """With OPENEAS_GATEWAY_DOMAIN set, ``<service>.<domain>`` names the service (EAS's
    per-service host names); its token must be that service's."""
    other = grpc_route(triton_server, service="other", token=OTHER_TOKEN)
    door: Door = open_door(table(grpc_route(triton_server), other), domain="example.com")

    def client(host: str) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(
            url=door.runner.address, channel_args=[("grpc.default_authority", host)]
        )

    svc, nope = client(f"svc.example.com:{door.runner.port}"), client("nope.example.com")
    try:
        assert svc.is_server_ready(headers=bearer())
        inputs, a, b = add_sub_inputs()
        result: Any = svc.infer("add_sub", inputs, headers=bearer())
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        # another service's token does not open this one, though it is a valid token
        wrong = lambda: svc.is_server_ready(headers=bearer(OTHER_TOKEN))  # noqa: E731
        assert status_of(wrong) == "StatusCode.UNAUTHENTICATED"
        assert status_of(lambda: nope.is_server_ready(headers=bearer())) == ("StatusCode.NOT_FOUND")
    finally:
        svc.close()
        nope.close()
    metrics = door.metrics()
    assert 'openeas_gateway_grpc_requests_total{service="svc",code="OK"} 2' in metrics
    assert 'openeas_gateway_grpc_requests_total{service="",code="NOT_FOUND"} 1' in metrics


@pytest.mark.slow  # starts Triton
def test_groups_split_and_open_as_on_http(open_door: Any, triton_server: TritonServer) -> None:
    """A service group on the gRPC door: its token alone, or ``<group>.<domain>``, reaches
    the member its weights pick (exactly, as on HTTP); a member's token opens the group;
    ``<group>.<member>.<domain>`` reaches one member with the group's token."""
    group_token = "group-token-" + "g" * 20

    def member(name: str, weight: int) -> Route:
        base = grpc_route(triton_server, service=name, token=f"token-of-{name}-" + "m" * 16)
        return base.model_copy(update={"group": "g", "weight": weight, "grouping": True})

    group = GroupRoute(group="g", token_sha256=token_digest(group_token), traffic_mode="customized")
    routes = RouteTable(version=1, routes=[member("a", 100), member("b", 300)], groups=[group])
    door: Door = open_door(routes, domain="example.com")

    def calls(host: str | None, token: str, n: int) -> dict[str, int]:
        args = [] if host is None else [("grpc.default_authority", host)]
        client = grpcclient.InferenceServerClient(url=door.runner.address, channel_args=args)
        before = served(door.metrics())
        try:
            for _ in range(n):
                assert client.is_server_ready(headers=bearer(token))
        finally:
            client.close()
        after = served(door.metrics())
        return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}

    assert calls(None, group_token, 8) == {"a": 2, "b": 6}  # by the group's token alone
    assert calls("g.example.com", group_token, 8) == {"a": 2, "b": 6}
    assert calls("g.example.com", "token-of-a-" + "m" * 16, 4) == {"a": 1, "b": 3}
    assert calls("g.a.example.com", group_token, 3) == {"a": 3}
    client = grpcclient.InferenceServerClient(
        url=door.runner.address, channel_args=[("grpc.default_authority", "x.a.example.com")]
    )
    try:
        wrong = bearer("wrong-" + "z" * 26)
        assert status_of(lambda: client.is_server_ready(headers=bearer(group_token))) == (
            "StatusCode.NOT_FOUND"  # a is not in group x
        )
    finally:
        client.close()
    client = grpcclient.InferenceServerClient(
        url=door.runner.address, channel_args=[("grpc.default_authority", "g.example.com")]
    )
    try:
        assert status_of(lambda: client.is_server_ready(headers=wrong)) == (
            "StatusCode.UNAUTHENTICATED"
        )
        # a group whose members take no group traffic has nobody to answer
        door.publish(RouteTable(version=2, routes=[member("a", 0), member("b", 0)], full=False))
        assert status_of(lambda: client.is_server_ready(headers=bearer(group_token))) == (
            "StatusCode.UNAVAILABLE"
        )
        # a rotated group token stops opening it, by host and by token alone
        rotated = GroupRoute(
            group="g", token_sha256=token_digest("rotated-" + "r" * 24), traffic_mode="customized"
        )
        door.publish(RouteTable(version=3, routes=[], groups=[rotated], full=False))
        assert status_of(lambda: client.is_server_ready(headers=bearer(group_token))) == (
            "StatusCode.UNAUTHENTICATED"
        )
    finally:
        client.close()
    bare = door.client()
    try:
        assert status_of(lambda: bare.is_server_ready(headers=bearer(group_token))) == (
            "StatusCode.UNAUTHENTICATED"
        )
    finally:
        bare.close()


def served(metrics: str) -> dict[str, int]:
    """OK calls per service in the gateway's gRPC metrics."""
    found = re.findall(r'grpc_requests_total\{service="(\w+)",code="OK"\} (\d+)', metrics)
    return {name: int(n) for name, n in found}


@pytest.mark.slow  # starts Triton
def test_message_over_the_body_limit_is_resource_exhausted(
    open_door: Any, triton_server: TritonServer
) -> None:
    door: Door = open_door(table(grpc_route(triton_server)), max_body_bytes=4096)
    client = door.client()
    try:
        small = grpcclient.InferInput("INPUT0", [1000], "UINT8")
        small.set_data_from_numpy(np.zeros(1000, dtype=np.uint8))
        assert client.infer("identity", [small], headers=bearer()) is not None
        big = grpcclient.InferInput("INPUT0", [8000], "UINT8")
        big.set_data_from_numpy(np.zeros(8000, dtype=np.uint8))
        call = lambda: client.infer("identity", [big], headers=bearer())  # noqa: E731
        assert status_of(call) == "StatusCode.RESOURCE_EXHAUSTED"
        assert client.is_server_ready(headers=bearer())  # the connection still serves
    finally:
        client.close()


@pytest.mark.slow  # starts Triton
def test_many_concurrent_calls_and_tensors_beyond_the_windows(door: Door) -> None:
    """64 calls at once on one connection, and 8 MiB each way (twice the 4 MiB stream
    windows: credit must flow back on both legs), all answered right."""
    client = door.client()
    answers: queue.Queue[Any] = queue.Queue()
    try:
        for i in range(64):
            x = np.full(4, float(i), dtype=np.float32)
            inputs = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
            inputs[0].set_data_from_numpy(x)
            inputs[1].set_data_from_numpy(x)
            client.async_infer(
                "add_sub",
                inputs,
                callback=lambda result, error, i=i: answers.put((i, result, error)),
                headers=bearer(),
            )
        for _ in range(64):
            i, result, error = answers.get(timeout=30)
            assert error is None
            assert result.as_numpy("OUTPUT0").tolist() == [2.0 * i] * 4
        payload = np.random.default_rng(8).integers(0, 256, 8 << 20, dtype=np.uint8)
        tensor = grpcclient.InferInput("INPUT0", [payload.size], "UINT8")
        tensor.set_data_from_numpy(payload)
        got: Any = client.infer("identity", [tensor], headers=bearer())
        assert got.as_numpy("OUTPUT0").tobytes() == payload.tobytes()
    finally:
        client.close()


def concurrent_add_sub(client: grpcclient.InferenceServerClient, n: int) -> None:
    """``n`` add_sub calls in flight at once on ``client``'s connection, all answered."""
    answers: queue.Queue[Any] = queue.Queue()
    inputs, a, b = add_sub_inputs()
    for _ in range(n):
        client.async_infer(
            "add_sub",
            inputs,
            callback=lambda result, error: answers.put((result, error)),
            headers=bearer(),
        )
    for _ in range(n):
        result, error = answers.get(timeout=30)
        assert error is None
        assert result.as_numpy("OUTPUT0").tolist() == (a + b).tolist()


@pytest.mark.parametrize("yield_at", [2, 0])
@pytest.mark.slow  # starts Triton
def test_a_busy_door_yields_the_cpu_and_a_lone_call_never_does(
    open_door: Any, triton_server: TritonServer, monkeypatch: pytest.MonkeyPatch, yield_at: int
) -> None:
    """With calls in flight the door gives up the CPU after its reads (so a replica on the
    same core answers several before the next read); one call at a time, or
    ``grpc_yield_at=0``, never does."""
    yields: list[int] = []
    monkeypatch.setattr("gateway.grpc.relay._sched_yield", lambda: yields.append(1))
    door = open_door(table(grpc_route(triton_server)), grpc_yield_at=yield_at)
    client = door.client()
    try:
        inputs, _, _ = add_sub_inputs()
        for _ in range(5):
            client.infer("add_sub", inputs, headers=bearer())
        assert yields == []
        concurrent_add_sub(client, 32)
    finally:
        client.close()
    assert bool(yields) == bool(yield_at)


@pytest.mark.slow  # starts Triton
def test_sustained_megabyte_calls_on_one_connection_all_complete(
    open_door: Any, tmp_path: Path
) -> None:
    """64 streams sending 1 MiB each for 3 s, as bytes (grpc.aio, so the load is the
    relay's), with the gateway's loop and its own Triton on one core (as bench/grpc.py
    runs them): the relay's writes to the replica back up, and it must keep reading the
    replica's answers meanwhile (not reading a peer that waits for us to read deadlocks
    both: calls ended DEADLINE_EXCEEDED)."""
    triton, process = launch_triton(tmp_path / "tritonserver.log")
    door: Door = open_door(table(grpc_route(triton)))
    try:
        subprocess.run(
            ["taskset", "-a", "-cp", "0", str(process.pid)], check=True, capture_output=True
        )
        door.gw.lt.call(lambda: os.sched_setaffinity(0, {0}))  # the loop's thread only
        _sustained_load(door)
    finally:
        door.gw.lt.call(lambda: os.sched_setaffinity(0, os.sched_getaffinity(os.getpid())))
        process.terminate()
        process.wait(30)


def _sustained_load(door: Door) -> None:
    import grpc
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="UINT8", shape=[1 << 20])
    request.raw_input_contents.append(bytes(1 << 20))
    body = request.SerializeToString()
    method = "/inference.GRPCInferenceService/ModelInfer"

    async def load() -> tuple[int, list[str]]:
        options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        async with grpc.aio.insecure_channel(door.runner.address, options=options) as channel:
            call = channel.unary_unary(method)
            done, failed = 0, []
            stop_at = time.monotonic() + 3

            async def worker() -> None:
                nonlocal done
                while time.monotonic() < stop_at:
                    try:
                        await call(body, metadata=(("authorization", TOKEN),), timeout=8)
                        done += 1
                    except grpc.aio.AioRpcError as e:
                        failed.append(str(e.code()))

            await asyncio.gather(*(worker() for _ in range(64)))
            return done, failed

    done, failed = asyncio.run(load())
    assert failed == [] and done > 64


@pytest.mark.slow  # starts Triton
def test_a_caller_breaking_http2_is_hung_up_on(door: Door) -> None:
    """Bytes that are not HTTP/2 end that connection only, with GOAWAY(PROTOCOL_ERROR)
    after the door's SETTINGS; the door serves the next caller."""
    goaway = b"\x00\x00\x08\x07\x00\x00\x00\x00\x00"  # the frame head, stream 0
    for sent in (
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        # the preface, then SETTINGS with a 3-byte payload (must be a multiple of 6)
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x03\x04\x00\x00\x00\x00\x00abc",
    ):
        with socket.create_connection((door.runner.host, door.runner.port), timeout=5) as raw:
            raw.sendall(sent)
            reply = b""
            while chunk := raw.recv(4096):
                reply += chunk
        assert reply[3] == 4  # SETTINGS first, as every HTTP/2 server does
        assert reply[-17:-8] == goaway and reply[-4:] == b"\x00\x00\x00\x01", reply
    client = door.client()
    try:
        assert client.is_server_ready(headers=bearer())
    finally:
        client.close()


# -- the door at the frame level: what grpc-core clients never do, others may -------------


class RawCaller:
    """An HTTP/2 connection to the door, frame by frame (h2wire encodes, hpack decodes)."""

    def __init__(self, door: Door) -> None:
        self.sock = socket.create_connection((door.runner.host, door.runner.port), timeout=5)
        self.sock.sendall(h2.PREFACE + h2.settings([]))
        self.buf = b""
        self.decoder = hpack.Decoder()

    def frame(self) -> tuple[int, int, int, bytes]:
        """The next frame: type, flags, stream, payload."""
        while len(self.buf) < 9 or len(self.buf) < 9 + int.from_bytes(self.buf[:3], "big"):
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("the door closed the connection")
            self.buf += chunk
        length, kind, flags, sid = h2.parse_head(self.buf, 0)
        payload, self.buf = self.buf[9 : 9 + length], self.buf[9 + length :]
        return kind, flags, sid, payload

    def call(self, sid: int, model: str, tensor: npt.NDArray[np.uint8]) -> None:
        from tritonclient.grpc import service_pb2

        request = service_pb2.ModelInferRequest(model_name=model)
        tensor_in = request.inputs.add(name="INPUT0", datatype="UINT8", shape=[tensor.size])
        assert tensor_in.name == "INPUT0"
        request.raw_input_contents.append(tensor.tobytes())
        body = request.SerializeToString()
        message = b"\0" + len(body).to_bytes(4, "big") + body
        path = "/inference.GRPCInferenceService/ModelInfer"
        fields = [(":method", "POST"), (":scheme", "http"), (":path", path),
                  (":authority", "door"), ("content-type", "application/grpc"),
                  ("te", "trailers"), ("authorization", f"Bearer {TOKEN}")]  # fmt: skip
        self.sock.sendall(h2.headers_frames(sid, h2.block(fields), end_stream=False))
        for at in range(0, len(message), h2.FRAME_MAX):  # the door's window: 4 MiB
            part = message[at : at + h2.FRAME_MAX]
            end = h2.END_STREAM if at + h2.FRAME_MAX >= len(message) else 0
            self.sock.sendall(h2.head(len(part), h2.DATA, end, sid) + part)

    def close(self) -> None:
        self.sock.close()


@pytest.mark.slow  # starts Triton
def test_a_caller_with_http2s_default_windows_gets_the_whole_answer(door: Door) -> None:
    """A caller that keeps HTTP/2's 64 KiB windows (grpc-go does) gets what fits at once,
    the rest after its WINDOW_UPDATE: a 100 KB answer must not wait for an update the
    caller has no reason to send."""
    tensor = np.arange(100_000, dtype=np.uint32).astype(np.uint8)
    caller = RawCaller(door)
    try:
        caller.call(1, "identity", tensor)
        data = b""
        while len(data) < h2.DEFAULT_WINDOW:  # before any WINDOW_UPDATE of ours
            kind, flags, sid, payload = caller.frame()
            if kind == h2.DATA and sid == 1:
                data += payload
        assert len(data) == h2.DEFAULT_WINDOW
        caller.sock.sendall(h2.window_update(0, 1 << 20) + h2.window_update(1, 1 << 20))
        trailers: dict[bytes, bytes] = {}
        while not trailers:
            kind, flags, sid, payload = caller.frame()
            if kind == h2.DATA and sid == 1:
                data += payload
            elif kind == h2.HEADERS and sid == 1 and flags & h2.END_STREAM:
                trailers = dict(caller.decoder.decode(payload, raw=True))
    finally:
        caller.close()
    from tritonclient.grpc import service_pb2

    assert trailers[b"grpc-status"] == b"0"
    answer = service_pb2.ModelInferResponse.FromString(data[5:])
    assert answer.raw_output_contents[0] == tensor.tobytes()


@pytest.mark.slow  # starts Triton
def test_a_head_with_a_pseudo_header_twice_is_refused_not_forwarded(door: Door) -> None:
    """Two ``:path`` fields, an admin RPC first: the door would check one and a replica
    might run the other, so the call ends INVALID_ARGUMENT at the door (RFC 9113 §8.3)."""
    caller = RawCaller(door)
    try:
        admin = "/inference.GRPCInferenceService/RepositoryModelUnload"
        infer = "/inference.GRPCInferenceService/ModelInfer"
        fields = [
            (":path", admin),
            (":method", "POST"),
            (":scheme", "http"),
            (":path", infer),
            ("content-type", "application/grpc"),
            ("authorization", f"Bearer {TOKEN}"),
        ]
        caller.sock.sendall(h2.headers_frames(1, h2.block(fields), end_stream=True))
        trailers: dict[bytes, bytes] = {}
        while not trailers:
            kind, flags, sid, payload = caller.frame()
            if kind == h2.HEADERS and sid == 1 and flags & h2.END_STREAM:
                trailers = dict(caller.decoder.decode(payload, raw=True))
    finally:
        caller.close()
    assert trailers[b"grpc-status"] == b"3"  # INVALID_ARGUMENT
    assert (
        b"sent%20twice" in trailers[b"grpc-message"] or b"sent twice" in trailers[b"grpc-message"]
    )
    client = door.client()
    try:  # the model is still there: the admin RPC never reached Triton
        assert client.is_model_ready("add_sub", headers=bearer())
    finally:
        client.close()


def goaway_code(caller: RawCaller) -> int:
    """Frames until the door's GOAWAY; its error code."""
    while True:
        kind, _, _, payload = caller.frame()
        if kind == h2.GOAWAY:
            return int.from_bytes(payload[4:8], "big")


def test_a_caller_ignoring_the_limits_is_hung_up_on(open_door: Any) -> None:
    """The door advertises 256 streams and 64 KiB header lists; a header block that never
    ends, or DATA past the stream window (here to a replica that reads nothing, so nothing
    is credited back), ends the connection instead of filling the gateway's memory; so do
    a zero WINDOW_UPDATE and DATA after END_STREAM (RFC 9113 §6.9, §5.1)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        stuck = route([], timeout_ms=30_000).model_copy(
            update={"grpc_endpoints": [f"http://127.0.0.1:{silent.getsockname()[1]}"]}
        )
        door: Door = open_door(table(stuck))
        caller = RawCaller(door)
        try:
            kind, _, _, payload = caller.frame()
            assert kind == h2.SETTINGS and (h2.MAX_CONCURRENT_STREAMS, 256) in (
                h2.parse_settings(payload)
            )
            block = h2.block([(":method", "POST"), ("x-pad", "p" * 16_000)])
            caller.sock.sendall(h2.head(len(block), h2.HEADERS, 0, 1) + block)
            for _ in range(5):  # 80 KB of one header block
                caller.sock.sendall(h2.head(len(block), h2.CONTINUATION, 0, 1) + block)
            assert goaway_code(caller) == h2.PROTOCOL_ERROR
        finally:
            caller.close()
        caller = RawCaller(door)
        try:
            big = np.zeros(5 << 20, dtype=np.uint8)  # past the 4 MiB stream window
            with contextlib.suppress(OSError):  # the door may hang up mid-send
                caller.call(1, "identity", big)
            assert goaway_code(caller) == h2.PROTOCOL_ERROR
        finally:
            caller.close()
        for breach in (
            h2.window_update(0, 0),  # a zero increment
            h2.head(1, h2.DATA, 0, 1) + b"x",  # DATA on stream 1 after its END_STREAM
        ):
            caller = RawCaller(door)
            try:
                caller.call(1, "identity", np.zeros(8, dtype=np.uint8))  # held: stuck replica
                caller.sock.sendall(breach)
                assert goaway_code(caller) == h2.PROTOCOL_ERROR
            finally:
                caller.close()


def most_unsent(clients: Iterable[ClientConn]) -> int:
    """The most bytes any caller's connection holds unsent (on the door's loop)."""
    sizes = []
    for client in clients:
        assert client.transport is not None  # connected: made when the caller connected
        sizes.append(client.transport.get_write_buffer_size())
    return max(sizes)


@pytest.mark.slow  # starts Triton
def test_a_caller_that_does_not_read_is_not_read_either(door: Door) -> None:
    """PINGs sent by a caller that never reads the answers: the door stops reading it once
    its answers back up, so they wait in the caller's socket, not in gateway memory."""
    caller = RawCaller(door)
    caller.sock.settimeout(2)
    pings = (h2.head(8, h2.PING, 0, 0) + b"12345678") * 100_000  # 1.7 MB a batch
    try:
        with contextlib.suppress(TimeoutError):  # the door stopped reading: send blocks
            for _ in range(40):
                caller.sock.sendall(pings)
        clients = door.gw.lt.call(lambda: list(door.runner.door.relay.clients))
        buffered = door.gw.lt.call(lambda: most_unsent(clients))
        assert buffered < 4 << 20
    finally:
        caller.close()


class LimitedReplica:
    """A gRPC replica that takes two streams at once per connection (its
    SETTINGS_MAX_CONCURRENT_STREAMS, as Go's HTTP/2 servers advertise 250) and answers
    ServerReady after a pause; it counts the calls it runs at once and the connections."""

    def __init__(self) -> None:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        import grpc

        self.lock = threading.Lock()
        self.running = self.most = 0
        self.peers: set[str] = set()

        def ready(request: bytes, context: Any) -> bytes:
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
                self.peers.add(context.peer())
            time.sleep(0.3)
            with self.lock:
                self.running -= 1
            return b"\x08\x01"  # ServerReadyResponse(ready=True)

        handler = grpc.method_handlers_generic_handler(
            "inference.GRPCInferenceService",
            {"ServerReady": grpc.unary_unary_rpc_method_handler(ready)},
        )
        self.server = grpc.server(
            ThreadPoolExecutor(max_workers=16), options=[("grpc.max_concurrent_streams", 2)]
        )
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()


def test_a_replica_taking_few_streams_at_once_gets_no_more_on_a_connection(
    open_door: Any,
) -> None:
    replica = LimitedReplica()
    try:
        limited = route([]).model_copy(
            update={"grpc_endpoints": [f"http://127.0.0.1:{replica.port}"]}
        )
        door: Door = open_door(table(limited))
        clients = [door.client() for _ in range(6)]
        try:
            assert clients[0].is_server_ready(headers=bearer())  # the replica's SETTINGS came
            with ThreadPool(6) as pool:
                ready = pool.map(lambda c: c.is_server_ready(headers=bearer()), clients)
            assert ready == [True] * 6
        finally:
            for client in clients:
                client.close()
        # Six calls at once ran side by side on three connections, two streams each.
        assert replica.most == 6 and len(replica.peers) >= 3
    finally:
        replica.server.stop(None)
