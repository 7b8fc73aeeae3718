"""A corpus of malformed and smuggling-shaped requests against the real gateway (RFC 9112
§§2-7, the request-smuggling cases nginx refuses): each is answered with a 4xx/5xx, the
connection is closed, and nothing reaches the replica."""

from __future__ import annotations

import socket
import time

import pytest

from gateway.http.http1 import request_line_refusal, status_line
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
    ("http-0.9", b"GET " + P + b"\r\n\r\n", (b"400",)),
    ("http-0.9-after-blank-lines", b"\r\n\r\nGET " + P + b"\r\n", (b"400",)),
    ("no-version", b"GET " + P + b" \r\nHost: x\r\n\r\n", (b"400",)),
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


def recv_all(s: socket.socket, within: float) -> tuple[bytes, float]:
    """What the server sends until it closes, and when it closed (monotonic)."""
    out = b""
    s.settimeout(within)
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return out, time.monotonic()
        out += chunk


def test_an_http_0_9_line_split_across_reads_is_refused_at_once(gw: Gateway, echo: Echo) -> None:
    seen = len(echo.seen)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(b"GET /api/pre")
        time.sleep(0.1)  # a second read: the line is held until it is whole
        s.sendall(b"dict/x\r\n")
        out, _ = recv_all(s, 5)
    assert out.startswith(b"HTTP/1.1 400 "), out[:200]
    assert b"HTTP/0.9" in out
    assert len(echo.seen) == seen


def test_pipelined_requests_split_mid_line_are_not_mistaken_for_http_0_9(
    gw: Gateway, echo: Echo
) -> None:
    """The second request's line starts in the first read and ends in the next one."""
    one = HEAD + b"Content-Length: 2\r\n\r\nhi"
    second = HEAD + b"Content-Length: 2\r\nConnection: close\r\n\r\nho"
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(one + second[:7])
        time.sleep(0.1)
        s.sendall(second[7:])
        out, _ = recv_all(s, 5)
    assert out.count(b"HTTP/1.1 200 ") == 2, out[:400]


@pytest.mark.parametrize("length", [1000, 2_000_000], ids=["buffered", "streamed"])
def test_a_stalled_body_gets_408_and_the_connection_closed(
    make_gateway: GatewayFactory, echo: Echo, length: int
) -> None:
    """A body that stops arriving is cut off after body_timeout_s, both while it is read
    whole and while it streams to the replica."""
    gw = make_gateway(table(route([echo.url])), body_timeout_s=0.5)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % length + b"x" * 10)
        started = time.monotonic()
        out, closed_at = recv_all(s, 8)
    assert out.startswith(b"HTTP/1.1 408 "), out[:200]
    assert 0.4 < closed_at - started < 6, closed_at - started


def test_a_body_trickling_steadily_is_not_cut_off(make_gateway: GatewayFactory, echo: Echo) -> None:
    """The timeout is between two reads (nginx's client_body_timeout), not for the whole
    body: a slow but live upload is answered."""
    gw = make_gateway(table(route([echo.url])), body_timeout_s=0.5)
    body = b"0123456789"
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(HEAD + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
        for i in range(len(body)):  # 10 × 0.2 s: four times the timeout in all
            s.sendall(body[i : i + 1])
            time.sleep(0.2)
        out, _ = recv_all(s, 5)
    assert out.startswith(b"HTTP/1.1 200 "), out[:200]
    assert b'"body_len": 10' in out


def test_a_connection_that_never_sends_a_head_is_cut_off(
    make_gateway: GatewayFactory, echo: Echo
) -> None:
    gw = make_gateway(table(route([echo.url])), head_timeout_s=0.5)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        started = time.monotonic()
        out, closed_at = recv_all(s, 8)
    assert out == b""
    assert 0.4 < closed_at - started < 6, closed_at - started


@pytest.mark.parametrize(
    ("head", "complete", "refused"),
    [
        (b"", False, False),
        (b"GET /x HTTP/1.1", False, False),  # no end of line yet: wait
        (b"\r\n", False, False),  # a blank line before the request line is allowed
        (b"GET /x HTTP/1.1\r\n", True, False),
        (b"\r\n\nGET /x HTTP/1.0\n", True, False),
        (b"GET /x\r\n", True, True),  # HTTP/0.9
        (b"GET /x \r\n", True, True),
        (b"GET /x y HTTP/1.1\r\n", True, True),
        (b"GET /x HTTQ/1.1\r\n", True, True),
        (b"GET /x HTTP/1.1\r\r\n", True, False),  # CRs before the LF are not the line's
        (b"\rGET /x HTTP/1.1\r\n", True, False),  # a lone CR skips no blank line
        (b"\n\r\n\nGET /x\r\n", True, True),
        (b"\r\n\r\n", False, False),
    ],
)
def test_request_line_refusal(head: bytes, complete: bool, refused: bool) -> None:
    done, why = request_line_refusal(head)
    assert (done, why is not None) == (complete, refused)


def test_eas_statuses_have_their_reason_phrase() -> None:
    assert status_line(450) == b"HTTP/1.1 450 Queue Full\r\n"
    assert status_line(599) == b"HTTP/1.1 599 \r\n"
