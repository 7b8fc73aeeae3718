"""The gateway's gRPC door: Triton's ``inference.GRPCInferenceService`` on its own port,
each call relayed to a ready replica's gRPC port. ``openeas gateway --grpc-port`` and
``openeas up`` call :func:`start_grpc` with :meth:`gateway.app.Gateway.grpc_door`, beside
:func:`gateway.app.start_gateway`: the same admission, balancer, load reports and metrics as
the HTTP door.

The HTTP/2 work is :mod:`gateway.grpc.relay` (messages pass as bytes, never decoded); what
a call may do is decided in :mod:`gateway.grpc.rules`. This module admits calls:

A call names its service by its ``:authority`` (``<service>.<domain>`` when
``OPENEAS_GATEWAY_DOMAIN`` is set, as EAS's per-service domains do; its token must then be
that service's) or, for clients that only have an address, by its token alone (tokens are
unique per cluster; the route table keeps a digest → service index). Service groups work
as on the HTTP door: ``<group>.<domain>``, or the group's token alone, reaches the member
its traffic split picks (the group's token or any member's opens it), and
``<group>.<service>.<domain>`` one member. Who is refused, and why, is
:mod:`gateway.admission`'s, as on the HTTP door; :data:`GRPC_CODE` answers each kind of
refusal: UNAUTHENTICATED (no or unknown token), NOT_FOUND (no service of that host name),
PERMISSION_DENIED (admin API), UNAVAILABLE (no ready replica), RESOURCE_EXHAUSTED (rate
limit, max in flight, the wake queue full), DEADLINE_EXCEEDED (no replica woke within the
route's timeout); an unknown method is UNIMPLEMENTED, a message over the body limit
RESOURCE_EXHAUSTED (:mod:`gateway.grpc.relay`). A call for a service its autoscaler took to
zero is held until a replica is ready, as on the HTTP door. A replica's own status passes
unchanged.
"""

from __future__ import annotations

import asyncio
import hmac
import socket
import time
from typing import Final

from gateway import admission
from gateway.admission import Admission, Refused
from gateway.grpc.relay import Call, ClientConn, Relay
from gateway.grpc.rules import ADMIN_METHODS, TENANT_METHODS, CallHead, Refusal, service_for
from gateway.metrics import GatewayMetrics
from gateway.routing.balancer import Endpoint, EndpointPool
from gateway.routing.route_table import GroupEntry, RouteChange, ServiceRoute
from gateway.settings import GatewaySettings
from gateway.wake import NotWakeable, QueueFull, WakeTimeout, Waking

# Each kind of refusal (gateway.admission) as this door's status.
GRPC_CODE: Final = {
    admission.NOT_FOUND: "NOT_FOUND",
    admission.UNAUTHENTICATED: "UNAUTHENTICATED",
    admission.FORBIDDEN: "PERMISSION_DENIED",
    admission.TOO_LARGE: "RESOURCE_EXHAUSTED",
    admission.UNAVAILABLE: "UNAVAILABLE",
    admission.OVER_LIMIT: "RESOURCE_EXHAUSTED",
    admission.QUEUE_FULL: "RESOURCE_EXHAUSTED",
    admission.WAKE_TIMEOUT: "DEADLINE_EXCEEDED",
}


def refusal(refused: Refused) -> Refusal:
    """``refused`` as this door answers it."""
    return Refusal(GRPC_CODE[refused.kind], refused.detail, refused.service)


