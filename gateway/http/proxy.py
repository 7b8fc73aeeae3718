"""The predict proxy: calls to a service's replicas. :mod:`gateway.app` calls ``dispatch``
once per request; the byte-level work is in :mod:`gateway.http.upstream`.

Who is refused, and why, is :mod:`gateway.admission`'s (the gRPC door's too); this door
reads the service from the path and the token from ``Authorization``, and answers each kind
of refusal with its status (:data:`gateway.http.problems.HTTP_STATUS`): 404 unknown service
· 401 missing/wrong token or EAS signature (the detail names the Date, Content-MD5 or
signature at fault) · 403 Triton admin path · 413 body over the limit · 503 no ready replica
· 429 over the rate limit · 450 over the queue size (``max_queue_size``). A service at zero
that its autoscaler wakes is not a 503: the call is held (:mod:`gateway.wake`) until a
replica is ready, then admitted again — 450 when too many are held already, 504 when none
is ready within the service's timeout. Then it goes to the replica with the fewest requests
in flight; one that refuses the connection is skipped (nothing was sent to it). Past that
point: 408 if the replica does not answer within the service's timeout (``rpc.keepalive``,
as EAS answers it), 502 if it fails before its response head; a failure after the head
cuts the client connection, since the status is already out.

Two paths share that logic. The *fast path* — whole small body already read, an idle
keep-alive connection to the chosen replica — runs entirely in callbacks, here (compiled).
Everything else (connecting, skipping refusing replicas, reading a chunked body, mirrors,
waking) runs as a coroutine, in :mod:`gateway.http.forwarding` (interpreted).

A signed call's body must match its Content-MD5 before any of it reaches a replica: one
whose body is all in at admission is checked there; one still arriving is read whole
(within the body limit) by the slow path, checked, then sent. Unsigned calls stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Iterable
from hmac import compare_digest
from typing import Any

from mypy_extensions import mypyc_attr

from gateway.admission import ADMIN_API, Admission, Refused
from gateway.http.derived import MAX_UPSTREAM_HEADS
from gateway.http.forwarding import CLIENT_CLOSED, SlowPath, upstream_problem
from gateway.http.headers import predict_upstream_headers
from gateway.http.pool import UpstreamPool
from gateway.http.problems import refused_problem, write_problem
from gateway.http.server import Head, Request
from gateway.http.upstream import Exchange, UpstreamConnection, request_head
from gateway.metrics import GatewayMetrics
from gateway.mirroring.shadows import Mirrors
from gateway.routing.auth import (
    SignatureRefusal,
    SigningKey,
    body_matches,
    is_signed,
    md5_refusal,
    presented_token,
    signature_matches,
    signature_refusal,
    signed_head,
    token_matches,
)
from gateway.routing.balancer import Endpoint, EndpointPool
from gateway.routing.paths import Target
from gateway.routing.route_table import Asleep, GroupEntry, ServiceRoute
from gateway.settings import GatewaySettings
from gateway.wake import Waking


def same_credential(head: Head, presented: bytes, accepted: bytes) -> bool:
    """Whether ``presented`` (``head``'s Authorization value) is the one that passed last:
    the same object, or equal in constant time — then ``head`` keeps the accepted object
    instead. A client repeats its head with its header values (see
    :class:`gateway.http.server.Head`), so its next calls are the same object, whichever of the
    connections passed first."""
    if presented is accepted:
        return True
    if not compare_digest(presented, accepted):
        return False
    head.authorization = head.hmap[b"authorization"] = accepted  # the same bytes
    return True


class PredictProxy:
    """``/api/predict/<service>/<triton path>`` → a ready replica of ``<service>``."""

    def __init__(
        self,
        settings: GatewaySettings,
        admission: Admission,
        balancer: EndpointPool,
        metrics: GatewayMetrics,
        upstreams: UpstreamPool,
        waking: Waking,
    ) -> None:
        self.settings = settings
        self.admission = admission
        self.routes = admission.routes
        self.balancer = balancer
        self.metrics = metrics
        self.upstreams = upstreams
        self._max_skew_s = settings.signature_skew_s  # (the settings are not compiled)
        # The in-flight counts' clock (time.monotonic), the upstream pool's: a call reads it
        # once when admitted and once when it ends. (An attribute: a module global is a dict
        # lookup per call.)
        self._clock = upstreams.time
        self.mirrors = Mirrors(
            self.routes, balancer, upstreams, metrics, connect_timeout_s=settings.connect_timeout_s
        )
        self.waking = waking
        self.slow = SlowPath(
            settings,
            admission,
            metrics,
            balancer,
            upstreams,
            self.mirrors,
            waking,
            readmit=self.readmit,
            count=self.count,
        )

    # -- admission (shared) ---------------------------------------------------------------

    def resolve(self, request: Request, target: Target) -> tuple[ServiceRoute, bool]:
        """The service that serves this call, and whether the caller is already
        authenticated (by a group token). A group's name wins over a service's: the group
        endpoint is what callers of a released service use; every member stays reachable at
        ``<group>.<service>`` (EAS's spelling) and, without a clash, at its own name."""
        name = target.service
        routes = self.routes
        found = routes.named(name)
        if isinstance(found, GroupEntry):
            self._authenticate_group(request, found)
            return self.admission.member(found), True
        if found is None:
            raise self.admission.unknown(name)
        entry, group = found
        if group is None:
            derived = request.head.derived
            if derived is not None and derived.target is target:
                # The head's own target: its repeats skip the lookup.
                derived.entry = entry
                derived.entry_at = routes.generation
            return entry, False
        if self._accepts(request, lambda: (group.digest,), lambda: (group.key,), group):
            return entry, True
        return entry, False

    def _authenticate_group(self, request: Request, group: GroupEntry) -> None:
        """The group's token, or any member's, opens the group endpoint (so does a
        signature made with any of them)."""
        name = group.route.group
        routes = self.routes
        if not self._accepts(
            request, lambda: routes.group_tokens(group), lambda: routes.group_keys(group), group
        ):
            auth = request.head.authorization
            if is_signed(auth):
                refusal = signature_refusal(any(k is not None for k in routes.group_keys(group)))
                raise Admission.unauthenticated(name, refusal.detail)
            if presented_token(auth) is None:
                raise Admission.unauthenticated(
                    name, "missing Authorization header with the group token"
                )
            raise Admission.unauthenticated(
                name, "the token matches neither this group nor its members"
            )

    def _signed_by(self, request: Request, keys: Iterable[SigningKey | None], name: str) -> bool:
        """Whether the call's EAS signature is made with one of ``keys`` (its body is
        checked by :meth:`admit`); a head that cannot be signed right (no Date or a skewed
        one, no Content-MD5) is refused at once."""
        auth = request.head.authorization
        assert auth is not None
        head = signed_head(
            auth, request.method, request.target, request.hmap, time.time(), self._max_skew_s
        )
        if isinstance(head, SignatureRefusal):
            raise Admission.unauthenticated(name, head.detail)
        return any(key is not None and signature_matches(key, head) for key in keys)

    def _accepts(
        self,
        request: Request,
        digests: Callable[[], Iterable[bytes]],
        keys: Callable[[], Iterable[SigningKey | None]],
        holder: GroupEntry,
    ) -> bool:
        """Whether the Authorization header opens ``holder``: the credential that passed
        last is compared first; the digests are listed only when it does not match. A
        signed call is checked in full each time, against ``keys``."""
        auth = request.head.authorization
        if is_signed(auth):
            return self._signed_by(request, keys(), holder.route.group)
        accepted = holder.accepted
        if (
            auth is not None
            and accepted is not None
            and same_credential(request.head, auth, accepted)
        ):
            return True
        token = presented_token(auth)
        if token is None or not any(token_matches(token, d) for d in digests()):
            return False
        holder.accepted = auth
        return True

    def admit(
        self,
        request: Request,
        target: Target,
        entry: ServiceRoute,
        authenticated: bool,
        now: float,
    ) -> bytes | None:
        """The credential step (unless a group's ``authenticated`` the call already), then
        :meth:`gateway.admission.Admission.admit`: raises :class:`Refused` or
        :class:`Asleep`, or takes the call's place in the service's in-flight count at
        ``now`` (the caller must ``entry.in_flight.leave()``). Returns the Content-MD5 a
        signed call's body must still be checked against once read (None: nothing left)."""
        name = entry.service
        auth = request.head.authorization
        accepted = entry.accepted
        signed = False
        if not authenticated and (
            auth is None or accepted is None or not same_credential(request.head, auth, accepted)
        ):
            if is_signed(auth):
                if not self._signed_by(request, (entry.key,), name):
                    refusal = signature_refusal(entry.key is not None)
                    raise Admission.unauthenticated(name, refusal.detail)
                signed = True
            else:
                token = presented_token(auth)
                if token is None:
                    raise Admission.unauthenticated(
                        name, "missing Authorization header with the service token"
                    )
                if not token_matches(token, entry.digest):
                    raise Admission.unauthenticated(name, "the token does not match this service")
                entry.accepted = auth
        elif authenticated:
            signed = is_signed(auth)  # by a group's key: its body is still to check
        unchecked: bytes | None = None
        if signed:
            md5 = request.hmap[b"content-md5"]  # there: signed_head refuses a call without
            body = request.body
            if not body.complete:
                unchecked = md5
            elif not body_matches(md5, body.chunks()):
                raise Admission.unauthenticated(name, md5_refusal().detail)
        self.admission.admit(
            entry,
            grpc=False,
            admin=ADMIN_API if target.admin else None,
            length=request.content_length,
            now=now,
        )
        return unchecked

    def readmit(
        self, request: Request, target: Target, now: float
    ) -> tuple[ServiceRoute, bytes | None]:
        """Resolve and admit a call again (a held one, once its service woke); the entry,
        and what :meth:`admit` left to check."""
        entry, authenticated = self.resolve(request, target)
        return entry, self.admit(request, target, entry, authenticated, now)

    def count(self, label: str, code: int, started: float) -> None:
        series = self.metrics.series(label)
        series.answered(code)
        series.duration.observe(self._clock() - started)

    # -- dispatch ---------------------------------------------------------------------------

    def dispatch(self, request: Request, target: Target) -> Coroutine[Any, Any, None] | None:
        started = self._clock()
        entry: ServiceRoute | None = None
        derived = request.head.derived
        try:
            if (
                derived is not None
                and derived.entry_at == self.routes.generation
                and derived.target is target
                and derived.entry is not None
            ):
                # A repeated head naming a service (no group), and no table since.
                entry = derived.entry
                unchecked = self.admit(request, target, entry, False, started)
            else:
                entry, authenticated = self.resolve(request, target)
                unchecked = self.admit(request, target, entry, authenticated, started)
        except Asleep as a:
            return self.slow.held(request, target, a.entry, started)
        except Refused as r:
            p = refused_problem(r)
            self.count(entry.service if entry is not None else "", p.status, started)
            write_problem(request, p, close=p.status == 413)
            request.finish()
            return None
        if entry.mirror is not None:
            copy = self.mirrors.copy(request, target, entry)
            if copy is not None:
                return self.slow.run(request, target, entry, started, copy, unchecked=unchecked)
        if unchecked is not None:  # a signed body still arriving: read whole, then checked
            return self.slow.run(request, target, entry, started, unchecked=unchecked)
        endpoint = self.balancer.choose(entry.endpoints)
        # A body of known length goes on by callbacks, whole or as it comes (a chunked one
        # is read whole first, to send it with its length).
        if endpoint is not None and (request.content_length is not None or not request.has_body):
            conn = self.upstreams.idle(endpoint.address)
            if conn is not None:
                self._fast(request, target, entry, endpoint, conn, started)
                return None
        # The replica chosen is the one to connect to: choosing again would move the
        # balancer's turn twice per call, and sequential calls would all reach one replica.
        return self.slow.run(request, target, entry, started, first=endpoint)

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
        derived = request.head.derived
        if derived is not None and derived.last_endpoint is endpoint:
            head = derived.last_head
        else:
            made = None if derived is None else derived.upstream_heads.get(endpoint)
            if made is None:
                headers = predict_upstream_headers(
                    request.headers, request.peer, request.content_length
                )
                made = request_head(request.method, target.path_qs, endpoint.host_header, headers)
                if derived is not None:
                    if len(derived.upstream_heads) >= MAX_UPSTREAM_HEADS:
                        derived.upstream_heads.clear()
                    derived.upstream_heads[endpoint] = made
            head = made
            if derived is not None:
                derived.last_head = made
                derived.last_endpoint = endpoint
        endpoint.outstanding += 1
        ex = ProxiedExchange(self, request, conn, entry, endpoint, started)
        ex.send(head, body, started)  # its deadline runs from admission, microseconds ago
        if stream:
            ex.request_body_sent = False
            request.body.pipe_to(conn)

    def fast_done(self, ex: ProxiedExchange, now: float) -> None:
        """``ex`` ended at ``now`` (the upstream pool's clock, which is this one's)."""
        entry, endpoint, started = ex.entry, ex.endpoint, ex.started
        endpoint.outstanding -= 1
        admitted = entry.admitted
        if admitted is not None:  # (it is: the call was admitted)
            admitted.leave_at(now)
        name = entry.service
        request = ex.request
        if ex.aborted:
            self.count(name, CLIENT_CLOSED, started)
            return
        if ex.error is None:
            # Sent when admitted (see ProxiedExchange.started): one time for both histograms.
            self.metrics.series(name).relayed(ex.status, now - started)
            request.finish_at(now)
            return
        self.metrics.upstream_errors.inc((name, ex.error.kind))
        if ex.status:
            self.count(name, ex.status, started)
        else:
            p = upstream_problem(entry, ex.error)
            self.count(name, p.status, started)
            write_problem(request, p)
        request.finish()


@mypyc_attr(free_list_len=1)  # as server.Body
class ProxiedExchange(Exchange):
    """The fast path's exchange, holding what its end needs (no tuple, no boxed times), and
    reporting its end to the proxy by a direct call rather than through a callback."""

    __slots__ = ("endpoint", "entry", "proxy", "started")

    def __init__(
        self,
        proxy: PredictProxy,
        request: Request,
        conn: UpstreamConnection,
        entry: ServiceRoute,
        endpoint: Endpoint,
        started: float,
    ) -> None:
        super().__init__(request, conn, timeout_s=entry.timeout_s)
        self.proxy = proxy
        self.entry = entry
        self.endpoint = endpoint
        # When the call was admitted, and sent: on this path the request goes out in the
        # callback that admitted it, microseconds later, so one clock read is both.
        self.started = started

    def done(self, now: float) -> None:
        self.proxy.fast_done(self, now)
