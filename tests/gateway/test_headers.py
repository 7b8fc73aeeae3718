"""Which request fields reach a replica (pure)."""

from __future__ import annotations

from gateway.http.headers import (
    PREDICT_DROPPED,
    REQUEST_REPLACED,
    forward_request_headers,
    predict_upstream_headers,
)


def fields(lines: list[bytes]) -> dict[bytes, bytes]:
    out = {}
    for line in b"".join(lines).split(b"\r\n"):
        if line:
            name, _, value = line.partition(b": ")
            out[name] = value
    return out


HEADERS = [
    (b"host", b"gw:8080"),
    (b"authorization", b"Bearer secret"),
    (b"connection", b"keep-alive, x-private"),
    (b"keep-alive", b"timeout=5"),
    (b"x-private", b"1"),
    (b"te", b"trailers"),
    (b"transfer-encoding", b"chunked"),
    (b"upgrade", b"h2c"),
    (b"proxy-authorization", b"Basic x"),
    (b"proxy-connection", b"keep-alive"),
    (b"trailer", b"x"),
    (b"expect", b"100-continue"),
    (b"content-length", b"10"),
    (b"content-type", b"application/octet-stream"),
    (b"content-encoding", b"gzip"),
    (b"inference-header-content-length", b"138"),
    (b"x-forwarded-for", b"10.0.0.1"),
]


def test_predict_forwarding() -> None:
    got = fields(forward_request_headers(HEADERS, drop=PREDICT_DROPPED, peer="127.0.0.1"))
    assert got == {
        b"content-type": b"application/octet-stream",
        b"content-encoding": b"gzip",
        b"inference-header-content-length": b"138",
        b"x-forwarded-for": b"10.0.0.1, 127.0.0.1",
        b"x-forwarded-proto": b"http",
        b"x-forwarded-host": b"gw:8080",
    }


def test_fallback_keeps_authorization() -> None:
    got = fields(forward_request_headers(HEADERS, drop=REQUEST_REPLACED, peer=None))
    assert got[b"authorization"] == b"Bearer secret"
    assert b"x-private" not in got and b"host" not in got


def test_connection_close_removes_a_field_named_close() -> None:
    """``Connection: close`` names the option and, as any listed name, a field (RFC 9110
    §7.6.1): the field goes, whichever comes first; the other fields stay."""
    for fields_in in (
        [(b"connection", b"close"), (b"close", b"1"), (b"content-type", b"x")],
        [(b"close", b"1"), (b"connection", b"Close"), (b"content-type", b"x")],
    ):
        got = fields(forward_request_headers(fields_in, drop=PREDICT_DROPPED, peer=None))
        assert got == {b"content-type": b"x", b"x-forwarded-proto": b"http"}


def test_plain_connection_options_keep_every_other_field() -> None:
    headers = [
        (b"connection", b"Keep-Alive"),
        (b"keep-alive", b"timeout=5"),
        (b"Content-Type", b"x"),
        (b"connection", b"close"),
        (b"x-private", b"1"),
    ]
    got = fields(forward_request_headers(headers, drop=PREDICT_DROPPED, peer=None))
    assert got == {b"Content-Type": b"x", b"x-private": b"1", b"x-forwarded-proto": b"http"}


def test_a_second_connection_field_adds_to_the_plain_one() -> None:
    headers = [(b"connection", b"close"), (b"connection", b"X-Private"), (b"x-private", b"1")]
    got = fields(forward_request_headers(headers, drop=PREDICT_DROPPED, peer=None))
    assert got == {b"x-forwarded-proto": b"http"}


def test_predict_upstream_headers_add_the_body_length() -> None:
    got = fields(predict_upstream_headers([(b"authorization", b"t")], "10.0.0.2", 42))
    assert got == {
        b"x-forwarded-for": b"10.0.0.2",
        b"x-forwarded-proto": b"http",
        b"content-length": b"42",
    }
    assert b"content-length" not in fields(predict_upstream_headers([], None, None))
