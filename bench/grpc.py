"""Benchmark of the gateway's gRPC door against direct Triton gRPC, in one run.

Run by hand (``python bench/grpc.py``) for the figures quoted in the gRPC closing note. It
starts ``tritonserver`` on ``examples/models`` and the gateway (``--serve-gateway``: a static
route to that Triton, gRPC door open), both pinned to ``--server-cpu``, the load on
``--client-cpu``, so the gateway's cost shows as throughput Triton loses. For ``add_sub``
(two 16-byte inputs) and ``identity`` (a 1 MiB input echoed back) it prints:

1. sequential latency p50/p95 with the official ``tritonclient.grpc`` client, and the p50
   the gateway adds (target: at most 0.3 ms for the small model);
2. throughput of ``ModelInfer`` at 1, 8 and 64 concurrent calls (HTTP/2 streams on one
   connection; a grpc.aio client sending one pre-encoded request as bytes, so the client's
   own cost stays small), as calls/s and as the ratio gateway/direct (target: 0.8 at 64).

Throughput points run ``--repeat`` interleaved rounds (direct, gateway, direct, …) and
report the median. ``--base DIR`` adds another checkout's gateway (its own
``bench/grpc.py --serve-gateway``, same pinning) as a third target, for before/after
figures in one run. ``--floor`` adds a blind TCP forwarder written on the same event loop
(uvloop), pinned the same way: what any Python relay sharing the core with Triton costs at
least (its 1 MiB calls are bound by the kernel's copies through loopback, not by Python).
Every call must succeed; a run with failures says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import secrets
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder comes first on sys.path, where this very file would
# shadow the grpc package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
SERVICE = "bench"
METHOD = "/inference.GRPCInferenceService/ModelInfer"


def _bench_module(name: str, file: str) -> ModuleType:
    """A sibling benchmark loaded by path under ``name`` (this folder is off sys.path)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# bench/gateway.py's process helpers (free ports, start/stop, pinning, percentiles); it
# imports bench/builds.py as ``builds`` and bench/deploy.py as ``deploy``, which the
# repository's deploy/ folder would shadow.
_bench_module("builds", "builds.py")
_bench_module("deploy", "deploy.py")
hb = _bench_module("bench_gateway", "gateway.py")


# --- workloads -------------------------------------------------------------------------


def inputs_for(model: str) -> list[Any]:
    import numpy as np
    import tritonclient.grpc as grpcclient

    if model == "add_sub":
        tensors = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        tensors[0].set_data_from_numpy(np.arange(4, dtype=np.float32))
        tensors[1].set_data_from_numpy(np.ones(4, dtype=np.float32))
        return tensors
    payload = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8)
    tensor = grpcclient.InferInput("INPUT0", [payload.size], "UINT8")
    tensor.set_data_from_numpy(payload)
    return [tensor]


def encoded_request(model: str) -> bytes:
    """One ModelInferRequest, serialized once (what tritonclient.grpc would send)."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model)
    for tensor in inputs_for(model):
        request.inputs.extend([tensor._get_tensor()])
        request.raw_input_contents.extend([tensor._get_content()])
    return bytes(request.SerializeToString())


def sequential_latency(address: str, model: str, token: str | None, n: int) -> list[float]:
    """Per-call latency (ms) of ``n`` infers with tritonclient.grpc (after a warm-up)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url=address)
    inputs = inputs_for(model)
    headers = {"authorization": f"Bearer {token}"} if token else None
    samples = []
    try:
        for i in range(n + 20):
            t = time.perf_counter()
            client.infer(model, inputs, headers=headers)
            if i >= 20:
                samples.append((time.perf_counter() - t) * 1000.0)
    finally:
        client.close()
    return samples


