"""The gateway: request dispatch, lifecycle and the embeddable entry point.

``openeas gateway`` (:mod:`gateway.cli`) and ``openeas up`` both call
:func:`start_gateway`. It runs in the caller's event loop (on :mod:`gateway.http.server`'s
HTTP/1.1 protocol, not a web framework: see there why), so ``openeas up`` can run it beside
uvicorn and pass ``fallback_upstream`` to put the control-plane API behind the same port.

Paths: ``/api/predict/<service>/…`` → a replica; ``settings.metrics_path`` (``/metrics``)
and ``settings.health_path`` (``/gateway/healthz``) are the gateway's own; anything else
goes to ``fallback_upstream`` when set, else 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from contract.wire import GroupRoute, RouteTable
from gateway import snapshot
from gateway.admission import Admission
from gateway.grpc.server import GrpcDoor
from gateway.http.forwarding import FallbackProxy
from gateway.http.listener import HttpServer
from gateway.http.pool import UpstreamPool
from gateway.http.proxy import PredictProxy
from gateway.http.router import Router
from gateway.http.server import Request
from gateway.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from gateway.metrics import GatewayMetrics
from gateway.queue.consumer import Consumers
from gateway.queue.door import QueueDoor
from gateway.queue.streams import Streams
from gateway.reporter import LoadReporter
from gateway.route_source import (
    PAGE_SIZE,
    ControlPlaneRouteSource,
    Health,
    RouteSource,
    iso_time,
)
from gateway.routing.balancer import EndpointPool
from gateway.routing.limits import Activity
from gateway.routing.route_table import RouteChange, RouteState, ServiceRoute
from gateway.settings import GatewaySettings
from gateway.wake import ControlPlaneWake, Waking
from gateway.workers import WorkerPeers

log = logging.getLogger(__name__)


class Gateway:
    """One gateway instance: route state fed by a source, the proxies, the metrics."""

    def __init__(
        self,
        settings: GatewaySettings,
        route_source: RouteSource,
        *,
        fallback_upstream: str | None = None,
        peers: WorkerPeers | None = None,
        more_metrics: Callable[[], Awaitable[bytes]] | None = None,
    ) -> None:
        self.settings = settings
        # Another exposition served after the gateway's (``openeas up``: the control plane's).
        self.more_metrics = more_metrics
        self.route_source = route_source
        self.fallback_upstream = fallback_upstream
        self.peers = peers  # sibling workers whose metrics a scrape adds up
        self.metrics = GatewayMetrics()
        self.balancer = EndpointPool(down_s=settings.replica_down_s)
        self.routes = RouteState(self.balancer, default_timeout_ms=settings.default_timeout_ms)
        self._first_table = asyncio.Event()
        self.routes.listeners.append(self._on_table)
        self._upstreams: UpstreamPool | None = None
        self._predict: PredictProxy | None = None
        self._fallback: FallbackProxy | None = None
        self.router: Router | None = None
        self._source_task: asyncio.Task[None] | None = None
        self.activity = Activity()
        token = settings.control_plane_credential()  # the one the route table is read with
        self.reporter = (
            LoadReporter(
                settings.controlplane_url,
                token,
                self.activity,
                metrics=self.metrics,
                interval_s=settings.report_interval_s,
            )
            if token and settings.report_interval_s > 0
            else None
        )
        self._report_task: asyncio.Task[None] | None = None
        self.snapshot_path = Path(settings.route_snapshot) if settings.route_snapshot else None
        shared = settings.route_snapshot_shared
        self.shared_snapshot_path = Path(shared) if shared else None
        self.from_snapshot: snapshot.Snapshot | None = None  # serving it, until a table comes
        self._snapshot_task: asyncio.Task[None] | None = None
        # Services at zero are woken with the same credential (without one, held requests
        # wait for a replica to appear on its own, or time out).
        self._wake = ControlPlaneWake(settings.controlplane_url, token) if token else None
        # Calls held for services at zero, and who is admitted: both doors'.
        self.waking = Waking(self.routes, self.metrics, self._wake)
        self.admission = Admission(
            self.routes,
            self.activity,
            max_body_bytes=settings.max_body_bytes,
            retry_after_s=settings.retry_after_s,
            wake_queue=settings.wake_queue,
        )
        # Async services' queues: served and consumed here when a Redis is configured.
        self.streams = (
            Streams(settings.redis_url, settings.queue_prefix) if settings.redis_url else None
        )
        self.queues = QueueDoor(
            self.routes,
            self.streams,
            max_body_bytes=settings.max_body_bytes,
            claim_idle_s=settings.queue_claim_idle_s,
            metrics=self.metrics,
            wake=self._wake,
            max_skew_s=settings.signature_skew_s,
        )
        self.consumers = (
            Consumers(
                self.routes,
                self.streams,
                claim_idle_s=settings.queue_claim_idle_s,
                metrics=self.metrics,
            )
            if self.streams is not None
            else None
        )
        if self.consumers is not None:
            self.routes.listeners.append(self.consumers.on_table)

    def _on_table(self, change: RouteChange) -> None:
        self.metrics.route_version.set((), change.table.version)
        self._first_table.set()
        if self._upstreams is not None:
            self._upstreams.reroute(
                {(ep.host, ep.port) for ep in change.added},
                {(ep.host, ep.port) for ep in change.released},
            )

    async def start(self) -> None:
        self._upstreams = UpstreamPool(
            keepalive_s=self.settings.keepalive_s, yield_at=self.settings.http_yield_at
        )
        self._predict = PredictProxy(
            self.settings,
            self.admission,
            self.balancer,
            self.metrics,
            self._upstreams,
            self.waking,
        )
        if self.fallback_upstream:
            self._fallback = FallbackProxy(
                self.fallback_upstream,
                self._upstreams,
                connect_timeout_s=self.settings.connect_timeout_s,
                max_body_bytes=self.settings.max_body_bytes,
            )
        self.router = Router(
            self._predict,
            self,
            self._fallback,
            health_path=self.settings.health_path,
            metrics_path=self.settings.metrics_path,
            queues=self.queues,
        )
        self._source_task = asyncio.create_task(self._run_source(), name="gateway-routes")
        if self.snapshot_path is not None or self.shared_snapshot_path is not None:
            self._snapshot_task = asyncio.create_task(self._fall_back_to_snapshot())
        saving = self.snapshot_path is not None
        if saving and isinstance(self.route_source, ControlPlaneRouteSource):
            self.route_source.on_unreachable = self._save_snapshot_soon
        if self.peers is not None:
            await self.peers.start(self._current_metrics().snapshot)
        if self.reporter is not None:
            self._report_task = asyncio.create_task(self.reporter.run(), name="gateway-report")

    async def _run_source(self) -> None:
        # A source is expected to run forever; if one crashes on a bug, say so and restart
        # it rather than serving a frozen table silently.
        while True:
            try:
                await self.route_source.run(self._apply)
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("route source crashed; restarting it in 1 s")
                await asyncio.sleep(1.0)

    def _apply(self, table: RouteTable) -> None:
        self.from_snapshot = None
        self.routes.apply(table)

    async def _fall_back_to_snapshot(self) -> None:
        """No table from the source within the connect timeout: serve the saved one."""
        if await self.wait_for_routes(self.settings.connect_timeout_s):
            return
        paths = [p for p in (self.snapshot_path, self.shared_snapshot_path) if p is not None]
        # Each file validated off the loop (a pass holding a route at a time); the chosen one
        # applied on it, page after page with no await between (no control plane's page
        # comes among them).
        saved = await asyncio.to_thread(lambda: snapshot.newest(*map(snapshot.load, paths)))
        if self._first_table.is_set():
            return  # the control plane answered while the files were read
        if saved is None:
            log.warning(
                "no route table from the control plane yet and no snapshot at %s: "
                "serving nothing until it answers",
                " or ".join(map(str, paths)),
            )
            return
        log.warning(
            "no route table from the control plane yet: serving the snapshot %s saved at %s "
            "(version %d, %d services) until it answers",
            saved.path,
            iso_time(saved.saved_at),
            saved.version,
            saved.routes,
        )
        try:
            for page in saved.pages(PAGE_SIZE):
                self.routes.apply(page)
        except snapshot.Unreadable as e:
            # Before its first page unless the disk failed meanwhile: then the pages applied
            # stay (the version does not move) until the control plane's table replaces them.
            log.warning("not serving the snapshot after all: %s", e)
            return
        self.from_snapshot = saved

    def _to_save(
        self,
    ) -> tuple[Path, int, list[ServiceRoute], list[GroupRoute]] | None:
        """Where and what to save (:func:`gateway.snapshot.save_routes`): the table in force,
        unless it came from the file. Taken here, on the loop: the save may run in a thread
        while the table changes (an entry is replaced by a change, never altered)."""
        if self.snapshot_path is None or self.from_snapshot is not None:
            return None
        wire = self.routes.wire()
        if wire is None or self.routes.version is None:
            return None
        return self.snapshot_path, self.routes.version, *wire

    def _save_snapshot_soon(self) -> None:
        """At the start of an outage: the table in force is the newest there will be."""
        save = self._to_save()
        if save is not None:
            saving = asyncio.to_thread(snapshot.save_routes, *save)
            self._snapshot_task = asyncio.create_task(saving)

    async def wait_for_routes(self, timeout: float | None = None) -> bool:
        """True once a first route table is in; False if ``timeout`` passed first."""
        try:
            async with asyncio.timeout(timeout):
                await self._first_table.wait()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        for task in (self._source_task, self._report_task, self._snapshot_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._source_task = self._report_task = self._snapshot_task = None
        save = self._to_save()
        if save is not None:
            snapshot.save_routes(*save)
        if self._predict is not None:
            await self._predict.mirrors.close()  # shadows in flight are dropped, not awaited
        await self.waking.close()
        if self.consumers is not None:
            await self.consumers.close()
        if self.streams is not None:
            await self.streams.close()
        if self._wake is not None:
            await self._wake.close()
        if self._upstreams is not None:
            self._upstreams.close()
            self._upstreams = None
        if self.peers is not None:
            await self.peers.close()

    def health(self) -> tuple[int, Health]:
        """``(status, body)`` of the health path: 200 once a route table is in force (even
        if the control plane is unreachable since — the body says so), else 503."""
        body: Health = {
            "status": "ok" if self.routes.version is not None else "starting",
            "route_table_version": self.routes.version,
            "services": len(self.routes.services),
        }
        body.update(self.route_source.health())
        saved = self.from_snapshot
        if saved is not None:
            body["serving_from"] = (
                f"snapshot {saved.path} saved at {iso_time(saved.saved_at)} "
                f"(version {saved.version})"
            )
        else:
            body["serving_from"] = (
                str(body.get("route_source")) if self.routes.version is not None else "nothing yet"
            )
        return (200 if self.routes.version is not None else 503), body

    def _current_metrics(self) -> GatewayMetrics:
        cp = self.route_source.health().get("control_plane")
        if cp is not None:
            self.metrics.control_plane_up.set((), 1.0 if cp == "ok" else 0.0)
        # In-flight counts live in the route state (kept per request anyway); read here.
        self.metrics.in_flight.values = {
            (name,): float(entry.in_flight.count) for name, entry in self.routes.services.items()
        }
        return self.metrics

    def render_metrics(self) -> bytes:
        """This process's metrics (the whole gateway's when it runs alone)."""
        return self._current_metrics().render()

    async def render_all_metrics(self) -> bytes:
        """The metrics of every worker, summed (see :mod:`gateway.workers`)."""
        others = await self.peers.gather() if self.peers is not None else []
        return self._current_metrics().render(others)

    def handle(self, request: Request) -> Coroutine[Any, Any, None] | None:
        """The server's handler (after :meth:`start`; see :class:`gateway.http.router.Router`)."""
        assert self.router is not None, "Gateway.start() was not awaited"
        return self.router.handle(request)

    def health_page(self, request: Request) -> None:
        status, body = self.health()
        request.conn.write_response(
            status,
            [(b"content-type", b"application/json"), (b"cache-control", b"no-store")],
            json.dumps(body).encode(),
        )
        request.finish()

    def metrics_page(self, request: Request) -> Coroutine[Any, Any, None] | None:
        if self.peers is not None or self.more_metrics is not None:
            return self._answer_metrics(request)
        request.conn.write_response(
            200, [(b"content-type", METRICS_CONTENT_TYPE.encode())], self.render_metrics()
        )
        request.finish()
        return None

    async def _answer_metrics(self, request: Request) -> None:
        body = await self.render_all_metrics()
        if self.more_metrics is not None:
            body += await self.more_metrics()
        request.conn.write_response(200, [(b"content-type", METRICS_CONTENT_TYPE.encode())], body)

    def grpc_door(self) -> GrpcDoor:
        """The gRPC door on this gateway's admission, balancer, metrics and held calls
        (:func:`gateway.grpc.server.start_grpc` serves it)."""
        return GrpcDoor(self.settings, self.admission, self.balancer, self.metrics, self.waking)


