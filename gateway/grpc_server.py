"""The gateway's gRPC door: Triton's ``inference.GRPCInferenceService`` on its own port,
forwarded to a ready replica's gRPC port. ``openeas gateway --grpc-port`` and ``openeas up``
call :func:`start_grpc` beside :func:`gateway.app.start_gateway`, on the same route state,
balancer, limits, load reports and metrics as the HTTP door.

Messages stay bytes: the server's handlers and the upstream channels use identity
(de)serializers, so a 1 MB tensor costs a copy, not a protobuf parse. The one grpcio module
of the gateway (grpcio's asyncio server and client, in the gateway's event loop); what a call
may do is decided in :mod:`gateway.grpc_rules`.

A call names its service by its token (tokens are unique per cluster; the route table keeps
a digest → service index), since grpcio's server does not expose ``:authority``. Refusals:
UNAUTHENTICATED (no or unknown token), PERMISSION_DENIED (admin API), UNAVAILABLE (no
ready replica), RESOURCE_EXHAUSTED (rate limit, max in flight, message over the body
limit), DEADLINE_EXCEEDED (the route's timeout). A replica's own status passes unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import grpc

from gateway.balancer import Endpoint
from gateway.grpc_rules import (
    ADMIN_METHODS,
    SERVICE,
    TENANT_METHODS,
    Refusal,
    admin_refusal,
    credential,
    deadline_s,
    forwarded_metadata,
)
from gateway.route_table import RouteChange, ServiceRoute

if TYPE_CHECKING:
    from gateway.app import Gateway

_UNLIMITED = -1


def _identity(data: bytes) -> bytes:
    return data


async def _abort(
    context: grpc.aio.ServicerContext[Any, Any], code: grpc.StatusCode, details: str
) -> NoReturn:
    await context.abort(code, details)
    raise AssertionError("ServicerContext.abort returns by raising")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class _Forward:
    """One admitted call on its way to a replica."""

    entry: ServiceRoute
    endpoint: Endpoint
    timeout_s: float
    ours: bool  # the deadline is the route's (not the caller's own)
    metadata: tuple[tuple[str, str | bytes], ...]


class GrpcProxy:
    """Admission and forwarding of one gRPC call; one per gateway."""

    def __init__(self, gateway: Gateway) -> None:
        self.settings = gateway.settings
        self.routes = gateway.routes
        self.balancer = gateway.balancer
        self.metrics = gateway.metrics
        self.activity = gateway.activity
        self._channels: dict[Endpoint, grpc.aio.Channel] = {}
        # replica → method path → its callable on the replica's channel, made once.
        self._calls: dict[Endpoint, dict[str, Any]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        gateway.routes.listeners.append(self._on_change)

    # -- replicas' channels -----------------------------------------------------------------

    def _call(self, endpoint: Endpoint, path: str, shape: str) -> Any:
        calls = self._calls.get(endpoint)
        if calls is None:
            calls = self._calls[endpoint] = {}
        call = calls.get(path)
        if call is None:
            channel = self._channel(endpoint)
            make = channel.stream_stream if shape == "stream" else channel.unary_unary
            call = calls[path] = make(
                path, request_serializer=_identity, response_deserializer=_identity
            )
        return call

    def _channel(self, endpoint: Endpoint) -> grpc.aio.Channel:
        channel = self._channels.get(endpoint)
        if channel is None:
            target = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
            channel = self._channels[endpoint] = grpc.aio.insecure_channel(
                f"{target}:{endpoint.port}",
                options=[
                    ("grpc.max_send_message_length", _UNLIMITED),
                    ("grpc.max_receive_message_length", _UNLIMITED),
                ],
            )
        return channel

    def _on_change(self, change: RouteChange) -> None:
        """Close channels to replicas no route lists any more, letting their calls finish:
        Triton waits for open connections before it exits."""
        for endpoint in change.released:
            channel = self._channels.pop(endpoint, None)
            self._calls.pop(endpoint, None)
            if channel is not None:
                task = asyncio.get_running_loop().create_task(channel.close(grace=None))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        self._calls.clear()
        for channel in channels.values():
            await channel.close(grace=None)
        for task in list(self._closing):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- admission --------------------------------------------------------------------------

    def _admit(self, metadata: Any, method: str) -> ServiceRoute:
        """The service the call is for, its place taken in the service's in-flight count
        (the caller must ``leave()``); raises the :class:`Refusal` otherwise."""
        token = credential(metadata)
        if token is None:
            raise Refusal(
                "UNAUTHENTICATED", "missing authorization metadata with the service token"
            )
        entry = self.routes.by_token(token)
        if entry is None:
            raise Refusal("UNAUTHENTICATED", "the token matches no service")
        name = entry.route.service
        if method in ADMIN_METHODS:
            raise admin_refusal(method, name)
        if not entry.grpc_endpoints:
            raise Refusal(
                "UNAVAILABLE",
                f"service {name!r} has no ready replica with a gRPC port "
                f"(status: {entry.route.status})",
                name,
            )
        over = entry.take_place(self.activity)
        if over is not None:
            raise Refusal("RESOURCE_EXHAUSTED", over.detail, name)
        return entry

    def _count(self, service: str, code: grpc.StatusCode, started: float) -> None:
        self.metrics.grpc_requests.inc((service, code.name))
        self.metrics.grpc_duration.observe((service,), time.perf_counter() - started)

    async def _refuse(
        self, context: grpc.aio.ServicerContext[Any, Any], refusal: Refusal, started: float
    ) -> NoReturn:
        code = grpc.StatusCode[refusal.code]
        self._count(refusal.service, code, started)
        await _abort(context, code, refusal.details)

    async def _begin(
        self, context: grpc.aio.ServicerContext[Any, Any], method: str, started: float
    ) -> _Forward:
        """Admit the call (or answer it with its refusal) and pick its replica."""
        metadata = context.invocation_metadata() or ()
        try:
            entry = self._admit(metadata, method)
        except Refusal as refusal:
            await self._refuse(context, refusal, started)
        endpoint = self.balancer.choose(entry.grpc_endpoints)
        assert endpoint is not None  # admitted: the service has one
        timeout, ours = deadline_s(entry.timeout_s, context.time_remaining())
        endpoint.outstanding += 1
        return _Forward(entry, endpoint, timeout, ours, forwarded_metadata(metadata))

    def _end(self, forward: _Forward, code: grpc.StatusCode, started: float) -> None:
        forward.endpoint.outstanding -= 1
        forward.entry.in_flight.leave()
        self._count(forward.entry.route.service, code, started)

    def _upstream_failed(
        self, forward: _Forward, error: grpc.aio.AioRpcError
    ) -> tuple[grpc.StatusCode, str]:
        """What the caller sees of a replica's failure: its status as is, but a deadline
        that was the route's says which one. A replica that cannot be reached is tried
        last for a moment, as on the HTTP door."""
        code, entry = error.code(), forward.entry
        if code == grpc.StatusCode.UNAVAILABLE:
            self.balancer.mark_down(forward.endpoint)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and forward.ours:
            return code, f"the replica did not answer within {entry.timeout_s * 1000:.0f} ms"
        return code, error.details() or code.name

    # -- the two call shapes ------------------------------------------------------------------

    def unary(self, method: str) -> Callable[..., Any]:
        path = f"/{SERVICE}/{method}"

        async def handle(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
            started = time.perf_counter()
            forward = await self._begin(context, method, started)
            code = grpc.StatusCode.OK
            try:
                reply: bytes = await self._call(forward.endpoint, path, "unary")(
                    request, timeout=forward.timeout_s, metadata=forward.metadata
                )
                return reply
            except grpc.aio.AioRpcError as e:
                code, details = self._upstream_failed(forward, e)
                await _abort(context, code, details)
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            finally:
                self._end(forward, code, started)

        return handle

    def stream(self, method: str) -> Callable[..., Any]:
        path = f"/{SERVICE}/{method}"

        async def handle(
            requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[bytes]:
            started = time.perf_counter()
            forward = await self._begin(context, method, started)
            code = grpc.StatusCode.OK
            call = None
            try:
                # The route's timeout bounds the whole stream, as it bounds one HTTP call.
                call = self._call(forward.endpoint, path, "stream")(
                    requests, timeout=forward.timeout_s, metadata=forward.metadata
                )
                async for reply in call:
                    yield reply
            except grpc.aio.AioRpcError as e:
                code, details = self._upstream_failed(forward, e)
                await _abort(context, code, details)
            except (asyncio.CancelledError, GeneratorExit):
                code = grpc.StatusCode.CANCELLED
                if call is not None:
                    call.cancel()
                raise
            finally:
                self._end(forward, code, started)

        return handle

    def handlers(self) -> grpc.GenericRpcHandler:
        """Every tenant method forwarded; admin ones refused after the token check (as the
        HTTP door does); anything else UNIMPLEMENTED by grpcio itself."""
        table: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        for method, shape in TENANT_METHODS.items():
            if shape == "stream":
                table[method] = grpc.stream_stream_rpc_method_handler(
                    self.stream(method), _identity, _identity
                )
            else:
                table[method] = grpc.unary_unary_rpc_method_handler(
                    self.unary(method), _identity, _identity
                )
        for method in ADMIN_METHODS:
            table[method] = grpc.unary_unary_rpc_method_handler(
                self.unary(method), _identity, _identity
            )
        return grpc.method_handlers_generic_handler(SERVICE, table)


class GrpcRunner:
    """A started gRPC door; :meth:`close` stops it."""

    def __init__(self, server: grpc.aio.Server, proxy: GrpcProxy, host: str, port: int) -> None:
        self.server = server
        self.proxy = proxy
        self.host = host
        self.port = port

    @property
    def address(self) -> str:
        """``host:port``, what ``tritonclient.grpc`` takes as its url."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    async def close(self, grace_s: float = 10.0) -> None:
        """Stop accepting; calls in progress get ``grace_s`` to finish."""
        await self.server.stop(grace_s)
        await self.proxy.close()


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
    proxy = GrpcProxy(gateway)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", settings.max_body_bytes),
            ("grpc.max_send_message_length", _UNLIMITED),
            # grpcio turns SO_REUSEPORT on by default: a second gateway would then share a
            # port silently instead of failing to bind.
            ("grpc.so_reuseport", 1 if reuse_port else 0),
        ]
    )
    server.add_generic_rpc_handlers([proxy.handlers()])
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(target)
    except RuntimeError as e:
        # grpcio's message sends the reader to GRPC_VERBOSITY; the likely causes are these.
        raise OSError(
            f"cannot bind the gRPC port {target} (in use, or not an address of this machine)"
        ) from e
    await server.start()
    return GrpcRunner(server, proxy, host, bound)
