"""The proxies' coroutine path: what cannot finish in callbacks. :class:`SlowPath` is
:class:`gateway.http.proxy.PredictProxy`'s for calls that must connect first, skip replicas
that refuse, read a chunked body whole, record a mirror's copy or wait for a service at
zero to wake; :class:`FallbackProxy` sends everything that is not a predict call to the
control plane (in ``openeas up``). Admission and the fast path stay in
:mod:`gateway.http.proxy`, compiled; coroutines stay interpreted (``docs/architecture.md``,
"Compiled hot path").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from gateway.admission import Admission, Refused
from gateway.http.headers import REQUEST_REPLACED, forward_request_headers, predict_upstream_headers
from gateway.http.pool import UpstreamPool
from gateway.http.problems import Problem, refused_problem, write_problem
from gateway.http.server import Body, BodyTooLarge, ClientGone, Request
from gateway.http.upstream import Exchange, UpstreamConnection, UpstreamError, request_head
from gateway.http.writes import Chunk
from gateway.metrics import GatewayMetrics
from gateway.mirroring.mirror import Copy, RecordingExchange
from gateway.mirroring.shadows import Mirrors
from gateway.routing.auth import body_matches, md5_refusal
from gateway.routing.balancer import Endpoint, EndpointPool, split_base_url
from gateway.routing.paths import Target
from gateway.routing.route_table import Asleep, ServiceRoute
from gateway.settings import GatewaySettings
from gateway.wake import NotWakeable, QueueFull, WakeTimeout, Waking

# What a client that stops waiting is counted as (nginx's convention), for metrics only.
CLIENT_CLOSED = 499


async def read_body(body: Body, limit: int) -> bytes:
    """The whole body; :class:`BodyTooLarge` past ``limit`` bytes, :class:`ClientGone` if
    the client left first."""
    if not body.complete:
        body.expect(limit)
    while not body.complete:
        if body.failed:
            raise ClientGone()
        if body.buffered > limit:
            raise BodyTooLarge()
        await body.waiter()
    if body.buffered > limit:
        raise BodyTooLarge()
    data = body.take()
    return data if isinstance(data, bytes) else bytes(data)  # kept (mirrors): a copy


async def relay(
    request: Request,
    conn: UpstreamConnection,
    head: bytes,
    body: Chunk | None,
    *,
    stream_body: bool,
    timeout_s: float | None,
    copy: Copy | None = None,
) -> Exchange:
    """Coroutine form of one exchange: send, relay, return the finished
    :class:`Exchange` (see its ``status`` and ``error``); :class:`ClientGone` if the
    client disconnected meanwhile. With a mirror's ``copy``, the answer is kept in it too."""
    done: asyncio.Future[Exchange] = asyncio.get_running_loop().create_future()

    def on_done(ex: Exchange) -> None:
        if not done.done():
            done.set_result(ex)

    if copy is None:
        ex = Exchange(request, conn, timeout_s=timeout_s, on_done=on_done)
    else:
        ex = RecordingExchange(request, conn, timeout_s=timeout_s, on_done=on_done, copy=copy)
    ex.send(head, body, conn.pool.time())
    if stream_body:
        ex.request_body_sent = False
        request.body.pipe_to(conn)
    try:
        await done  # (its end detached a streamed body from the replica)
    except asyncio.CancelledError:
        ex.abort()
        raise
    if ex.aborted:
        raise ClientGone()  # the client left mid-exchange
    return ex


def upstream_problem(entry: ServiceRoute, error: UpstreamError) -> Problem:
    name = entry.service
    if error.kind == "timeout":
        # 408, as EAS answers a request past its service's rpc.keepalive.
        return Problem(
            408,
            f"the replica did not answer within {entry.timeout_s * 1000:.0f} ms",
            service=name,
        )
    return Problem(502, f"the replica failed: {error}", service=name)


