"""Which request fields reach a replica (pure)."""

from __future__ import annotations

from gateway.headers import PREDICT_DROPPED, REQUEST_REPLACED, forward_request_headers


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