class GrpcDoor:
    """Admission of gRPC calls under the gateway's routes; one per gateway, beside the HTTP
    door on the same :class:`Admission`, balancer, metrics and held calls."""

    def __init__(
        self,
        settings: GatewaySettings,
        admission: Admission,
        balancer: EndpointPool,
        metrics: GatewayMetrics,
        waking: Waking,
    ) -> None:
        self.settings = settings
        self.admission = admission
        self.routes = admission.routes
        self.balancer = balancer
        self.metrics = metrics
        self.waking = waking
        self.max_message_bytes = settings.max_body_bytes
        self.relay = Relay(self, settings.connect_timeout_s, yield_at=settings.grpc_yield_at)
        self.routes.listeners.append(self._on_change)

    def _on_change(self, change: RouteChange) -> None:
        self.relay.release(list(change.released))

    def _service(self, head: CallHead) -> ServiceRoute:
        """The service that serves the call, its caller authenticated; a host name
        resolves as on the HTTP door (:meth:`RouteState.named`)."""
        named = service_for(head.authority, self.settings.domain)
        if named is None:
            return self._by_token(head)
        found = self.routes.named(named)
        if isinstance(found, GroupEntry):
            wrong = f"the token matches neither group {named!r} nor its members"
            self._authenticate(head, self.routes.group_tokens(found), named, wrong)
            return self.admission.member(found, grpc=True)
        if found is None:
            raise self.admission.unknown(named)
        entry, group = found
        tokens = [entry.digest] if group is None else [entry.digest, group.digest]
        name = entry.service
        self._authenticate(head, tokens, name, f"the token does not match service {name!r}")
        return entry

    @staticmethod
    def _authenticate(head: CallHead, digests: list[bytes], name: str, wrong: str) -> None:
        if head.digest is None:
            raise Admission.unauthenticated(name, f"missing authorization metadata for {name!r}")
        if not any(hmac.compare_digest(head.digest, d) for d in digests):
            raise Admission.unauthenticated(name, wrong)

    def _by_token(self, head: CallHead) -> ServiceRoute:
        """For callers that only have the gateway's address: the service, or the group
        (a member is picked), whose token the call carries."""
        if head.digest is None:
            raise Admission.unauthenticated(
                "", "missing authorization metadata with the service token"
            )
        routes = self.routes
        name = routes.by_digest.get(head.digest)
        found = None if name is None else routes.get(name)
        if found is not None:
            return found
        group_name = routes.group_by_digest.get(head.digest)
        group = None if group_name is None else routes.groups.get(group_name)
        if group is None:
            raise Admission.unauthenticated("", "the token matches no service or group")
        return self.admission.member(group, grpc=True)

    def admit(self, head: CallHead) -> ServiceRoute:
        method = head.method
        if method not in TENANT_METHODS and method not in ADMIN_METHODS:
            raise Refusal("UNIMPLEMENTED", f"unknown method {method or 'path'!r}")
        try:
            entry = self._service(head)
            admin = f"{method}, part of {admission.ADMIN_API}," if method in ADMIN_METHODS else None
            self.admission.admit(entry, grpc=True, admin=admin, length=None, now=time.monotonic())
        except Refused as e:
            raise refusal(e) from None
        return entry

    async def wake(self, entry: ServiceRoute) -> None:
        """Hold a call for a service at zero as the HTTP door does (:mod:`gateway.wake`),
        with its answers as gRPC statuses."""
        try:
            await self.waking.hold_call(entry, self.admission.activity, self.settings.wake_queue)
        except (QueueFull, WakeTimeout, NotWakeable) as e:
            refused = self.admission.not_woken(e, entry)
            raise refusal(refused) from None

    def choose(self, entry: ServiceRoute) -> Endpoint:
        endpoint = self.balancer.choose(entry.grpc_endpoints)
        assert endpoint is not None  # admitted: the service has one
        return endpoint

    def ended(self, call: Call, code: str) -> None:
        if call.entry is not None:
            call.entry.in_flight.leave()
        self.metrics.grpc_requests.inc((call.service, code))
        self.metrics.grpc_duration.observe((call.service,), time.perf_counter() - call.started)

    def unreachable(self, endpoint: Endpoint) -> None:
        """A replica that cannot be reached is tried last for a moment, as on HTTP."""
        self.balancer.mark_down(endpoint)


class GrpcRunner:
    """A started gRPC door; :meth:`close` stops it."""

    def __init__(self, server: asyncio.Server, door: GrpcDoor, host: str, port: int) -> None:
        self.server = server
        self.door = door
        self.host = host
        self.port = port

    @property
    def address(self) -> str:
        """``host:port``, what ``tritonclient.grpc`` takes as its url."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    async def close(self, grace_s: float = 10.0) -> None:
        """Stop accepting; calls in progress get ``grace_s`` to finish."""
        self.server.close()
        await self.door.relay.close(grace_s)
        await self.server.wait_closed()


async def start_grpc(
    door: GrpcDoor,
    *,
    host: str | None = None,
    port: int | None = None,
    reuse_port: bool = False,
) -> GrpcRunner:
    """Serve ``door`` (:meth:`gateway.app.Gateway.grpc_door`) on ``host:port`` (default: the
    settings'; ``port=0`` picks a free one). ``reuse_port`` lets forked workers share the
    port."""
    settings = door.settings
    host = settings.host if host is None else host
    port = settings.grpc_port if port is None else port
    if port is None:
        raise ValueError("no gRPC port: set OPENEAS_GATEWAY_GRPC_PORT or --grpc-port")
    loop = asyncio.get_running_loop()
    try:
        server = await loop.create_server(
            lambda: ClientConn(door.relay), host, port, reuse_port=reuse_port
        )
    except OSError as e:
        raise OSError(
            f"cannot bind the gRPC port {host}:{port} (in use, or not an address of this "
            f"machine): {e.strerror or e}"
        ) from e
    bound = next(s.getsockname()[1] for s in server.sockets if s.family in _INET)
    return GrpcRunner(server, door, host, bound)


_INET = (socket.AF_INET, socket.AF_INET6)
