"""What the gateway's gRPC door lets through, as pure decisions: which methods of Triton's
``inference.GRPCInferenceService`` a tenant may call, which service a call is for, and which
status refuses it. :mod:`gateway.grpc_server` asks these per call and does the I/O.

Refusals carry gRPC status code *names* (``"UNAUTHENTICATED"``), so this module needs no
gRPC library and its tables are tested as data.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from gateway.auth import presented_token

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
DROPPED_METADATA = frozenset({"authorization", "openeas-admin-key", "user-agent"})


class Refusal(Exception):
    """A call the gateway answers itself: gRPC status ``code`` (its name) and ``details``;
    ``service`` labels the metrics once known."""

    def __init__(self, code: str, details: str, service: str = "") -> None:
        super().__init__(details)
        self.code = code
        self.details = details
        self.service = service


def admin_refusal(method: str, service: str) -> Refusal:
    return Refusal(
        "PERMISSION_DENIED",
        f"{method} is part of Triton's admin API (model repository, shared memory, trace, "
        "logging), which is not available through the gateway",
        service,
    )


def credential(metadata: Iterable[tuple[str, str | bytes]]) -> bytes | None:
    """The token in the call's ``authorization`` metadata (``Bearer <token>`` or bare),
    None when absent or empty."""
    for key, value in metadata:
        if key == "authorization":
            raw = value.encode("utf-8") if isinstance(value, str) else value
            return presented_token(raw)
    return None


def forwarded_metadata(
    metadata: Iterable[tuple[str, str | bytes]],
) -> tuple[tuple[str, str | bytes], ...]:
    """The caller's metadata as sent to the replica: all but :data:`DROPPED_METADATA`."""
    return tuple((k, v) for k, v in metadata if k not in DROPPED_METADATA)


def deadline_s(route_timeout_s: float, client_remaining_s: float | None) -> tuple[float, bool]:
    """The upstream deadline, and whether it is the route's (then an expiry is the
    gateway's DEADLINE_EXCEEDED to explain) rather than the caller's own."""
    if client_remaining_s is not None and client_remaining_s < route_timeout_s:
        return max(client_remaining_s, 0.0), False
    return route_timeout_s, True
