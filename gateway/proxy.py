"""The proxies: predict calls to a service's replicas, and (in ``openeas up``) everything
else to the control plane. :mod:`gateway.app` calls ``dispatch`` once per request; the
byte-level work is in :mod:`gateway.upstream`.

A predict call is refused, in this order, with: 404 unknown service · 401 missing/wrong
token · 403 Triton admin path · 413 body over the limit · 503 no ready replica · 429 over
the rate limit or queue size. A service at zero that its autoscaler wakes is not a 503: the
call is held (:mod:`gateway.wake`) until a replica is ready, then admitted again — 450 when
too many are held already, 504 when none is ready within the service's timeout.
Then it goes to the replica with the fewest requests in flight; one that refuses the
connection is skipped (nothing was sent to it). Past that point: 504 if the replica does
not answer within the service's timeout, 502 if it fails before its response head; a
failure after the head cuts the client connection, since the status is already out.

Two paths share that logic. The *fast path* — whole small body already read, an idle
keep-alive connection to the chosen replica — runs entirely in callbacks. Everything else
(connecting, skipping refusing replicas, streaming large bodies) runs as a coroutine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Iterable
from hmac import compare_digest
from typing import Any

from gateway.auth import presented_token, token_matches
from gateway.balancer import Endpoint, EndpointPool, split_base_url
from gateway.headers import PREDICT_DROPPED, REQUEST_REPLACED, forward_request_headers
from gateway.limits import Activity
from gateway.metrics import GatewayMetrics
from gateway.mirror import Copy, Mirrors, RecordingExchange
from gateway.paths import Target
from gateway.problems import Problem, unauthorized, write_problem
from gateway.route_table import Asleep, GroupEntry, RouteState, ServiceRoute
from gateway.server import BodyTooLarge, Chunk, ClientGone, Request
from gateway.settings import GatewaySettings
from gateway.upstream import (
    Exchange,
    UpstreamConnection,
    UpstreamError,
    UpstreamPool,
    request_head,
)
from gateway.wake import NotWakeable, Push, QueueFull, WakeTimeout, Waking, queue_bound

# EAS's answer when a service's queue is full; the request was not processed: retry.
QUEUE_FULL = 450

# What a client that stops waiting is counted as (nginx's convention), for metrics only.
CLIENT_CLOSED = 499

MEMO_ENDPOINTS = 16  # upstream heads kept per client head (one per replica it went to)


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
    ex.send(head, body)
    if stream_body:
        ex.request_body_sent = False
        request.body.pipe_to(conn)
    try:
        await done
    except asyncio.CancelledError:
        ex.abort()
        raise
    finally:
        if stream_body:
            request.body.detach()
    if ex.aborted:
        raise ClientGone()  # the client left mid-exchange
    return ex


class PredictProxy:
    """``/api/predict/<service>/<triton path>`` → a ready replica of ``<service>``."""

    def __init__(
        self,
        settings: GatewaySettings,
        routes: RouteState,
        balancer: EndpointPool,
        metrics: GatewayMetrics,
        upstreams: UpstreamPool,
        activity: Activity | None = None,
        wake: Push | None = None,
    ) -> None:
        self.settings = settings
        self.routes = routes
        self.balancer = balancer
        self.metrics = metrics
        self.upstreams = upstreams
        self.activity = activity if activity is not None else Activity()
        self._connect_s = settings.connect_timeout_s
        self.mirrors = Mirrors(
            routes, balancer, upstreams, metrics, connect_timeout_s=settings.connect_timeout_s
        )
        self.waking = Waking(routes, metrics, wake)

    # -- admission (shared) ---------------------------------------------------------------

    def _resolve(self, request: Request, target: Target) -> tuple[ServiceRoute, bool]:
        """The service that serves this call, and whether the caller is already
        authenticated (by a group token). A group's name wins over a service's: the group
        endpoint is what callers of a released service use; every member stays reachable at
        ``<group>.<service>`` (EAS's spelling) and, without a clash, at its own name."""
        name = target.service
        routes = self.routes
        found = routes.named(name)
        if isinstance(found, GroupEntry):
            self._authenticate_group(request, found)
            entry = routes.member(found)
            if entry is None:
                raise self._unavailable(
                    name, f"group {name!r} has no member taking group traffic with a ready replica"
                )
            return entry, True
        if found is None:
            raise Problem(404, f"no service named {name!r}")
        entry, group = found
        if group is not None and self._accepts(request, lambda: (group.digest,), group):
            return entry, True
        return entry, False

    def _authenticate_group(self, request: Request, group: GroupEntry) -> None:
        """The group's token, or any member's, opens the group endpoint."""
        name = group.route.group
        if not self._accepts(request, lambda: self.routes.group_tokens(group), group):
            if presented_token(request.hmap.get(b"authorization")) is None:
                raise unauthorized(name, "missing Authorization header with the group token")
            raise unauthorized(name, "the token matches neither this group nor its members")

    @staticmethod
    def _accepts(
        request: Request, digests: Callable[[], Iterable[bytes]], holder: GroupEntry
    ) -> bool:
        """Whether the Authorization header opens ``holder``: the credential that passed
        last is compared first; the digests are listed only when it does not match."""
        auth = request.hmap.get(b"authorization")
        accepted = holder.accepted
        if auth is not None and accepted is not None and compare_digest(auth, accepted):
            return True
        token = presented_token(auth)
        if token is None or not any(token_matches(token, d) for d in digests()):
            return False
        holder.accepted = auth
        return True

    def _admit(
        self, request: Request, target: Target, entry: ServiceRoute, authenticated: bool
    ) -> None:
        """Raise the :class:`Problem` that refuses this call, or take its place in the
        service's in-flight count (the caller must ``entry.in_flight.leave()``)."""
        name = entry.route.service
        auth = request.hmap.get(b"authorization")
        accepted = entry.accepted
        if not authenticated and (
            auth is None or accepted is None or not compare_digest(auth, accepted)
        ):
            token = presented_token(auth)
            if token is None:
                raise unauthorized(name, "missing Authorization header with the service token")
            if not token_matches(token, entry.digest):
                raise unauthorized(name, "the token does not match this service")
            entry.accepted = auth
        if target.admin:
            raise Problem(
                403,
                "Triton's admin API (model repository, shared memory, trace, logging) "
                "is not available through the gateway",
                service=name,
            )
        length = request.content_length
        limit = self.settings.max_body_bytes
        if length is not None and length > limit:
            raise Problem(
                413, f"request body of {length} bytes exceeds the limit of {limit}", service=name
            )
        if not entry.endpoints:
            if entry.route.wakeable:
                raise Asleep(entry)
            raise self._unavailable(
                name, f"service {name!r} has no ready replica (status: {entry.route.status})"
            )
        over = entry.take_place(self.activity)
        if over is not None:
            headers = {"Retry-After": str(over.retry_after_s)}
            raise Problem(429, over.detail, service=name, headers=headers)

    def _unavailable(self, name: str, detail: str) -> Problem:
        """A 503 the caller may retry after a moment (replicas come and go)."""
        headers = {"Retry-After": str(self.settings.retry_after_s)}
        return Problem(503, detail, service=name, headers=headers)

    def _count(self, label: str, code: int, started: float) -> None:
        self.metrics.requests.inc((label, str(code)))
        self.metrics.duration.observe((label,), time.perf_counter() - started)

    # -- dispatch ---------------------------------------------------------------------------

    def dispatch(self, request: Request, target: Target) -> Coroutine[Any, Any, None] | None:
        started = time.perf_counter()
        entry: ServiceRoute | None = None
        try:
            entry, authenticated = self._resolve(request, target)
            self._admit(request, target, entry, authenticated)
        except Asleep as a:
            return self._held(request, target, a.entry, started)
        except Problem as p:
            self._count(entry.route.service if entry is not None else "", p.status, started)
            write_problem(request, p, close=p.status == 413)
            request.finish()
            return None
        if entry.mirror is not None:
            copy = self.mirrors.copy(request, target, entry)
            if copy is not None:
                return self._slow(request, target, entry, started, copy)
        endpoint = self.balancer.choose(entry.endpoints)
        # A body of known length goes on by callbacks, whole or as it comes (a chunked one
        # is read whole first, to send it with its length).
        if endpoint is not None and (request.content_length is not None or not request.has_body):
            conn = self.upstreams.idle(endpoint.host, endpoint.port)
            if conn is not None:
                self._fast(request, target, entry, endpoint, conn, started)
                return None
        # The replica chosen is the one to connect to: choosing again would move the
        # balancer's turn twice per call, and sequential calls would all reach one replica.
        return self._slow(request, target, entry, started, first=endpoint)

    async def _held(
        self, request: Request, target: Target, asleep: ServiceRoute, started: float
    ) -> None:
        """Hold an authenticated call for a service at zero until a replica is ready, then
        admit it again (the route changed) and forward it."""
        name = asleep.route.service
        bound = queue_bound(asleep, self.settings.wake_queue)
        try:
            await self.waking.hold_call(asleep, self.activity, self.settings.wake_queue)
            entry, authenticated = self._resolve(request, target)
            self._admit(request, target, entry, authenticated)
        except (Problem, QueueFull, WakeTimeout, NotWakeable, Asleep) as e:
            p = self._not_woken(e, asleep, bound)
            self._count(name, p.status, started)
            write_problem(request, p)
            return
        except asyncio.CancelledError:
            self._count(name, CLIENT_CLOSED, started)
            raise
        copy = self.mirrors.copy(request, target, entry) if entry.mirror else None
        await self._slow(request, target, entry, started, copy)

    def _not_woken(self, e: Exception, asleep: ServiceRoute, bound: int) -> Problem:
        name = asleep.route.service
        if isinstance(e, Problem):
            return e
        if isinstance(e, QueueFull):
            return Problem(
                QUEUE_FULL,
                f"service {name!r} is waking up from zero and already holds {bound} requests: "
                "this one was not processed, retry in a moment",
                title="Queue Full",
                service=name,
                headers={"Retry-After": str(max(1, self.settings.retry_after_s))},
            )
        if isinstance(e, WakeTimeout):
            return Problem(
                504,
                f"service {name!r} was scaled to zero and no replica was ready within "
                f"{asleep.timeout_s * 1000:.0f} ms (its timeout)",
                service=name,
            )
        why = str(e) if isinstance(e, NotWakeable) else "none ready yet"
        return self._unavailable(name, f"service {name!r} has no ready replica: {why}")

    def _upstream_headers(self, request: Request, length: int | None) -> list[bytes]:
        headers = forward_request_headers(request.headers, drop=PREDICT_DROPPED, peer=request.peer)
        if length:
            headers.append(b"content-length: %d\r\n" % length)
        return headers

    def _fast(
        self,
        request: Request,
        target: Target,
        entry: ServiceRoute,
        endpoint: Endpoint,
        conn: UpstreamConnection,
        started: float,
    ) -> None:
        stream = not request.body.complete  # the rest of the body is still to come
        body = request.body.take() if request.has_body else None  # sent with the head
        # The body has the head's length, so the upstream head follows from the head, the
        # connection and the replica: made once while a client repeats its head.
        memo = request.head.memo
        head = memo.get(endpoint)
        if head is None:
            headers = self._upstream_headers(request, request.content_length)
            head = request_head(request.method, target.path_qs, endpoint.host_header, headers)
            if len(memo) >= MEMO_ENDPOINTS:
                memo.clear()
            memo[endpoint] = head
        endpoint.outstanding += 1
        ex = Exchange(
            request,
            conn,
            timeout_s=entry.timeout_s,
            on_done=self._fast_done,
            context=(entry, endpoint, started, time.perf_counter()),
        )
        ex.send(head, body)
        if stream:
            ex.request_body_sent = False
            request.body.pipe_to(conn)

    def _fast_done(self, ex: Exchange) -> None:
        context: tuple[ServiceRoute, Endpoint, float, float] = ex.context  # type: ignore[assignment]
        entry, endpoint, started, sent_at = context
        endpoint.outstanding -= 1
        entry.in_flight.leave()
        name = entry.route.service
        request = ex.request
        if not ex.request_body_sent:
            request.body.detach()  # a body streamed to the replica goes nowhere now
        if ex.aborted:
            self._count(name, CLIENT_CLOSED, started)
            return
        if ex.error is None:
            now = time.perf_counter()
            label = (name,)
            metrics = self.metrics
            metrics.upstream_duration.observe(label, now - sent_at)
            metrics.duration.observe(label, now - started)
            metrics.requests.inc((name, str(ex.status)))
            request.finish()
            return
        self.metrics.upstream_errors.inc((name, ex.error.kind))
        if ex.status:
            self._count(name, ex.status, started)
        else:
            p = self._upstream_problem(entry, ex.error)
            self._count(name, p.status, started)
            write_problem(request, p)
        request.finish()

    @staticmethod
    def _upstream_problem(entry: ServiceRoute, error: UpstreamError) -> Problem:
        name = entry.route.service
        if error.kind == "timeout":
            return Problem(
                504,
                f"the replica did not answer within {entry.timeout_s * 1000:.0f} ms",
                service=name,
            )
        return Problem(502, f"the replica failed: {error}", service=name)

    async def _slow(
        self,
        request: Request,
        target: Target,
        entry: ServiceRoute,
        started: float,
        copy: Copy | None = None,
        first: Endpoint | None = None,
    ) -> None:
        name = entry.route.service
        code = 500
        try:
            code = await self._forward(request, target, entry, copy, first)
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
            self._count(name, code, started)
            if copy is not None:
                self.mirrors.launch(copy)  # the caller has its answer: now the shadows

    async def _forward(
        self,
        request: Request,
        target: Target,
        entry: ServiceRoute,
        copy: Copy | None = None,
        first: Endpoint | None = None,
    ) -> int:
        """Connect (skipping replicas that refuse), send, relay; the status the client saw.
        A mirror's ``copy`` gets the request as sent and keeps the answer. ``first``: the
        replica already chosen for this call (if it is still routed)."""
        name = entry.route.service
        metrics = self.metrics
        length = request.content_length
        body: bytes | None = None
        stream = False
        if request.has_body:
            if length is not None and not request.body.complete:
                stream = True
            else:
                limit = self.settings.max_body_bytes
                try:
                    body = await request.body.read_all(limit)
                except BodyTooLarge:
                    raise Problem(
                        413, f"request body exceeds the limit of {limit} bytes", service=name
                    ) from None
        headers = self._upstream_headers(request, len(body) if body is not None else length)
        if copy is not None:
            copy.headers, copy.body = headers, body
        tried: list[Endpoint] = []
        while True:
            endpoint = first if first in entry.endpoints else None
            first = None
            if endpoint is None:
                endpoint = self.balancer.choose(entry.endpoints, tried)
            if endpoint is None:
                raise self._unavailable(
                    name, f"no replica of service {name!r} accepted the connection"
                )
            endpoint.outstanding += 1
            try:
                try:
                    conn = await self.upstreams.acquire(
                        endpoint.host, endpoint.port, self._connect_s
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
                metrics.upstream_duration.observe((name,), time.perf_counter() - sent_at)
                return ex.status
            if request.body.failed:
                raise ClientGone()
            metrics.upstream_errors.inc((name, ex.error.kind))
            if ex.status:
                return ex.status  # cut mid-response; the client saw this status
            raise self._upstream_problem(entry, ex.error)


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
                    body = await request.body.read_all(self.max_body_bytes)
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
