"""Requests held for services at zero, and the wake-up that brings them back.

A route marked ``wakeable`` with no ready replica is a service its autoscaler took to zero.
The proxy (:mod:`gateway.http.proxy`) parks each authenticated request for it here with
:meth:`Waking.hold`: the first one asks the control plane for a replica (``WAKE_PATH``, one
push per wake-up, retried while requests wait), the others only wait. The route feed
releases them: every applied table checks the services being woken — a handful, whatever the
table's size — and a service with a ready replica lets all its requests go at once and
records its cold start (first held request to release) in ``openeas_gateway_cold_start_seconds``.
Idle costs nothing: no timer runs while nothing is held.

Past ``bound`` held requests a service answers 450 (EAS's queue full: safe to retry); a
request not released within its service's timeout answers 504.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp

from contract.wire import WAKE_PATH, WakeRequest
from gateway.metrics import GatewayMetrics
from gateway.routing.limits import Activity
from gateway.routing.route_table import RouteChange, RouteState, ServiceRoute

log = logging.getLogger(__name__)

# A push returns None when the control plane took the wake-up, the reason when it refuses
# it; it raises PushFailed when it should be tried again (unreachable, not the leader).
Push = Callable[[str], Awaitable[str | None]]


class PushFailed(Exception):
    pass


class QueueFull(Exception):
    """The service already holds as many requests as it may (EAS's 450)."""


class WakeTimeout(Exception):
    """No replica became ready within the request's wait."""


class NotWakeable(Exception):
    """The control plane refused the wake-up (the reason says why)."""


@dataclass
class _Asleep:
    """One service being woken: its held requests and the push on their behalf."""

    first_at: float  # when the first request was held (perf_counter)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    held: int = 0
    refused: str | None = None
    push: asyncio.Task[None] | None = None


class Waking:
    def __init__(
        self,
        routes: RouteState,
        metrics: GatewayMetrics,
        push: Push | None,
        *,
        retry_s: float = 0.2,
    ) -> None:
        self.routes = routes
        self.metrics = metrics
        self._push = push
        self.retry_s = retry_s
        self._asleep: dict[str, _Asleep] = {}
        routes.listeners.append(self._on_table)

    async def hold(self, service: str, bound: int, timeout_s: float) -> None:
        """Wait until ``service`` has a ready replica (or its route changed so that the
        caller must look again). :class:`QueueFull` past ``bound``, :class:`WakeTimeout`
        after ``timeout_s``, :class:`NotWakeable` when the control plane refuses."""
        asleep = self._asleep.get(service)
        if asleep is None:
            asleep = self._asleep[service] = _Asleep(time.perf_counter())
            if self._push is not None:
                asleep.push = asyncio.create_task(self._ask(service, asleep))
        if asleep.held >= bound:
            raise QueueFull()
        asleep.held += 1
        try:
            async with asyncio.timeout(timeout_s):
                await asleep.ready.wait()
        except TimeoutError:
            raise WakeTimeout() from None
        finally:
            asleep.held -= 1
            if not asleep.held and not asleep.ready.is_set():
                self._forget(service, asleep)  # all gave up: the next request asks anew
        if asleep.refused is not None:
            raise NotWakeable(asleep.refused)

    async def hold_call(self, entry: ServiceRoute, activity: Activity, wake_queue: int) -> None:
        """Hold one call (either door's) for ``entry``'s service at zero, counted in its
        in-flight load meanwhile so the autoscaler sees the demand; :meth:`hold`'s errors."""
        name = entry.service
        in_flight = entry.in_flight  # the service's own (kept across its route changes)
        in_flight.enter_held()
        if not in_flight.active:
            activity.touch(name, in_flight)
        try:
            await self.hold(name, queue_bound(entry, wake_queue), entry.timeout_s)
        finally:
            in_flight.leave()

    def _forget(self, service: str, asleep: _Asleep) -> None:
        if self._asleep.get(service) is asleep:
            del self._asleep[service]
        if asleep.push is not None:
            asleep.push.cancel()

    async def _ask(self, service: str, asleep: _Asleep) -> None:
        """Push the wake-up until the control plane takes it (or refuses it)."""
        assert self._push is not None
        delay = self.retry_s
        while True:
            try:
                refused = await self._push(service)
                break
            except PushFailed as e:
                log.debug("wake-up of %s not delivered (%s); again in %.1f s", service, e, delay)
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)
        asleep.push = None
        if refused is not None:
            asleep.refused = refused
            self._release(service, asleep)

    def _on_table(self, change: RouteChange) -> None:
        for service, asleep in list(self._asleep.items()):
            entry = self.routes.services.get(service)
            if entry is None or entry.endpoints or not entry.wakeable:
                # Ready, gone, or no longer wakeable (stopped): the proxy looks again.
                if entry is not None and entry.endpoints:
                    waited = time.perf_counter() - asleep.first_at
                    self.metrics.cold_start.observe((service,), waited)
                self._release(service, asleep)

    def _release(self, service: str, asleep: _Asleep) -> None:
        asleep.ready.set()
        self._forget(service, asleep)

    async def close(self) -> None:
        for asleep in list(self._asleep.values()):
            if asleep.push is not None:
                asleep.push.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await asleep.push


def queue_bound(entry: ServiceRoute, wake_queue: int) -> int:
    """How many calls a service waking from zero holds: the gateway's bound, or the
    service's ``metadata.rpc.max_queue_size`` when lower."""
    limit = entry.max_queue_size
    return min(wake_queue, limit) if limit else wake_queue


class ControlPlaneWake:
    """The push: ``POST <url>/internal/v1/wake`` with the gateway's route-reader token."""

    def __init__(self, url: str, token: str, *, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/") + WAKE_PATH
        self._auth = f"Bearer {token}"
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self, service: str) -> str | None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        body = WakeRequest(service=service).model_dump_json()
        headers = {"Authorization": self._auth, "Content-Type": "application/json"}
        try:
            async with self._session.post(self.url, data=body, headers=headers) as resp:
                status = resp.status
                detail = (await resp.content.read(2000)).decode("utf-8", "replace")
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise PushFailed(type(e).__name__) from None
        if status == 200:
            return None
        if status == 421:
            # Not the leading control plane: a new connection may reach it.
            await self.close()
            raise PushFailed("not the leader")
        if status in (401, 403):
            return "the control plane refused the gateway's credential (OPENEAS_ROUTES_TOKEN)"
        if status in (404, 409):
            return _detail(detail) or f"the control plane cannot wake it (HTTP {status})"
        raise PushFailed(f"HTTP {status}")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _detail(body: str) -> str:
    """The ``detail`` of a problem+json answer (never more than it says)."""
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        return ""
    return detail if isinstance(detail, str) else ""
