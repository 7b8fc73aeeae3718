"""The gateway's gRPC door: Triton's ``inference.GRPCInferenceService`` on its own port,
each call relayed to a ready replica's gRPC port. ``openeas gateway --grpc-port`` and
``openeas up`` call :func:`start_grpc` beside :func:`gateway.app.start_gateway`, on the same
route state, balancer, limits, load reports and metrics as the HTTP door.

The HTTP/2 work is :mod:`gateway.grpc.relay` (messages pass as bytes, never decoded); what
a call may do is decided in :mod:`gateway.grpc.rules`. This module admits calls:

A call names its service by its ``:authority`` (``<service>.<domain>`` when
``OPENEAS_GATEWAY_DOMAIN`` is set, as EAS's per-service domains do; its token must then be
that service's) or, for clients that only have an address, by its token alone (tokens are
unique per cluster; the route table keeps a digest → service index). Service groups work
as on the HTTP door: ``<group>.<domain>``, or the group's token alone, reaches the member
its traffic split picks (the group's token or any member's opens it), and
``<group>.<service>.<domain>`` one member. Refusals:
UNAUTHENTICATED (no or unknown token), NOT_FOUND (no service of that host name),
PERMISSION_DENIED (admin API), UNAVAILABLE (no ready replica), RESOURCE_EXHAUSTED (rate
limit, max in flight, message over the body limit, the wake queue full), DEADLINE_EXCEEDED
(the route's timeout). A call for a service its autoscaler took to zero is held until a
replica is ready, as on the HTTP door. A replica's own status passes unchanged.
"""

from __future__ import annotations

import asyncio
import hmac
import socket
import time
from typing import TYPE_CHECKING

from gateway.grpc.relay import Call, ClientConn, Relay
from gateway.grpc.rules import (
    ADMIN_METHODS,
    TENANT_METHODS,
    CallHead,
    Refusal,
    admin_refusal,
    service_for,
)
from gateway.routing.balancer import Endpoint
from gateway.routing.route_table import Asleep, GroupEntry, RouteChange, ServiceRoute
from gateway.wake import NotWakeable, QueueFull, WakeTimeout, queue_bound

if TYPE_CHECKING:
    from gateway.app import Gateway


class GrpcDoor:
    """Admission of gRPC calls under the gateway's routes; one per gateway."""

    def __init__(self, gateway: Gateway) -> None:
        self.settings = gateway.settings
        self.routes = gateway.routes
        self.balancer = gateway.balancer
        self.metrics = gateway.metrics
        self.activity = gateway.activity
        self.waking = gateway.waking
        self.max_message_bytes = gateway.settings.max_body_bytes
        self.relay = Relay(
            self, gateway.settings.connect_timeout_s, yield_at=gateway.settings.grpc_yield_at
        )
        gateway.routes.listeners.append(self._on_change)

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
            return self._member(found)
        if found is None:
            raise Refusal("NOT_FOUND", f"no service {named!r} behind this gateway")
        entry, group = found
        tokens = [entry.digest] if group is None else [entry.digest, group.digest]
        name = entry.route.service
        self._authenticate(head, tokens, name, f"the token does not match service {name!r}")
        return entry

    @staticmethod
    def _authenticate(head: CallHead, digests: list[bytes], name: str, wrong: str) -> None:
        if head.digest is None:
            raise Refusal("UNAUTHENTICATED", f"missing authorization metadata for {name!r}", name)
        if not any(hmac.compare_digest(head.digest, d) for d in digests):
            raise Refusal("UNAUTHENTICATED", wrong, name)

    def _by_token(self, head: CallHead) -> ServiceRoute:
        """For callers that only have the gateway's address: the service, or the group
        (a member is picked), whose token the call carries."""
        if head.digest is None:
            raise Refusal(
                "UNAUTHENTICATED", "missing authorization metadata with the service token"
            )
        routes = self.routes
        name = routes.by_digest.get(head.digest)
        found = None if name is None else routes.get(name)
        if found is not None:
            return found
        group_name = routes.group_by_digest.get(head.digest)
        group = None if group_name is None else routes.groups.get(group_name)
        if group is None:
            raise Refusal("UNAUTHENTICATED", "the token matches no service or group")
        return self._member(group)

    def _member(self, group: GroupEntry) -> ServiceRoute:
        """The member that takes this call of ``group`` (its traffic split, as on HTTP)."""
        entry = self.routes.member(group, grpc=True)
        if entry is not None:
            return entry
        name = group.route.group
        raise Refusal(
            "UNAVAILABLE",
            f"group {name!r} has no member taking group traffic with a ready gRPC replica",
            name,
        )

    def admit(self, head: CallHead) -> ServiceRoute:
        method = head.method
        if method not in TENANT_METHODS and method not in ADMIN_METHODS:
            raise Refusal("UNIMPLEMENTED", f"unknown method {method or 'path'!r}")
        entry = self._service(head)
        name = entry.route.service
        if method in ADMIN_METHODS:
            raise admin_refusal(method, name)
        if not entry.grpc_endpoints:
            if entry.route.wakeable:
                raise Asleep(entry)
            raise Refusal(
                "UNAVAILABLE",
                f"service {name!r} has no ready replica with a gRPC port "
                f"(status: {entry.route.status})",
                name,
            )
        over = entry.take_place(self.activity, time.monotonic())
        if over is not None:
            raise Refusal("RESOURCE_EXHAUSTED", over.detail, name)
        return entry

    async def wake(self, entry: ServiceRoute) -> None:
        """Hold a call for a service at zero as the HTTP door does (:mod:`gateway.wake`),
        with its answers as gRPC statuses."""
        name = entry.route.service
        try:
            await self.waking.hold_call(entry, self.activity, self.settings.wake_queue)
        except QueueFull:
            bound = queue_bound(entry, self.settings.wake_queue)
            raise Refusal(
                "RESOURCE_EXHAUSTED",
                f"service {name!r} is waking up from zero and already holds {bound} calls: "
                "this one was not processed, retry in a moment",
                name,
            ) from None
        except WakeTimeout:
            raise Refusal(
                "DEADLINE_EXCEEDED",
                f"service {name!r} was scaled to zero and no replica was ready within "
                f"{entry.timeout_s * 1000:.0f} ms (its timeout)",
                name,
            ) from None
        except NotWakeable as e:
            raise Refusal(
                "UNAVAILABLE", f"service {name!r} has no ready replica: {e}", name
            ) from None

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
    gateway: Gateway, *, host: str | None = None, port: int | None = None, reuse_port: bool = False
) -> GrpcRunner:
    """Serve ``gateway``'s routes over gRPC on ``host:port`` (default: the settings';
    ``port=0`` picks a free one). ``reuse_port`` lets forked workers share the port."""
    settings = gateway.settings
    host = settings.host if host is None else host
    port = settings.grpc_port if port is None else port
    if port is None:
        raise ValueError("no gRPC port: set OPENEAS_GATEWAY_GRPC_PORT or --grpc-port")
    door = GrpcDoor(gateway)
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
