"""The proxy's behaviour on the wire, against the recording echo upstream: what is
forwarded and what is not, every refusal, upstream failures, streaming and backpressure,
HTTP/1.1 details (pipelining, HEAD, Expect, chunked), metrics, health and the fallback."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import os
import socket
import threading
import time
from typing import Any

import pytest

from gateway.http.proxy import same_credential
from gateway.http.server import Head
from testing.waiting import wait_until
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import (
    SERVICE,
    TOKEN,
    Echo,
    Gateway,
    LoopThread,
    dead_port,
    post_head,
    raw_exchange,
    route,
    table,
)


def call(
    gw: Gateway,
    path: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    token: str | None = TOKEN,
) -> tuple[int, http.client.HTTPMessage, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=20)
    try:
        h = dict(headers or {})
        if token is not None:
            h.setdefault("Authorization", token)
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        return resp.status, resp.msg, resp.read()
    finally:
        conn.close()


def problem(body: bytes, status: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(body)
    assert doc["status"] == status
    assert doc["title"] and doc["detail"] and doc["error"] == doc["detail"]
    assert "Traceback" not in body.decode()
    return doc


P = f"/api/predict/{SERVICE}"


@pytest.fixture
def gw(make_gateway: GatewayFactory, echo: Echo) -> Gateway:
    return make_gateway(table(route([echo.url])), max_body_bytes=8 * 1024 * 1024)


# --- what crosses ------------------------------------------------------------------------


def test_forwarded_request_is_exact_and_clean(gw: Gateway, echo: Echo) -> None:
    body = os.urandom(3000)
    status, _, out = call(
        gw,
        f"{P}/v2/models/m/infer?a=1&b=%2F&c",
        method="POST",
        body=body,
        headers={
            "Authorization": f"Bearer {TOKEN}",
            "Inference-Header-Content-Length": "120",
            "Content-Type": "application/octet-stream",
            "Content-Encoding": "gzip",
            "Connection": "keep-alive, X-Private",
            "X-Private": "drop me",
            "Keep-Alive": "timeout=5",
            "TE": "trailers",
            "Proxy-Authorization": "Basic eDp5",
            "X-Custom": "kept",
        },
    )
    assert status == 200
    assert json.loads(out)["path_qs"] == "/v2/models/m/infer?a=1&b=%2F&c"
    seen = echo.seen[-1]
    assert seen.body == body
    assert seen.header("Inference-Header-Content-Length") == "120"
    assert seen.header("Content-Type") == "application/octet-stream"
    assert seen.header("Content-Encoding") == "gzip"
    assert seen.header("Content-Length") == "3000"
    assert seen.header("X-Custom") == "kept"
    assert seen.header("Host") == f"127.0.0.1:{echo.port}"
    assert seen.header("X-Forwarded-For") == "127.0.0.1"
    for gone in ("authorization", "x-private", "keep-alive", "te", "proxy-authorization"):
        assert gone not in seen.names(), gone
    assert TOKEN not in repr(seen.headers)


def test_response_hop_by_hop_stripped(gw: Gateway) -> None:
    status, headers, _ = call(gw, f"{P}/echo")
    assert status == 200
    assert headers["X-Hop"] is None  # named by the upstream's Connection header
    assert headers["Keep-Alive"] is None
    assert headers["Content-Type"].startswith("application/json")


def test_no_accept_encoding_added_and_body_not_decoded(gw: Gateway, echo: Echo) -> None:
    out = raw_exchange(
        gw.port,
        f"GET {P}/gzip HTTP/1.1\r\nHost: x\r\nAuthorization: {TOKEN}\r\n"
        "Connection: close\r\n\r\n".encode(),
    )
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"\r\nContent-Encoding: gzip\r\n" in head
    assert "accept-encoding" not in echo.seen[-1].names()
    assert gzip.decompress(body) == b"compressed payload " * 100


def test_large_body_streams_both_ways_byte_exact(gw: Gateway, echo: Echo) -> None:
    body = os.urandom(5 * 1024 * 1024 + 17)  # over the buffering threshold: piped
    status, _, out = call(gw, f"{P}/v2/models/m/infer", method="POST", body=body)
    assert status == 200
    doc = json.loads(out)
    assert doc["body_len"] == len(body)
    assert doc["body_sha256"] == hashlib.sha256(body).hexdigest()
    status, _, out = call(gw, f"{P}/big?mib=3")
    assert status == 200 and out == b"\xab" * (3 * 1024 * 1024)


def test_chunked_request_and_response(gw: Gateway, echo: Echo) -> None:
    def chunks() -> Any:
        yield b"hello "
        yield b"chunked "
        yield b"world"

    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    conn.request(
        "POST",
        f"{P}/v2/x",
        body=chunks(),
        headers={"Authorization": TOKEN, "Transfer-Encoding": "chunked"},
        encode_chunked=True,
    )
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read())["body_len"] == 19
    assert echo.seen[-1].body == b"hello chunked world"
    assert echo.seen[-1].header("Content-Length") == "19"
    assert "transfer-encoding" not in echo.seen[-1].names()
    # A chunked response is re-framed for the client and arrives whole.
    conn.request("GET", f"{P}/chunked", headers={"Authorization": TOKEN})
    resp = conn.getresponse()
    assert resp.getheader("Transfer-Encoding") == "chunked"
    assert resp.read() == b"".join(f"part {i};".encode() for i in range(5))
    conn.close()


def test_keep_alive_pipelining_head_and_expect(gw: Gateway, echo: Echo) -> None:
    auth = f"Authorization: {TOKEN}\r\n".encode()
    two = (
        b"GET " + P.encode() + b"/one HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n"
        b"GET " + P.encode() + b"/two HTTP/1.1\r\nHost: x\r\n" + auth + b"Connection: close\r\n\r\n"
    )
    out = raw_exchange(gw.port, two)
    assert out.count(b"HTTP/1.1 200 OK") == 2
    assert out.index(b'"/one"') < out.index(b'"/two"')

    out = raw_exchange(
        gw.port,
        b"HEAD "
        + P.encode()
        + b"/echo HTTP/1.1\r\nHost: x\r\n"
        + auth
        + b"Connection: close\r\n\r\n",
    )
    head, _, rest = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"content-length" in head.lower()
    assert rest == b""

    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(
            b"POST "
            + P.encode()
            + b"/e HTTP/1.1\r\nHost: x\r\n"
            + auth
            + b"Content-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
        )
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(b"12345")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert b"200 OK" in data and echo.seen[-1].body == b"12345"


def test_http10_client(gw: Gateway) -> None:
    out = raw_exchange(
        gw.port,
        b"GET "
        + P.encode()
        + b"/chunked HTTP/1.0\r\nAuthorization: "
        + TOKEN.encode()
        + b"\r\n\r\n",
    )
    assert out.startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding" not in out.lower()
    assert out.endswith(b"part 4;")


# --- refusals -------------------------------------------------------------------------------


def test_tokens(gw: Gateway) -> None:
    assert call(gw, f"{P}/v2", token=TOKEN)[0] == 200
    assert call(gw, f"{P}/v2", token=f"Bearer {TOKEN}")[0] == 200
    assert call(gw, f"{P}/v2", token=f"bearer   {TOKEN}")[0] == 200
    for bad in (None, "", "Bearer", TOKEN + "x", TOKEN[:-1], f"Basic {TOKEN}"):
        status, headers, body = call(gw, f"{P}/v2", token=bad)
        assert status == 401, bad
        assert headers["Content-Type"] == "application/problem+json"
        assert headers["WWW-Authenticate"].startswith("Bearer")
        problem(body, 401)


def test_unknown_service(gw: Gateway) -> None:
    _status, _, body = call(gw, "/api/predict/nope/v2")
    assert problem(body, 404)["detail"] == "no service named 'nope'"


@pytest.mark.parametrize(
    "path",
    [
        "/v2/repository/index",
        "/v2/repository/models/m/load",
        "/v2/systemsharedmemory/region/r/register",
        "/v2/cudasharedmemory/status",
        "/v2/trace/setting",
        "/v2/models/m/trace/setting",
        "/v2/logging",
        "/v2/models/../repository/index",
        "/v2/%72epository/index",
        "/v2/./logging",
        "/V2/LOGGING",
    ],
)
def test_admin_surface_refused(gw: Gateway, echo: Echo, path: str) -> None:
    # http.client sends the path as is: no client-side normalisation.
    status, _, body = call(gw, P + path, method="POST", body=b"{}")
    assert status == 403
    problem(body, 403)
    assert echo.seen == []


def test_malformed_path(gw: Gateway, echo: Echo) -> None:
    _status, _, body = call(gw, f"{P}/v2/models/a%2Fb/infer")
    problem(body, 400)
    assert echo.seen == []


def test_body_over_limit(make_gateway: GatewayFactory, echo: Echo) -> None:
    gw = make_gateway(table(route([echo.url])), max_body_bytes=1000)
    status, _headers, body = call(gw, f"{P}/v2/x", method="POST", body=b"x" * 1001)
    assert status == 413
    problem(body, 413)
    assert call(gw, f"{P}/v2/x", method="POST", body=b"x" * 1000)[0] == 200

    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    conn.request(
        "POST",
        f"{P}/v2/x",
        body=iter([b"y" * 600, b"y" * 600]),
        headers={"Authorization": TOKEN, "Transfer-Encoding": "chunked"},
        encode_chunked=True,
    )
    assert conn.getresponse().status == 413
    conn.close()
    assert all(len(s.body) <= 1000 for s in echo.seen)


def test_no_ready_replica(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(table(route([], status="Waiting")), retry_after_s=3)
    status, headers, body = call(gw, f"{P}/v2")
    assert status == 503
    assert headers["Retry-After"] == "3"
    assert "Waiting" in problem(body, 503)["detail"]


def test_rate_limit(make_gateway: GatewayFactory, echo: Echo) -> None:
    gw = make_gateway(table(route([echo.url], rate_limit=3)))
    codes = [call(gw, f"{P}/v2")[0] for _ in range(5)]
    assert codes[:3] == [200, 200, 200] and codes[3:] == [429, 429]
    status, headers, body = call(gw, f"{P}/v2")
    assert status == 429 and int(headers["Retry-After"]) >= 1
    problem(body, 429)
    wait_until(lambda: call(gw, f"{P}/v2")[0] == 200, 10, what="the bucket refilled")


def test_queue_limit(make_gateway: GatewayFactory, echo: Echo) -> None:
    gw = make_gateway(table(route([echo.url], max_queue_size=1)))
    slow = threading.Thread(target=call, args=(gw, f"{P}/slow?s=1"))
    slow.start()
    wait_until(lambda: any(s.path_qs.startswith("/slow") for s in echo.seen), 10)
    status, _, body = call(gw, f"{P}/v2")
    assert status == 450  # EAS's queue full: not processed, retry
    assert "max_queue_size" in problem(body, 450)["detail"]
    slow.join()
    assert call(gw, f"{P}/v2")[0] == 200


# "warm": a keep-alive connection to the replica is idle in the pool, so the request takes
# the callback-only fast path; "cold": it connects first (the coroutine path).
WARMTH = pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])


def warm_up(gw: Gateway, warm: bool) -> None:
    if warm:
        assert call(gw, f"{P}/v2")[0] == 200


@WARMTH
def test_upstream_timeout(make_gateway: GatewayFactory, echo: Echo, warm: bool) -> None:
    gw = make_gateway(table(route([echo.url], timeout_ms=300)))
    warm_up(gw, warm)
    started = time.monotonic()
    status, _, body = call(gw, f"{P}/slow?s=3")
    assert status == 408  # as EAS answers a request past rpc.keepalive
    assert "300 ms" in problem(body, 408)["detail"]
    assert time.monotonic() - started < 2
    assert call(gw, f"{P}/v2")[0] == 200


@WARMTH
def test_upstream_breaks(gw: Gateway, warm: bool) -> None:
    warm_up(gw, warm)
    status, _, body = call(gw, f"{P}/break-before")
    assert status == 502
    problem(body, 502)
    # After the status went out, the only honest signal is a truncated body.
    warm_up(gw, warm)
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    conn.request("GET", f"{P}/break-mid", headers={"Authorization": TOKEN})
    resp = conn.getresponse()
    assert resp.status == 200
    with pytest.raises(http.client.IncompleteRead):
        resp.read()
    conn.close()
    assert call(gw, f"{P}/v2")[0] == 200


def test_refusing_replica_is_skipped(make_gateway: GatewayFactory, echo: Echo) -> None:
    dead = f"http://127.0.0.1:{dead_port()}"
    gw = make_gateway(table(route([dead, echo.url])))
    assert [call(gw, f"{P}/v2", method="POST", body=b"abc")[0] for _ in range(10)] == [200] * 10
    metrics = call(gw, "/metrics", token=None)[2].decode()
    assert f'openeas_gateway_upstream_errors_total{{service="{SERVICE}",kind="connect"}}' in metrics
    gw.publish(table(route([dead]), version=2))
    status, headers, body = call(gw, f"{P}/v2")
    assert status == 503 and headers["Retry-After"]
    assert "accepted the connection" in problem(body, 503)["detail"]


def test_upgrade_refused_and_huge_head(gw: Gateway) -> None:
    out = raw_exchange(
        gw.port,
        b"GET " + P.encode() + b"/v2 HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
        b"Upgrade: websocket\r\n\r\n",
    )
    assert out.startswith(b"HTTP/1.1 501")
    out = raw_exchange(gw.port, b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431")
    out = raw_exchange(gw.port, b"NONSENSE\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400")


# Request framing the gateway cannot relay faithfully is refused, never guessed at
# (RFC 9112 §6.1: an unknown transfer coding is 501; §3.2: two Host fields are 400).
@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"Transfer-Encoding: gzip, chunked\r\n", b"501"),
        (b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", b"501"),
        (b"Transfer-Encoding: identity, chunked\r\n", b"501"),
        (b"Host: y\r\n", b"400"),  # a second Host
    ],
    ids=["gzip-chunked", "gzip-then-chunked-lines", "identity-chunked", "two-hosts"],
)
def test_framing_it_cannot_relay_is_refused(
    gw: Gateway, echo: Echo, head: bytes, status: bytes
) -> None:
    seen = len(echo.seen)
    out = raw_exchange(
        gw.port,
        b"POST "
        + P.encode()
        + b"/v2/x HTTP/1.1\r\nHost: x\r\nAuthorization: "
        + TOKEN.encode()
        + b"\r\n"
        + head
        + (b"Content-Length: 5\r\n\r\nhello" if b"Transfer" not in head else b"\r\n")
        + (b"5\r\nhello\r\n0\r\n\r\n" if b"Transfer" in head else b""),
    )
    assert out.startswith(b"HTTP/1.1 " + status + b" "), out[:200]
    assert b"connection: close" in out.lower()
    assert len(echo.seen) == seen  # nothing reached the replica
    # Plain chunked still goes through.
    assert raw_exchange(
        gw.port,
        b"POST "
        + P.encode()
        + b"/v2/x HTTP/1.1\r\nHost: x\r\nAuthorization: "
        + TOKEN.encode()
        + b"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        + b"5\r\nhello\r\n0\r\n\r\n",
    ).startswith(b"HTTP/1.1 200 ")


# --- disconnects and backpressure -------------------------------------------------------


@WARMTH
def test_client_disconnect_cancels_upstream(
    gw: Gateway, echo: Echo, lt: LoopThread, warm: bool
) -> None:
    warm_up(gw, warm)
    s = socket.create_connection(("127.0.0.1", gw.port))
    s.sendall(
        b"GET "
        + P.encode()
        + b"/hold HTTP/1.1\r\nHost: x\r\nAuthorization: "
        + TOKEN.encode()
        + b"\r\n\r\n"
    )
    assert echo.hold_started is not None
    hold_started = echo.hold_started
    wait_until(lambda: lt.call(hold_started.is_set), 10, what="the upstream holds")
    s.close()
    assert echo.hold_cancelled.wait(5), "the upstream request was not cancelled"
    metrics = call(gw, "/metrics", token=None)[2].decode()
    assert f'openeas_gateway_requests_total{{service="{SERVICE}",code="499"}} 1' in metrics


def coroutine_paths(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records each call that takes the coroutine path rather than the callback one."""
    predict = gw.runner.gateway._predict
    assert predict is not None  # made when the gateway started
    slow = predict.slow
    taken: list[str] = []
    original = slow.run

    def counted(request: Any, *args: Any, **kwargs: Any) -> Any:
        taken.append(request.target)
        return original(request, *args, **kwargs)

    monkeypatch.setattr(slow, "run", counted)
    return taken


