"""The control plane as a running program: API app + reconciler (with its runtime) in one
event loop. ``openeas controlplane`` serves it on its own port; ``openeas up`` puts the
gateway in front of it on the same loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING

import uvicorn

from controlplane.api.app import create_app
from controlplane.elasticity.cron_loop import CronScaling
from controlplane.elasticity.queues import Backlog
from controlplane.elasticity.scaling_loop import Autoscaling
from controlplane.metrics import ControlPlaneMetrics
from controlplane.reconcile.reconciler import Reconciler
from controlplane.runtime import make_runtime
from controlplane.settings import Settings
from controlplane.store import migrate, sealing
from controlplane.store.db import make_engine, make_sessions
from controlplane.store.services import Services

if TYPE_CHECKING:  # the kubernetes client is imported only where that runtime runs
    from controlplane.runtime.kubernetes.events import EventMirror
    from controlplane.runtime.kubernetes.route_snapshot import RouteSnapshotPublisher


class SchemaOutOfDate(RuntimeError):
    pass


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling (the program that embeds it decides) and
    without its ten wake-ups a second to look at ``should_exit``: :meth:`exit` ends it at
    once, from any thread, and a tick a second keeps its ``Date`` header current."""

    _loop: asyncio.AbstractEventLoop | None = None
    _exit: asyncio.Event | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        self._loop, self._exit = asyncio.get_running_loop(), asyncio.Event()
        counter = 0  # on_tick renews the Date header when counter % 10 == 0 (its 1 s)
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864_000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._exit.wait()

    def exit(self) -> None:
        self.should_exit = True  # seen at the start too, when the loop is not running yet
        loop, event = self._loop, self._exit
        if loop is not None and event is not None and not loop.is_closed():
            loop.call_soon_threadsafe(event.set)


class ControlPlane:
    def __init__(self, settings: Settings, *, reconcile: bool = True) -> None:
        self.settings = settings
        self.engine = make_engine(settings.sqlalchemy_url)
        if migrate.pending(self.engine):
            raise SchemaOutOfDate("the database schema is not up to date: run 'openeas migrate'")
        sessions = make_sessions(self.engine)
        sealer = sealing.from_settings(settings.secret_key, settings.data_dir)
        self.metrics = ControlPlaneMetrics()
        services = Services(sessions, settings.cluster_id, sealer)
        # Async services' backlog (queue[backlog]) is read from their queues' Redis.
        backlog = Backlog(settings.redis_url) if settings.redis_url else None
        self.autoscaling = Autoscaling(sessions, services, backlog=backlog, metrics=self.metrics)
        self.reconciler = (
            Reconciler(
                sessions,
                lambda notify: make_runtime(settings, notify),
                settings.cluster_id,
                resync_seconds=settings.resync_seconds,
                lease_ttl=settings.lease_seconds,
                autoscaling=self.autoscaling,
                metrics=self.metrics,
                cron=CronScaling(sessions, services),
            )
            if reconcile
            else None
        )
        if self.reconciler is not None:
            reconciler = self.reconciler
            self.metrics.probe.leading = lambda: reconciler.is_leader
            self.metrics.probe.queue_depth = lambda: reconciler.queue_depth
        self.app = create_app(
            settings, self.engine, autoscaling=self.autoscaling, metrics=self.metrics
        )
        self.route_snapshot: RouteSnapshotPublisher | None = None
        k8s = settings.k8s
        kubernetes = self.reconciler is not None and settings.runtime == "kubernetes"
        if kubernetes and k8s.route_snapshot_configmap and k8s.route_snapshot_namespace:
            from controlplane.runtime.kubernetes.route_snapshot import RouteSnapshotPublisher

            self.route_snapshot = RouteSnapshotPublisher(
                sessions, settings.cluster_id, settings.default_timeout_ms, k8s
            )
        self.event_mirror: EventMirror | None = None
        if kubernetes and k8s.events:
            from controlplane.runtime.kubernetes.events import EventMirror

            self.event_mirror = EventMirror(sessions, settings.cluster_id, k8s)

    async def serve(self, sock: socket.socket) -> None:
        """Serve the API on ``sock`` and reconcile until :meth:`stop`; then stop every
        replica the runtime started."""
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=3,  # long-polls (the gateway's route watch) end here
        )
        self._server = _Server(config)
        tasks: list[asyncio.Task[None]] = []
        if self.reconciler is not None:
            reconciler = self.reconciler
            tasks.append(asyncio.create_task(reconciler.run()))
            if self.route_snapshot is not None:
                snapshot = self.route_snapshot.run(lambda: reconciler.is_leader)
                tasks.append(asyncio.create_task(snapshot))
            if self.event_mirror is not None:
                events = self.event_mirror.run(lambda: reconciler.is_leader)
                tasks.append(asyncio.create_task(events))
        try:
            await self._server.serve(sockets=[sock])
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self.autoscaling.backlog is not None:
                await self.autoscaling.backlog.close()
            self.engine.dispose()

    def stop(self) -> None:
        """End :meth:`serve` (from any thread)."""
        if self._server is not None:
            self._server.exit()


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it (Linux). uvicorn writes a response's head and body
    # separately; with Nagle the body waits for the client's delayed ACK on every
    # keep-alive request (eascmd, the console, the gateway's route long-poll).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.set_inheritable(False)
    return sock
