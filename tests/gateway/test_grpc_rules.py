"""The gRPC door's decisions as tables: which methods pass, the token in metadata, what is
forwarded, which deadline applies."""

from __future__ import annotations

import pytest

from gateway.grpc.rules import (
    ADMIN_METHODS,
    TENANT_METHODS,
    call_head,
    credential,
    deadline_s,
    forwarded,
    malformed_head,
    service_for,
)
from gateway.routing.auth import token_digest_of


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
        ([(b"authorization", b"Bearer tok")], b"tok"),
        ([(b"authorization", b"bearer  tok ")], b"tok"),
        ([(b"authorization", b"tok")], b"tok"),  # EAS's bare token
        ([(b"x", b"y"), (b"authorization", b"tok")], b"tok"),
        ([(b"authorization", b"Bearer")], None),
        ([(b"authorization", b"")], None),
        ([(b"x-authorization", b"tok")], None),
        ([], None),
    ],
)
def test_credential(metadata: list[tuple[bytes, bytes]], token: bytes | None) -> None:
    assert credential(metadata) == token


def test_the_token_and_the_fence_header_are_not_forwarded() -> None:
    metadata = [
        (b"authorization", b"Bearer tok"),
        (b"openeas-admin-key", b"guess"),
        (b"user-agent", b"grpc-python"),
        (b"triton_grpc_error", b"true"),
        (b"x-trace", b"1"),
    ]
    assert forwarded(metadata) == ((b"triton_grpc_error", b"true"), (b"x-trace", b"1"))


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


@pytest.mark.parametrize(
    ("authority", "domain", "service"),
    [
        (b"svc.example.com:8001", "example.com", "svc"),
        (b"svc.example.com", "example.com", "svc"),
        (b"SVC.Example.com:443", ".example.com.", "svc"),  # case and dots as typed
        (b"a.b.example.com:8001", "example.com", "a.b"),  # not a service: NOT_FOUND later
        (b"example.com:8001", "example.com", None),  # the domain itself names nothing
        (b"svc.example.org:8001", "example.com", None),  # not under it: the token decides
        (b"127.0.0.1:8001", "example.com", None),
        (b"[::1]:8001", "example.com", None),
        (b"svc.example.com:8001", "", None),  # no domain set
    ],
)
def test_service_for(authority: bytes, domain: str, service: str | None) -> None:
    assert service_for(authority, domain) == service


def _fields(**extra: bytes) -> tuple[tuple[bytes, bytes], ...]:
    base = {
        b":method": b"POST",
        b":scheme": b"http",
        b":path": b"/inference.GRPCInferenceService/ModelInfer",
        b":authority": b"svc.example.com:8001",
        b"content-type": b"application/grpc",
        b"te": b"trailers",
        b"authorization": b"Bearer tok",
    }
    base.update({k.replace("_", "-").encode(): v for k, v in extra.items()})
    return tuple(base.items())


def test_call_head_reads_what_admission_needs() -> None:
    head = call_head(_fields(grpc_timeout=b"250m"))
    assert head.method == "ModelInfer" and not head.problem
    assert head.authority == b"svc.example.com:8001"
    assert head.digest == token_digest_of(b"tok")
    assert head.timeout_s == pytest.approx(0.25)
    # The block sent on is the caller's, less the token, and decodes as such.
    import hpack

    sent = dict(hpack.Decoder().decode(head.upstream_block, raw=True))
    assert b"authorization" not in sent
    assert sent[b":path"] == b"/inference.GRPCInferenceService/ModelInfer"
    assert sent[b"grpc-timeout"] == b"250m"


@pytest.mark.parametrize(
    ("change", "method", "problem"),
    [
        ({":path": b"/other.Service/Call"}, "", ""),  # another service: UNIMPLEMENTED later
        ({":method": b"GET"}, "ModelInfer", "not a gRPC request"),
        ({"content-type": b"application/json"}, "ModelInfer", "not a gRPC request"),
        ({"content-type": b"application/grpc+proto"}, "ModelInfer", ""),
    ],
)
def test_call_head_problems(change: dict[str, bytes], method: str, problem: str) -> None:
    fields = dict(_fields())
    fields.update({k.encode(): v for k, v in change.items()})
    head = call_head(tuple(fields.items()))
    assert head.method == method
    assert head.problem.startswith(problem) if problem else not head.problem


CALL = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
    (b":authority", b"svc.example.com"),
    (b"content-type", b"application/grpc"),
    (b"authorization", b"Bearer tok"),
]
ADMIN_PATH = (b":path", b"/inference.GRPCInferenceService/RepositoryModelLoad")


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (CALL, ""),
        ([*CALL, (b"x-trace", b"1"), (b"x-trace", b"2")], ""),  # regular fields may repeat
        ([ADMIN_PATH, *CALL], "pseudo-header :path sent twice"),  # which would a replica take?
        ([*CALL[:3], *CALL[4:], CALL[3]], "pseudo-header :authority after a regular header field"),
        ([(b":protocol", b"websocket"), *CALL], "unknown pseudo-header :protocol in a request"),
        ([(b":status", b"200"), *CALL], "unknown pseudo-header :status in a request"),
    ],
)
def test_malformed_heads_are_refused_not_forwarded(
    fields: list[tuple[bytes, bytes]], problem: str
) -> None:
    assert malformed_head(fields) == problem
    head = call_head(tuple(fields))
    assert head.problem == (problem or "")