@WARMTH
def test_a_body_still_coming_streams_to_the_replica(
    gw: Gateway, echo: Echo, warm: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    warm_up(gw, warm)
    slow = coroutine_paths(gw, monkeypatch)
    body = os.urandom(3 * 1024 * 1024 + 5)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=20) as s:
        s.sendall(post_head(len(body)) + body[:100_000])
        time.sleep(0.2)  # the call is on its way before the rest is sent
        s.sendall(body[100_000:])
        resp = http.client.HTTPResponse(s)
        resp.begin()
        doc = json.loads(resp.read())
    assert resp.status == 200 and doc["body_len"] == len(body)
    assert doc["body_sha256"] == hashlib.sha256(body).hexdigest()
    # With a replica connection idle, even a body still coming takes the callback path.
    assert len(slow) == (0 if warm else 1)
    assert call(gw, f"{P}/v2", method="POST", body=b"abc")[0] == 200


@WARMTH
def test_a_client_leaving_mid_body_is_499_and_nothing_reaches_the_replica(
    gw: Gateway, echo: Echo, warm: bool
) -> None:
    warm_up(gw, warm)
    seen = len(echo.seen)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=20) as s:
        s.sendall(post_head(1_000_000) + b"x" * 300_000)
        time.sleep(0.2)

    def counted() -> bool:
        metrics = call(gw, "/metrics", token=None)[2].decode()
        return f'openeas_gateway_requests_total{{service="{SERVICE}",code="499"}} 1' in metrics

    wait_until(counted, 10, what="the call counted as the client's leaving")
    assert len(echo.seen) == seen  # the replica never got a whole request
    status, _, out = call(gw, f"{P}/v2/x", method="POST", body=b"abc")
    assert status == 200 and json.loads(out)["body_len"] == 3


