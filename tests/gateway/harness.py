"""Test scaffolding for the gateway: an event loop in a thread (so tests, and the official
``tritonclient``, stay synchronous), a recording echo upstream, and a fake control plane
serving ``ROUTES_PATH`` the way the contract in ``contract.wire`` describes.

The echo upstream is an aiohttp server with a few misbehaviours on purpose (slow, broken
mid-body, endless stream, gzip body); it records every request it receives so tests can
assert on exactly what crossed the gateway. It does not try to be Triton.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import uvloop
from aiohttp import web

from contract.wire import (
    ROUTES_PATH,
    SIGNALS_PATH,
    WAKE_PATH,
    LoadReport,
    Route,
    RouteTable,
    WakeRequest,
    token_digest,
)
from gateway.app import GatewayRunner, start_gateway
from gateway.route_source import RouteSource, StaticRouteSource
from gateway.settings import GatewaySettings
from gateway.workers import WorkerPeers

T = TypeVar("T")

TOKEN = "tok-" + "x" * 28
SERVICE = "svc"


# The event loops the gateway's transports are tested on: asyncio's and uvloop's (its own).
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


class LoopThread:
    """An asyncio loop running in a daemon thread."""

    def __init__(
        self, new_loop: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    ) -> None:
        self.loop = new_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], T], timeout: float = 10.0) -> T:
        async def wrapper() -> T:
            return fn()

        return self.run(wrapper(), timeout)

    def close(self) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run(cancel_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def route(
    endpoints: list[str],
    *,
    service: str = SERVICE,
    token: str = TOKEN,
    timeout_ms: int = 10_000,
    rate_limit: int | None = None,
    max_queue_size: int | None = None,
    status: str = "Running",
    wakeable: bool = False,
) -> Route:
    return Route(
        service=service,
        token_sha256=token_digest(token),
        token=token,  # as the control plane sends it: the key of signed calls
        endpoints=endpoints,
        timeout_ms=timeout_ms,
        rate_limit=rate_limit,
        max_queue_size=max_queue_size,
        status=status,
        wakeable=wakeable,
    )


def table(*routes: Route, version: int = 1) -> RouteTable:
    return RouteTable(version=version, routes=list(routes))


@dataclass
class Gateway:
    """A gateway started in a :class:`LoopThread`."""

    lt: LoopThread
    runner: GatewayRunner
    source: RouteSource

    @property
    def port(self) -> int:
        return self.runner.port

    @property
    def hostport(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.hostport}"

    def publish(self, new: RouteTable) -> None:
        assert isinstance(self.source, StaticRouteSource)
        source = self.source
        self.lt.call(lambda: source.publish(new))

    def close(self) -> None:
        self.lt.run(self.runner.close(grace_s=1.0))


def start(
    lt: LoopThread,
    source: RouteSource,
    *,
    fallback_upstream: str | None = None,
    wait_routes: bool = True,
    peers: WorkerPeers | None = None,
    **settings: Any,
) -> Gateway:
    async def go() -> GatewayRunner:
        runner = await start_gateway(
            GatewaySettings(**settings),
            source,
            host="127.0.0.1",
            port=0,
            fallback_upstream=fallback_upstream,
            peers=peers,
        )
        if wait_routes:
            await runner.gateway.wait_for_routes(10)
        return runner

    return Gateway(lt, lt.run(go()), source)


# --- echo upstream -----------------------------------------------------------------------


@dataclass
class Seen:
    method: str
    path_qs: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def names(self) -> set[str]:
        return {k.lower() for k, _ in self.headers}


@dataclass
class Echo:
    """The recording upstream (see the module docstring for its paths)."""

    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    streamed: int = 0  # bytes /big has written so far
    hold_started: asyncio.Event | None = None
    hold_cancelled: threading.Event = field(default_factory=threading.Event)
    runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers]
        self.seen.append(Seen(request.method, request.raw_path, headers, body))
        path = request.path
        if path.startswith("/slow"):
            await asyncio.sleep(float(request.query.get("s", "1")))
        if path.startswith("/hold"):
            assert self.hold_started is not None
            self.hold_started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.hold_cancelled.set()
                raise
        if path.startswith("/gzip"):
            data = gzip.compress(b"compressed payload " * 100)
            return web.Response(
                body=data,
                headers={"Content-Encoding": "gzip", "Content-Type": "application/x-test"},
            )
        if path.startswith("/big"):
            mib = int(request.query.get("mib", "1"))
            resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
            resp.content_length = mib * 1024 * 1024
            await resp.prepare(request)
            chunk = b"\xab" * 65536
            for _ in range(mib * 16):
                await resp.write(chunk)
                self.streamed += len(chunk)
            await resp.write_eof()
            return resp
        if path.startswith("/chunked"):
            resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for i in range(5):
                await resp.write(f"part {i};".encode())
                await asyncio.sleep(0.01)
            await resp.write_eof()
            return resp
        if path.startswith("/break-before"):
            assert request.transport is not None
            request.transport.close()
            await asyncio.sleep(0.1)
            return web.Response()
        if path.startswith("/break-mid"):
            resp = web.StreamResponse()
            resp.content_length = 1000
            await resp.prepare(request)
            await resp.write(b"x" * 10)
            await asyncio.sleep(0.05)
            assert request.transport is not None
            request.transport.close()
            return resp
        if path.startswith("/status/"):
            return web.Response(status=int(path.rsplit("/", 1)[1]))
        return web.Response(
            body=json.dumps(
                {
                    "method": request.method,
                    "path_qs": request.raw_path,
                    "body_sha256": hashlib.sha256(body).hexdigest(),
                    "body_len": len(body),
                }
            ).encode(),
            content_type="application/json",
            headers={"Connection": "keep-alive, X-Hop", "X-Hop": "secret", "Keep-Alive": "x"},
        )

    async def start(self) -> None:
        self.hold_started = asyncio.Event()
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, auto_decompress=False
        )
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


# --- fake control plane --------------------------------------------------------------------


class FakeControlPlane:
    """Serves ``GET ROUTES_PATH?after=&wait=`` per the wire contract: 200 + table at once
    when its version is newer than ``after``, else holds up to ``wait`` and answers 204 (a
    whole table in pages when asked with ``page_size``, the next by ``page``);
    records the load reports POSTed to ``SIGNALS_PATH``. Requires
    ``Authorization: Bearer <admin token>``. ``POST WAKE_PATH`` records the wake-up and
    calls ``on_wake`` (in the loop thread), which answers with a status."""

    def __init__(self, admin_token: str, initial: RouteTable, port: int = 0) -> None:
        self.admin_token = admin_token
        self.table = initial
        self.port = port
        self.changed = asyncio.Event()
        self.polls: list[tuple[int, float]] = []
        self.reports: list[LoadReport] = []  # load reports received, in order
        self.wakes: list[str] = []
        self.published: dict[int, RouteTable] = {}  # whole tables sent in pages, by version
        self.pages: list[str] = []  # the pages asked for after a first
        self.on_wake: Callable[[str], int] = lambda _: 200
        self.runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def publish(self, new: RouteTable) -> None:
        """Call in the loop thread."""
        self.table = new
        self.changed.set()
        self.changed = asyncio.Event()

    async def routes(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.admin_token}":
            return web.Response(status=401)
        after = int(request.query["after"])
        wait = float(request.query["wait"])
        self.polls.append((after, wait))
        page = request.query.get("page")
        if page is not None:  # "<version>.<index of its first route>", as this fake writes
            version, start = map(int, page.split("."))
            self.pages.append(page)
            return self._page(self.published[version], start, int(request.query["page_size"]))
        if self.table.version <= after:
            try:
                await asyncio.wait_for(self.changed.wait(), wait)
            except TimeoutError:
                return web.Response(status=204)
        if self.table.full and "page_size" in request.query:
            return self._page(self.table, 0, int(request.query["page_size"]))
        return web.Response(body=self.table.model_dump_json(), content_type="application/json")

    def _page(self, whole: RouteTable, start: int, size: int) -> web.Response:
        """A page of a whole table, per the wire contract (groups with the first page)."""
        self.published[whole.version] = whole
        end = start + size
        page = whole.model_copy(
            update={
                "routes": whole.routes[start:end],
                "groups": whole.groups if start == 0 else [],
                "continued": start > 0,
                "next_page": f"{whole.version}.{end}" if end < len(whole.routes) else None,
            }
        )
        return web.Response(body=page.model_dump_json(), content_type="application/json")

    async def signals(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.admin_token}":
            return web.Response(status=401)
        self.reports.append(LoadReport.model_validate_json(await request.read()))
        return web.Response(status=204)

    async def wake(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.admin_token}":
            return web.Response(status=401)
        service = WakeRequest.model_validate_json(await request.read()).service
        self.wakes.append(service)
        status = self.on_wake(service)
        detail = {"detail": f"service {service!r} has no autoscaler with min 0"}
        answer = {"service": service, "instances": 1} if status == 200 else detail
        return web.json_response(answer, status=status)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get(ROUTES_PATH, self.routes)
        app.router.add_post(SIGNALS_PATH, self.signals)
        app.router.add_post(WAKE_PATH, self.wake)
        self.runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


# --- raw HTTP ------------------------------------------------------------------------------


def post_head(length: int) -> bytes:
    """The head of an infer call to ``SERVICE`` with a body of ``length`` bytes, as a client
    sends it (and repeats it, byte for byte)."""
    return (
        f"POST /api/predict/{SERVICE}/v2/models/m/infer HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: {TOKEN}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def raw_exchange(
    port: int, data: bytes, *, timeout: float = 10.0, read_until_close: bool = True
) -> bytes:
    """Send ``data`` on a fresh connection and return everything read until the server
    closes (or ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            out += chunk
            if not read_until_close and b"\r\n\r\n" in out:
                break
        return out


def dead_port() -> int:
    """A loopback port nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
