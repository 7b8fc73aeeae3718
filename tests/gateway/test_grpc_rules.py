"""The gRPC door's decisions as tables: which methods pass, the token in metadata, what is
forwarded, which deadline applies."""

from __future__ import annotations

import pytest

from gateway.grpc_rules import (
    ADMIN_METHODS,
    TENANT_METHODS,
    admin_refusal,
    credential,
    deadline_s,
    forwarded_metadata,
)


def test_tenant_and_admin_methods_cover_triton_service_apart() -> None:
    """Every RPC of inference.GRPCInferenceService (tritonclient's grpc_service.proto) is
    either a tenant one or an admin one, never both."""
    from tritonclient.grpc import service_pb2

    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    methods = {m.name: m for m in service.methods}
    assert set(methods) == set(TENANT_METHODS) | ADMIN_METHODS
    assert not set(TENANT_METHODS) & ADMIN_METHODS
    for name, shape in TENANT_METHODS.items():
        streaming = methods[name].client_streaming and methods[name].server_streaming
        assert streaming == (shape == "stream"), name


@pytest.mark.parametrize(
    ("metadata", "token"),
    [
        ([("authorization", "Bearer tok")], b"tok"),
        ([("authorization", "bearer  tok ")], b"tok"),
        ([("authorization", "tok")], b"tok"),  # EAS's bare token
        ([("x", "y"), ("authorization", b"tok")], b"tok"),
        ([("authorization", "Bearer")], None),
        ([("authorization", "")], None),
        ([("x-authorization", "tok")], None),
        ([], None),
    ],
)
def test_credential(metadata: list[tuple[str, str | bytes]], token: bytes | None) -> None:
    assert credential(metadata) == token


def test_the_token_and_the_fence_header_are_not_forwarded() -> None:
    metadata = [
        ("authorization", "Bearer tok"),
        ("openeas-admin-key", "guess"),
        ("user-agent", "grpc-python"),
        ("triton_grpc_error", "true"),
        ("x-trace", "1"),
    ]
    assert forwarded_metadata(metadata) == (("triton_grpc_error", "true"), ("x-trace", "1"))


@pytest.mark.parametrize(
    ("route_s", "client_s", "want"),
    [
        (10.0, None, (10.0, True)),  # no client deadline: the route's
        (10.0, 30.0, (10.0, True)),  # the route's is sooner
        (10.0, 2.0, (2.0, False)),  # the caller's is sooner: its own expiry
        (10.0, -0.5, (0.0, False)),
    ],
)
def test_deadline(route_s: float, client_s: float | None, want: tuple[float, bool]) -> None:
    assert deadline_s(route_s, client_s) == want


def test_admin_refusal_names_the_method() -> None:
    refusal = admin_refusal("RepositoryModelLoad", "svc")
    assert refusal.code == "PERMISSION_DENIED" and refusal.service == "svc"
    assert "RepositoryModelLoad" in refusal.details and "admin API" in refusal.details