def test_slow_client_holds_bounded_memory(gw: Gateway, echo: Echo) -> None:
    mib = 64
    with socket.create_connection(("127.0.0.1", gw.port)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(
            b"GET "
            + P.encode()
            + f"/big?mib={mib} HTTP/1.1\r\nHost: x\r\n".encode()
            + b"Authorization: "
            + TOKEN.encode()
            + b"\r\n\r\n"
        )
        time.sleep(1.0)  # read nothing: the replica must be held back, not drained into RAM
        assert echo.streamed < 16 * 1024 * 1024, echo.streamed
        got = 0
        s.settimeout(20)
        while got < mib * 1024 * 1024:
            chunk = s.recv(1 << 20)
            assert chunk
            got += len(chunk)
    assert echo.streamed == mib * 1024 * 1024


# --- metrics, health, fallback -------------------------------------------------------------


def test_the_load_report_counts_each_call_for_as_long_as_it_is_in_flight(gw: Gateway) -> None:
    """The autoscaler's concurrency is the area under the in-flight count. Each call reads
    the clock once when admitted and once when it ends (on the fast path, the proxy's
    reading is passed in), so the area is the calls' time at the gateway, no more."""
    gateway = gw.runner.gateway
    in_flight = gw.lt.call(lambda: gateway.routes.services[SERVICE].in_flight)
    call(gw, f"{P}/v2")  # a keep-alive replica connection: the calls below take the fast path
    gw.lt.call(lambda: in_flight.take(1.0))
    took = 0.0
    for _ in range(2):
        t0 = time.monotonic()
        status, _, _ = call(gw, f"{P}/slow?s=0.25")
        took += time.monotonic() - t0
        assert status == 200
    requests, area = gw.lt.call(lambda: in_flight.take(1.0))  # mean over 1 s: the area
    assert requests == 2 and in_flight.count == 0
    assert 0.5 <= area <= took, (area, took)


def test_metrics_and_health(gw: Gateway) -> None:
    call(gw, f"{P}/v2")
    call(gw, f"{P}/v2", token="wrong-token-value")
    call(gw, "/api/predict/other-made-up-name/v2")
    status, headers, body = call(gw, "/metrics", token=None)
    text = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert f'openeas_gateway_requests_total{{service="{SERVICE}",code="200"}} 1' in text
    assert f'openeas_gateway_requests_total{{service="{SERVICE}",code="401"}} 1' in text
    assert 'openeas_gateway_requests_total{service="",code="404"} 1' in text
    assert f'openeas_gateway_request_duration_seconds_count{{service="{SERVICE}"}} 2' in text
    assert f'openeas_gateway_upstream_duration_seconds_count{{service="{SERVICE}"}} 1' in text
    assert f'openeas_gateway_in_flight_requests{{service="{SERVICE}"}} 0' in text
    assert "openeas_gateway_route_table_version 1" in text
    assert TOKEN not in text and "wrong-token-value" not in text and "made-up" not in text

    status, _, body = call(gw, "/gateway/healthz", token=None)
    doc = json.loads(body)
    assert status == 200
    assert doc["status"] == "ok" and doc["route_table_version"] == 1 and doc["services"] == 1


def test_health_before_first_table(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(None, wait_routes=False)
    status, _, body = call(gw, "/gateway/healthz", token=None)
    assert status == 503 and json.loads(body)["status"] == "starting"
    assert call(gw, f"{P}/v2")[0] == 404


def test_fallback_upstream(make_gateway: GatewayFactory, echo: Echo) -> None:
    gw = make_gateway(table(route([echo.url])), fallback_upstream=echo.url)
    status, _, body = call(
        gw,
        "/api/v2/services?page=2",
        method="POST",
        body=b'{"name":"x"}',
        headers={"Authorization": "Bearer admin-secret", "Host": "public.example:8080"},
        token=None,
    )
    assert status == 200 and json.loads(body)["path_qs"] == "/api/v2/services?page=2"
    seen = echo.seen[-1]
    assert seen.header("Authorization") == "Bearer admin-secret"  # the API needs it
    assert seen.header("Host") == "public.example:8080"
    assert seen.body == b'{"name":"x"}'
    # The gateway's own paths and predict calls are not forwarded to the fallback.
    assert b"openeas_gateway_requests_total" in call(gw, "/metrics", token=None)[2]
    assert json.loads(call(gw, "/gateway/healthz", token=None)[2])["status"] == "ok"
    assert call(gw, f"{P}/v2", token="bad")[0] == 401
    # Without a fallback, other paths are a 404 problem.
    plain = make_gateway(table(route([echo.url])))
    status, _, body = call(plain, "/api/v2/services", token=None)
    problem(body, 404)


def test_refused_upload_gets_its_answer(make_gateway: GatewayFactory, echo: Echo) -> None:
    """A client still sending a large body reads the 413 (or 401), not a reset."""
    gw = make_gateway(table(route([echo.url])), max_body_bytes=1024 * 1024)
    for token, status in ((TOKEN, b"413"), ("wrong", b"401")):
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
            s.sendall(
                f"POST {P}/v2/x HTTP/1.1\r\nHost: x\r\nAuthorization: {token}\r\n"
                f"Content-Length: {32 * 1024 * 1024}\r\n\r\n".encode()
            )
            sent = 0
            try:
                while sent < 8 * 1024 * 1024:  # keep sending after the answer is out
                    s.sendall(b"z" * 65536)
                    sent += 65536
            except (BrokenPipeError, ConnectionResetError):
                pass
            answer = s.recv(65536)
            assert answer.startswith(b"HTTP/1.1 " + status), answer[:100]
    assert echo.seen == []


@pytest.mark.parametrize(
    ("presented", "same"),
    [
        (b"Bearer abc", True),  # equal bytes, another object: compared
        (b"Bearer abd", False),
        (b"Bearer ab", False),
        (b"", False),
    ],
)
def test_a_credential_is_the_one_that_passed_only_when_equal(presented: bytes, same: bool) -> None:
    accepted = bytes(bytearray(b"Bearer abc"))  # a new object, not the parameter
    headers = [(b"authorization", presented), (b"host", b"gw")]
    head = Head("POST", "/", headers, dict(headers), "1.1", True, False)
    assert head.authorization is presented
    assert same_credential(head, presented, accepted) is same
    # Equal: the head keeps the accepted object, so its repeats compare by identity.
    assert head.authorization is (accepted if same else presented)
    assert head.hmap[b"authorization"] is head.authorization
    assert head.hmap[b"host"] == b"gw"
    assert same_credential(head, accepted, accepted)  # the very object kept with a repeated head
