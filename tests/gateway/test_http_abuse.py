"""A corpus of malformed and smuggling-shaped requests against the real gateway (RFC 9112
§§2-7, the request-smuggling cases nginx refuses): each is answered with a 4xx/5xx, the
connection is closed, and nothing reaches the replica."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import SERVICE, TOKEN, Echo, Gateway, raw_exchange, route, table

P = f"/api/predict/{SERVICE}/v2/models/m/infer".encode()
HEAD = b"POST " + P + b" HTTP/1.1\r\nHost: x\r\nAuthorization: " + TOKEN.encode() + b"\r\n"

CORPUS: list[tuple[str, bytes, tuple[bytes, ...]]] = [
    ("cl-and-te", HEAD + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"5\r\nhello\r\n0\r\n\r\n", (b"400",)),
    ("te-and-cl", HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
     b"5\r\nhello\r\n0\r\n\r\n", (b"400",)),
    ("two-different-lengths", HEAD + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
     (b"400",)),
    ("length-list", HEAD + b"Content-Length: 5, 6\r\n\r\nhello!", (b"400",)),
    ("negative-length", HEAD + b"Content-Length: -1\r\n\r\n", (b"400",)),
    ("absurd-length", HEAD + b"Content-Length: 99999999999999999999999\r\n\r\nx",
     (b"400", b"413")),
    ("length-with-sign", HEAD + b"Content-Length: +5\r\n\r\nhello", (b"400",)),
    ("unknown-coding", HEAD + b"Transfer-Encoding: foo\r\n\r\nhello", (b"501",)),
    ("chunked-not-last", HEAD + b"Transfer-Encoding: chunked, gzip\r\n\r\n", (b"400", b"501")),
    ("obs-fold", HEAD + b"X-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n", (b"400",)),
    ("nul-in-value", HEAD + b"X-Nul: a\x00b\r\nContent-Length: 0\r\n\r\n", (b"400",)),
    ("cr-in-value", HEAD + b"X-Cr: a\rb\r\nContent-Length: 0\r\n\r\n", (b"400",)),
    ("space-before-colon", HEAD + b"Content-Length : 5\r\n\r\nhello", (b"400",)),
    ("bad-chunk-size", HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
     (b"400",)),
    ("chunk-size-overflow", HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
     b"ffffffffffffffffffffff\r\nhello\r\n0\r\n\r\n", (b"400", b"413")),
    ("huge-request-line", b"GET /api/predict/triton_test/" + b"a" * 70_000 + b" HTTP/1.1\r\n"
     b"Host: x\r\n\r\n", (b"414", b"431")),
    ("huge-header", HEAD + b"X-Big: " + b"b" * 70_000 + b"\r\nContent-Length: 0\r\n\r\n",
     (b"431",)),
    ("many-headers", HEAD + b"".join(b"X-%d: v\r\n" % i for i in range(5000))
     + b"Content-Length: 0\r\n\r\n", (b"431",)),
    ("http-2-preface-on-1.1", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", (b"400", b"505")),
]  # fmt: skip


@pytest.fixture
def gw(make_gateway: GatewayFactory, echo: Echo) -> Gateway:
    return make_gateway(table(route([echo.url])))


@pytest.mark.parametrize(("case", "request_bytes", "statuses"), CORPUS, ids=[c[0] for c in CORPUS])
def test_refused_closed_and_never_forwarded(
    gw: Gateway, echo: Echo, case: str, request_bytes: bytes, statuses: tuple[bytes, ...]
) -> None:
    seen = len(echo.seen)
    out = raw_exchange(gw.port, request_bytes, timeout=5)
    status = out[9:12]
    assert status in statuses, (case, out[:300])
    assert b"connection: close" in out.lower(), out[:300]
    assert len(echo.seen) == seen  # nothing reached the replica


def test_a_head_that_never_ends_is_cut_off(make_gateway: GatewayFactory, echo: Echo) -> None:
    """A slowloris: a head trickling in is closed after head_timeout_s, with nothing sent
    to the replica."""
    import socket
    import time

    gw = make_gateway(table(route([echo.url])), head_timeout_s=0.5)
    seen = len(echo.seen)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(HEAD)
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < 8:
            try:
                s.sendall(b"X-Slow: a\r\n")  # a header line now and then, never the end
            except OSError:
                closed = True
                break
            s.settimeout(0.2)
            try:
                if s.recv(100) == b"":
                    closed = True
                    break
            except TimeoutError:
                pass
        took = time.monotonic() - started
    assert closed and 0.4 < took < 6, took
    assert len(echo.seen) == seen