class SlowPath:
    """The coroutine half of a :class:`gateway.http.proxy.PredictProxy`: the same
    admission, balancer, pools and metrics; ``readmit`` resolves and admits a call again
    (once its service woke: the entry, and the Content-MD5 a signed call's body must still
    match), ``count`` counts a call's answer."""

    def __init__(
        self,
        settings: GatewaySettings,
        admission: Admission,
        metrics: GatewayMetrics,
        balancer: EndpointPool,
        upstreams: UpstreamPool,
        mirrors: Mirrors,
        waking: Waking,
        *,
        readmit: Callable[[Request, Target, float], tuple[ServiceRoute, bytes | None]],
        count: Callable[[str, int, float], None],
    ) -> None:
        self.settings = settings
        self.admission = admission
        self.metrics = metrics
        self.balancer = balancer
        self.upstreams = upstreams
        self.mirrors = mirrors
        self.waking = waking
        self.activity = admission.activity
        self.readmit = readmit
        self.count = count
        self.connect_timeout_s = settings.connect_timeout_s

    async def held(
        self, request: Request, target: Target, asleep: ServiceRoute, started: float
    ) -> None:
        """Hold an authenticated call for a service at zero until a replica is ready, then
        admit it again (the route changed) and forward it."""
        name = asleep.service
        try:
            await self.waking.hold_call(asleep, self.activity, self.settings.wake_queue)
            entry, unchecked = self.readmit(request, target, time.monotonic())
        except (Refused, QueueFull, WakeTimeout, NotWakeable, Asleep) as e:
            p = refused_problem(self.admission.not_woken(e, asleep))
            self.count(name, p.status, started)
            write_problem(request, p)
            return
        except asyncio.CancelledError:
            self.count(name, CLIENT_CLOSED, started)
            raise
        copy = self.mirrors.copy(request, target, entry) if entry.mirror else None
        await self.run(request, target, entry, started, copy, unchecked=unchecked)

    async def run(
        self,
        request: Request,
        target: Target,
        entry: ServiceRoute,
        started: float,
        copy: Copy | None = None,
        first: Endpoint | None = None,
        unchecked: bytes | None = None,
    ) -> None:
        """Forward an admitted call. ``unchecked``: the Content-MD5 a signed call's body is
        read whole and checked against before anything is sent (see :meth:`_forward`)."""
        name = entry.service
        code = 500
        try:
            code = await self._forward(request, target, entry, copy, first, unchecked)
        except Problem as p:
            code = p.status
            write_problem(request, p, close=p.status == 413)
        except ClientGone:
            code = CLIENT_CLOSED
            request.conn.close()
        except asyncio.CancelledError:
            code = CLIENT_CLOSED
            raise
        finally:
            entry.in_flight.leave()
            self.count(name, code, started)
            if copy is not None:
                self.mirrors.launch(copy)  # the caller has its answer: now the shadows

    async def _forward(
        self,
        request: Request,
        target: Target,
        entry: ServiceRoute,
        copy: Copy | None = None,
        first: Endpoint | None = None,
        unchecked: bytes | None = None,
    ) -> int:
        """Connect (skipping replicas that refuse), send, relay; the status the client saw.
        A mirror's ``copy`` gets the request as sent and keeps the answer. ``first``: the
        replica already chosen for this call (if it is still routed). ``unchecked``: the
        Content-MD5 the body must have (a signed call's: read whole, never streamed)."""
        name = entry.service
        metrics = self.metrics
        length = request.content_length
        body: bytes | None = None
        stream = False
        if request.has_body:
            if length is not None and not request.body.complete and unchecked is None:
                stream = True
            else:
                limit = self.settings.max_body_bytes
                try:
                    body = await read_body(request.body, limit)
                except BodyTooLarge:
                    raise Problem(
                        413, f"request body exceeds the limit of {limit} bytes", service=name
                    ) from None
        if unchecked is not None and not body_matches(unchecked, (body or b"",)):
            raise refused_problem(Admission.unauthenticated(name, md5_refusal().detail))
        length = len(body) if body is not None else length
        headers = predict_upstream_headers(request.headers, request.peer, length)
        if copy is not None:
            copy.headers, copy.body = headers, body
        tried: list[Endpoint] = []
        while True:
            endpoint = first if first in entry.endpoints else None
            first = None
            if endpoint is None:
                endpoint = self.balancer.choose(entry.endpoints, tried)
            if endpoint is None:
                raise refused_problem(
                    self.admission.unavailable(
                        name, f"no replica of service {name!r} accepted the connection"
                    )
                )
            endpoint.outstanding += 1
            try:
                try:
                    conn = await self.upstreams.acquire(
                        endpoint.host, endpoint.port, self.connect_timeout_s
                    )
                except UpstreamError:
                    # Nothing reached this replica: try the next one.
                    metrics.upstream_errors.inc((name, "connect"))
                    self.balancer.mark_down(endpoint)
                    tried.append(endpoint)
                    continue
                self.balancer.mark_up(endpoint)
                sent_at = time.perf_counter()
                head = request_head(request.method, target.path_qs, endpoint.host_header, headers)
                ex = await relay(
                    request,
                    conn,
                    head,
                    body,
                    stream_body=stream,
                    timeout_s=entry.timeout_s,
                    copy=copy,
                )
            finally:
                endpoint.outstanding -= 1
            if ex.error is None:
                metrics.series(name).upstream_duration.observe(time.perf_counter() - sent_at)
                return ex.status
            if request.body.failed:
                raise ClientGone()
            metrics.upstream_errors.inc((name, ex.error.kind))
            if ex.status:
                return ex.status  # cut mid-response; the client saw this status
            raise upstream_problem(entry, ex.error)


class FallbackProxy:
    """Plain reverse proxy to ``base_url`` for everything that is not a predict call (the
    control-plane API in ``openeas up``): no token check, ``Authorization`` and the
    client's ``Host`` pass (the API needs the admin credential and builds endpoint URLs
    from the host the client used), no timeout beyond connect (long-polls hold on
    purpose)."""

    def __init__(
        self,
        base_url: str,
        upstreams: UpstreamPool,
        *,
        connect_timeout_s: float,
        max_body_bytes: int,
    ) -> None:
        self.host, self.port = split_base_url(base_url)
        self.upstreams = upstreams
        self.connect_timeout_s = connect_timeout_s
        self.max_body_bytes = max_body_bytes

    async def handle(self, request: Request) -> None:
        length = request.content_length
        body: Chunk | None = None
        stream = False
        try:
            if request.has_body:
                if request.body.complete:
                    body = request.body.take()
                elif length is None:
                    body = await read_body(request.body, self.max_body_bytes)
                else:
                    stream = True
            headers = forward_request_headers(
                request.headers, drop=REQUEST_REPLACED, peer=request.peer
            )
            if body is not None:
                headers.append(b"content-length: %d\r\n" % len(body))
            elif stream:
                headers.append(b"content-length: %d\r\n" % (length or 0))
            try:
                conn = await self.upstreams.acquire(self.host, self.port, self.connect_timeout_s)
            except UpstreamError as e:
                raise Problem(502, f"the control plane is unreachable ({e})") from None
            host = request.hmap.get(b"host") or f"{self.host}:{self.port}".encode()
            head = request_head(request.method, request.target, host, headers)
            ex = await relay(request, conn, head, body, stream_body=stream, timeout_s=None)
            if ex.error is not None and not ex.status:
                raise Problem(502, f"the control plane failed: {ex.error}")
        except BodyTooLarge:
            write_problem(request, Problem(413, "request body too large"), close=True)
        except Problem as p:
            write_problem(request, p)
        except ClientGone:
            request.conn.close()
