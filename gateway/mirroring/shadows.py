"""The shadows of mirrored requests: which requests are mirrored, sending each copy to a
ready replica of every target off the caller's path, and counting what they answered (see
:mod:`gateway.mirroring.mirror` for the whole picture). Apart from it because these are coroutines
and tasks; the callbacks there are compiled (``docs/architecture.md``, "Compiled hot
path").
"""

from __future__ import annotations

import asyncio
import time

from gateway.http.pool import UpstreamPool
from gateway.http.server import Request
from gateway.http.upstream import UpstreamError, request_head
from gateway.metrics import GatewayMetrics
from gateway.mirroring.compare import Answer, same
from gateway.mirroring.mirror import MAX_ANSWER_BYTES, MAX_IN_FLIGHT, Collected, Copy, ShadowCall
from gateway.routing.balancer import EndpointPool
from gateway.routing.paths import Target
from gateway.routing.route_table import RouteState, ServiceRoute
from gateway.routing.traffic import MirrorState


class Mirrors:
    """Chooses the mirrored requests, sends the shadows and counts what they answered."""

    def __init__(
        self,
        routes: RouteState,
        balancer: EndpointPool,
        upstreams: UpstreamPool,
        metrics: GatewayMetrics,
        *,
        connect_timeout_s: float,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.routes = routes
        self.balancer = balancer
        self.upstreams = upstreams
        self.metrics = metrics
        self.connect_timeout_s = connect_timeout_s
        self.max_in_flight = max_in_flight
        self.max_answer_bytes = max_answer_bytes
        self.in_flight: dict[tuple[str, str], int] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def copy(self, request: Request, target: Target, entry: ServiceRoute) -> Copy | None:
        """A :class:`Copy` when this request of a mirrored service is to be mirrored (the
        proxy fills its request part and records the primary's answer in it)."""
        mirror = entry.mirror
        if mirror is None or not mirror.picker.take():
            return None
        if not request.body.complete or (request.content_length is None and request.has_body):
            self._count_all(entry.service, mirror, "skipped")  # streamed: no copy
            return None
        service = entry.service
        return Copy(service, mirror, request.method, target.path_qs, self.max_answer_bytes)

    def launch(self, copy: Copy) -> None:
        """The caller has the primary's answer: send the shadows (each in its own task)."""
        primary = copy.primary.answer()
        if primary is None:
            self._count_all(copy.service, copy.mirror, "skipped")
            return
        loop = asyncio.get_running_loop()
        for name in copy.mirror.route.targets:
            key = (copy.service, name)
            n = self.in_flight.get(key, 0)
            if n >= self.max_in_flight:
                self.metrics.mirror_requests.inc((copy.service, name, "skipped"))
                continue
            self.in_flight[key] = n + 1
            task = loop.create_task(self._shadow(copy, primary, name))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _count_all(self, service: str, mirror: MirrorState, result: str) -> None:
        for name in mirror.route.targets:
            self.metrics.mirror_requests.inc((service, name, result))

    async def _shadow(self, copy: Copy, primary: Answer, name: str) -> None:
        result = "error"
        try:
            shadow = await self._call(copy, name)
            if shadow is not None:
                tolerance = copy.mirror.route.tolerance
                theirs = shadow.answer()
                ok = theirs is not None and same(primary, theirs, None)
                if theirs is not None and not ok and tolerance is not None:
                    # Tensors compared value by value can take a while: not on the loop.
                    ok = await asyncio.to_thread(same, primary, theirs, tolerance)
                # (No answer: it outgrew the limit the primary's answer fitted in.)
                result = "match" if ok else "mismatch"
        finally:
            key = (copy.service, name)
            left = self.in_flight[key] - 1
            if left:
                self.in_flight[key] = left
            else:
                del self.in_flight[key]
            self.metrics.mirror_requests.inc((copy.service, name, result))

    async def _call(self, copy: Copy, name: str) -> Collected | None:
        """The target's answer; None when it has no ready replica or failed."""
        entry = self.routes.services.get(name)
        endpoint = self.balancer.choose(entry.endpoints) if entry is not None else None
        if entry is None or endpoint is None:
            return None
        endpoint.outstanding += 1
        try:
            conn = await self.upstreams.acquire(
                endpoint.host, endpoint.port, self.connect_timeout_s
            )
            sent = time.perf_counter()
            call = ShadowCall(conn, timeout_s=entry.timeout_s, limit=self.max_answer_bytes)
            head = request_head(copy.method, copy.path_qs, endpoint.host_header, copy.headers)
            try:
                await call.start(head, copy.body)
            except asyncio.CancelledError:
                call.fail(UpstreamError("broken", "cancelled"))
                raise
            if call.error is not None:
                return None
            answer = call.answer
        except UpstreamError:
            return None
        finally:
            endpoint.outstanding -= 1
        self.metrics.mirror_duration.observe((copy.service, name), time.perf_counter() - sent)
        return answer
