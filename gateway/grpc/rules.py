"""What the gateway's gRPC door lets through, as pure decisions: which methods of Triton's
``inference.GRPCInferenceService`` a tenant may call, which service a call is for, and which
status refuses it. :mod:`gateway.grpc.server` asks these per call and does the I/O.

Refusals carry gRPC status code *names* (``"UNAUTHENTICATED"``), so this module needs no
gRPC library and its tables are tested as data.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from gateway.grpc.h2wire import block, parse_grpc_timeout
from gateway.routing.auth import presented_token, token_digest_of

SERVICE = "inference.GRPCInferenceService"

# What a tenant may call: health, metadata, config, statistics and inference. Unary all
# but ModelStreamInfer (bidirectional: a decoupled model answers many times per request).
TENANT_METHODS: dict[str, Literal["unary", "stream"]] = {
    "ServerLive": "unary",
    "ServerReady": "unary",
    "ModelReady": "unary",
    "ServerMetadata": "unary",
    "ModelMetadata": "unary",
    "ModelConfig": "unary",
    "ModelStatistics": "unary",
    "ModelInfer": "unary",
    "ModelStreamInfer": "stream",
}
# Triton's admin surface (the HTTP path's 403 list): answered PERMISSION_DENIED by the
# gateway itself, never forwarded (replicas fence them too, see processors/triton/fences.py).
ADMIN_METHODS = frozenset(
    {
        "RepositoryIndex",
        "RepositoryModelLoad",
        "RepositoryModelUnload",
        "SystemSharedMemoryStatus",
        "SystemSharedMemoryRegister",
        "SystemSharedMemoryUnregister",
        "CudaSharedMemoryStatus",
        "CudaSharedMemoryRegister",
        "CudaSharedMemoryUnregister",
        "TraceSetting",
        "LogSettings",
    }
)

# Caller metadata that is the gateway's business only: never passed to a replica (the token;
# the replica's admin-key header, which no tenant holds anyway).
DROPPED_METADATA = frozenset({b"authorization", b"openeas-admin-key", b"user-agent"})


class Refusal(Exception):
    """A call the gateway answers itself: gRPC status ``code`` (its name) and ``details``;
    ``service`` labels the metrics once known."""

    def __init__(self, code: str, details: str, service: str = "") -> None:
        super().__init__(details)
        self.code = code
        self.details = details
        self.service = service


def credential(fields: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The token in the call's ``authorization`` metadata (``Bearer <token>`` or bare),
    None when absent or empty."""
    for key, value in fields:
        if key == b"authorization":
            return presented_token(value)
    return None


def forwarded(fields: Iterable[tuple[bytes, bytes]]) -> tuple[tuple[bytes, bytes], ...]:
    """The caller's headers as sent to the replica: all but :data:`DROPPED_METADATA`."""
    return tuple((k, v) for k, v in fields if k not in DROPPED_METADATA)


REQUEST_PSEUDO = frozenset({b":method", b":scheme", b":authority", b":path"})


def malformed_head(fields: Iterable[tuple[bytes, bytes]]) -> str:
    """Why a request's header fields are malformed under RFC 9113 §8.3 (empty if they are
    not): a pseudo-header repeated, unknown or after a regular field. Such a request is
    never forwarded: the door reads the last ``:path`` of a repeated one, a replica might
    act on the first."""
    seen: set[bytes] = set()
    regular = False
    for key, _ in fields:
        if not key.startswith(b":"):
            regular = True
            continue
        name = key.decode("latin-1")
        if key not in REQUEST_PSEUDO:
            return f"unknown pseudo-header {name} in a request"
        if key in seen:
            return f"pseudo-header {name} sent twice"
        if regular:
            return f"pseudo-header {name} after a regular header field"
        seen.add(key)
    return ""


def deadline_s(route_timeout_s: float, client_remaining_s: float | None) -> tuple[float, bool]:
    """The upstream deadline, and whether it is the route's (then an expiry is the
    gateway's DEADLINE_EXCEEDED to explain) rather than the caller's own."""
    if client_remaining_s is not None and client_remaining_s < route_timeout_s:
        return max(client_remaining_s, 0.0), False
    return route_timeout_s, True


def service_for(authority: bytes, domain: str) -> str | None:
    """The service a call's ``:authority`` names under ``domain`` (``svc.example.com:8001``
    → ``svc`` for ``example.com``); None when no domain is set or the host is not under it
    (an address: the token then names the service)."""
    if not domain:
        return None
    host = authority.decode("latin-1").rsplit(":", 1)[0] if authority[:1] != b"[" else ""
    suffix = "." + domain.strip(".").lower()
    host = host.lower().rstrip(".")
    if not host.endswith(suffix) or len(host) == len(suffix):
        return None
    return host[: -len(suffix)]


@dataclass(frozen=True, slots=True)
class CallHead:
    """What the relay needs of a call's request headers, decided once per distinct header
    block: the method, the service's selectors, the client's deadline, the block to send
    on to a replica (without ``grpc-timeout``), or why the request is not a gRPC call."""

    method: str
    authority: bytes
    digest: bytes | None  # SHA-256 of the presented token
    timeout_s: float | None
    upstream_block: bytes
    problem: str = ""


def call_head(fields: tuple[tuple[bytes, bytes], ...]) -> CallHead:
    """Read a request's decoded header fields (pure; the relay caches it per block)."""
    get = dict(fields).get
    path = get(b":path", b"").decode("latin-1")
    prefix = f"/{SERVICE}/"
    method = path[len(prefix) :] if path.startswith(prefix) else ""
    grpc = get(b":method") == b"POST" and get(b"content-type", b"").startswith(b"application/grpc")
    problem = malformed_head(fields)
    if not problem and not grpc:
        problem = "not a gRPC request (POST with content-type application/grpc)"
    token = credential(fields)
    raw_timeout = get(b"grpc-timeout")
    timeout = parse_grpc_timeout(raw_timeout.decode("latin-1")) if raw_timeout else None
    return CallHead(
        method=method,
        authority=get(b":authority") or get(b"host", b""),
        digest=None if token is None else token_digest_of(token),
        timeout_s=timeout,
        upstream_block=block((k.decode("latin-1"), v) for k, v in forwarded(fields)),
        problem=problem,
    )