class GatewayRunner:
    """A started gateway bound to a socket; :meth:`close` stops both."""

    def __init__(self, gateway: Gateway, server: HttpServer) -> None:
        self.gateway = gateway
        self.server = server

    def _address(self) -> tuple[str, int]:
        for sock in self.server.sockets:
            name = sock.getsockname()
            if isinstance(name, tuple):
                return str(name[0]), int(name[1])
        raise RuntimeError("gateway is not bound to a TCP port")

    @property
    def port(self) -> int:
        return self._address()[1]

    @property
    def host(self) -> str:
        return self._address()[0]

    @property
    def url(self) -> str:
        host = self.host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    async def close(self, grace_s: float = 10.0) -> None:
        """Stop accepting, let requests in progress finish (up to ``grace_s``), stop."""
        await self.server.close(grace_s)
        await self.gateway.close()


async def start_gateway(
    settings: GatewaySettings,
    route_source: RouteSource,
    *,
    host: str | None = None,
    port: int | None = None,
    fallback_upstream: str | None = None,
    reuse_port: bool = False,
    sock: socket.socket | None = None,
    peers: WorkerPeers | None = None,
    more_metrics: Callable[[], Awaitable[bytes]] | None = None,
) -> GatewayRunner:
    """Start a gateway in the running event loop and return once it listens.

    ``host``/``port`` default to the settings' (``port=0`` picks a free one, see
    :attr:`GatewayRunner.port`); ``sock`` serves an already-bound socket instead.
    ``fallback_upstream`` (e.g. ``"http://127.0.0.1:41000"``) receives every request that
    is not a predict call, metrics or the gateway's health path. ``peers`` makes this one
    worker of several whose ``/metrics`` is summed (see :mod:`gateway.workers`);
    ``more_metrics`` is another exposition its ``/metrics`` serves after its own."""
    gateway = Gateway(
        settings,
        route_source,
        fallback_upstream=fallback_upstream,
        peers=peers,
        more_metrics=more_metrics,
    )
    await gateway.start()
    assert gateway.router is not None
    server = HttpServer(
        gateway.router,
        keepalive_s=75.0,
        buffer_bytes=settings.buffer_body_bytes,
        head_timeout_s=settings.head_timeout_s,
        body_timeout_s=settings.body_timeout_s,
        splice_min_bytes=settings.splice_min_bytes,
    )
    try:
        if sock is not None:
            await server.listen(sock=sock)
        else:
            await server.listen(
                host if host is not None else settings.host,
                settings.port if port is None else port,
                reuse_port=reuse_port,
            )
    except BaseException:
        await server.close(0)
        await gateway.close()
        raise
    return GatewayRunner(gateway, server)