async def _throughput(
    address: str, body: bytes, token: str | None, concurrency: int, seconds: float
) -> tuple[float, int]:
    import grpc

    metadata = (("authorization", f"Bearer {token}"),) if token else None
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        call = channel.unary_unary(METHOD)  # bytes in, bytes out
        await call(body, metadata=metadata)  # connected and warm
        done = failed = 0
        stop_at = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done, failed
            while time.perf_counter() < stop_at:
                try:
                    await call(body, metadata=metadata)
                    done += 1
                except grpc.aio.AioRpcError:
                    failed += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done / (time.perf_counter() - started), failed


def throughput(
    address: str, body: bytes, token: str | None, concurrency: int, seconds: float
) -> tuple[float, int]:
    """Calls/s over ``seconds`` with ``concurrency`` calls in flight, and failures."""
    return asyncio.run(_throughput(address, body, token, concurrency, seconds))


# --- the gateway under test, as its own process -----------------------------------------


def serve_gateway(grpc_port: int, http_upstream: str, grpc_upstream: str, token: str) -> None:
    """``--serve-gateway``: a gateway with one static route and its gRPC door open."""
    sys.path.insert(0, str(ROOT))
    from contract.wire import Route, RouteTable, token_digest
    from gateway.app import start_gateway
    from gateway.cli import run
    from gateway.grpc.server import start_grpc
    from gateway.route_source import StaticRouteSource
    from gateway.settings import GatewaySettings

    route = Route(
        service=SERVICE,
        token_sha256=token_digest(token),
        endpoints=[http_upstream],
        grpc_endpoints=[grpc_upstream],
        timeout_ms=60_000,
        status="Running",
    )

    async def main() -> None:
        settings = GatewaySettings(report_interval_s=0)
        runner = await start_gateway(
            settings, StaticRouteSource(RouteTable(version=1, routes=[route])), port=0
        )
        door = await start_grpc(runner.gateway.grpc_door(), host="127.0.0.1", port=grpc_port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        await stop.wait()
        await door.close(0)
        await runner.close(0)

    run(main())


# --- orchestration ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per throughput run")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs per point")
    ap.add_argument("--concurrency", default="1,8,64")
    ap.add_argument("--sequential-small", type=int, default=1000)
    ap.add_argument("--sequential-large", type=int, default=100)
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--models", default="add_sub,identity")
    ap.add_argument("--base", type=Path, help="another checkout's gateway, measured beside")
    ap.add_argument(
        "--floor",
        action="store_true",
        help="also measure a blind TCP forwarder on the same event loop (the relay's floor)",
    )
    ap.add_argument("--serve-floor", nargs=2, type=int, metavar=("PORT", "UPSTREAM_PORT"))
    ap.add_argument(
        "--serve-gateway", nargs=4, metavar=("GRPC_PORT", "HTTP_UP", "GRPC_UP", "TOKEN")
    )
    args = ap.parse_args(argv)
    if args.serve_gateway:
        port, http_up, grpc_up, token = args.serve_gateway
        serve_gateway(int(port), http_up, grpc_up, token)
        return 0
    if args.serve_floor:
        hb.serve_floor(*args.serve_floor)
        return 0
    sys.path.insert(0, str(ROOT))
    from processors.triton import binary

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    os.sched_setaffinity(0, {args.client_cpu})
    token = secrets.token_hex(16)
    server = binary.locate()
    http_port, grpc_port, gateway_port = hb.free_port(), hb.free_port(), hb.free_port()
    triton_argv = [
        str(server.binary),
        f"--model-repository={ROOT / 'examples' / 'models'}",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={hb.free_port()}",
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--allow-metrics=false",
        "--log-verbose=0",
        *server.args,
    ]

    def gateway_argv(script: Path, port: int) -> list[str]:
        upstreams = [f"http://127.0.0.1:{http_port}", f"http://127.0.0.1:{grpc_port}"]
        return [sys.executable, str(script), "--serve-gateway", str(port), *upstreams, token]

    gateways = {"gateway": (Path(__file__), gateway_port)}
    if args.base is not None:
        gateways["base"] = (args.base.resolve() / "bench" / "grpc.py", hb.free_port())
    targets = {"direct": (f"127.0.0.1:{grpc_port}", None)}
    targets |= {name: (f"127.0.0.1:{port}", token) for name, (_, port) in gateways.items()}
    floor_port = hb.free_port()
    if args.floor:
        targets["floor"] = (f"127.0.0.1:{floor_port}", None)
    with tempfile.TemporaryDirectory(prefix="openeas-bench-grpc-") as tmpdir:
        tmp = Path(tmpdir)
        triton = hb.process(
            hb.pinned(args.server_cpu, triton_argv),
            tmp / "triton.log",
            env=server.environ(os.environ),
        )
        with triton as triton_proc:
            hb.wait_http(f"http://127.0.0.1:{http_port}/v2/health/ready", triton_proc)
            with contextlib.ExitStack() as running:
                for name, (script, port) in gateways.items():
                    argv = hb.pinned(args.server_cpu, gateway_argv(script, port))
                    running.enter_context(hb.process(argv, tmp / f"{name}.log"))
                if args.floor:
                    argv = [sys.executable, __file__, "--serve-floor", str(floor_port)]
                    argv = hb.pinned(args.server_cpu, [*argv, str(grpc_port)])
                    running.enter_context(hb.process(argv, tmp / "floor.log"))
                for name in [*gateways, *(["floor"] if args.floor else [])]:
                    ready(targets[name][0], token, tmp / f"{name}.log")
                report(args, targets)
    return 0


def ready(address: str, token: str, log: Path) -> None:
    """Until the gateway at ``address`` answers a call (its log shown if it never does)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            sequential_latency(address, "add_sub", token, 0)
            return
        except Exception:
            if time.monotonic() > deadline:
                print(log.read_text()[-2000:], file=sys.stderr)
                raise
            time.sleep(0.2)


def report(args: argparse.Namespace, targets: dict[str, tuple[str, str | None]]) -> None:
    """``targets``: name → (address, token); "direct" first, the others as ratios to it."""
    models = args.models.split(",")
    others = [name for name in targets if name != "direct"]
    print(f"# gRPC: direct Triton vs the gateway's door (server cpu {args.server_cpu})")
    print("\n## sequential latency, tritonclient.grpc (ms)")
    print(f"{'model':<10} {'target':<8} {'p50':>8} {'p95':>8} {'added p50':>10}")
    for model in models:
        n = args.sequential_small if model == "add_sub" else args.sequential_large
        samples = {name: sequential_latency(a, model, tok, n) for name, (a, tok) in targets.items()}
        d50 = statistics.median(samples["direct"])
        for name, got in samples.items():
            p50 = statistics.median(got)
            added = f"{p50 - d50:10.3f}" if name != "direct" else ""
            print(f"{model:<10} {name:<8} {p50:8.3f} {hb.pct(got, 95):8.3f} {added}")
    print("\n## throughput, ModelInfer calls/s (median of interleaved runs)")
    columns = "".join(f" {name:>9} {'ratio':>7}" for name in others)
    print(f"{'model':<10} {'streams':>7} {'direct':>9}{columns}")
    failures = 0
    for model in models:
        body = encoded_request(model)
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            runs: dict[str, list[float]] = {name: [] for name in targets}
            for _ in range(args.repeat):
                for name, (address, tok) in targets.items():
                    rate, failed = throughput(address, body, tok, concurrency, args.duration)
                    runs[name].append(rate)
                    failures += failed
            rates = {name: statistics.median(got) for name, got in runs.items()}
            d = rates["direct"]
            cells = "".join(f" {rates[n]:9.0f} {hb.ratio(rates[n], d):>7}" for n in others)
            print(f"{model:<10} {concurrency:>7} {d:9.0f}{cells}")
    print(f"\nfailed calls: {failures}" if failures else "\nevery call succeeded")


if __name__ == "__main__":
    sys.exit(main())
