"""The HTTP door gives up the CPU after a replica's read only with calls in flight
(gateway.http.yielding), and its count of calls in flight comes back to zero however calls end."""

from __future__ import annotations

import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from testing.waiting import wait_until
from tests.gateway.conftest import GatewayFactory
from tests.gateway.harness import TOKEN, Echo, Gateway, LoopThread, route, table
from tests.gateway.test_proxy import P, call


def counted_yields(gw: Gateway) -> list[int]:
    """The calls in flight at each yield of ``gw``'s replica connections."""
    pool = gw.runner.gateway._upstreams
    assert pool is not None
    seen: list[int] = []
    gw.lt.call(lambda: setattr(pool, "cede", lambda: seen.append(pool.exchanges)))
    return seen


def in_flight(gw: Gateway) -> int:
    pool = gw.runner.gateway._upstreams
    assert pool is not None
    return int(gw.lt.call(lambda: pool.exchanges))


@pytest.mark.parametrize("yield_at", [2, 0])
def test_a_busy_gateway_yields_after_replica_reads_and_a_lone_call_never_does(
    make_gateway: GatewayFactory, echo: Echo, yield_at: int
) -> None:
    gw = make_gateway(table(route([echo.url])), http_yield_at=yield_at)
    yields = counted_yields(gw)
    for _ in range(5):
        assert call(gw, f"{P}/x")[0] == 200
    assert yields == []  # one call at a time: nothing to batch
    with ThreadPoolExecutor(12) as pool:  # each answer waits 0.3 s: the others in flight
        statuses = list(pool.map(lambda _: call(gw, f"{P}/slow?s=0.3")[0], range(12)))
    assert statuses == [200] * 12
    assert bool(yields) == bool(yield_at)
    assert all(n >= yield_at for n in yields)  # never below the threshold


def test_calls_in_flight_count_back_to_zero_however_they_end(
    make_gateway: GatewayFactory, echo: Echo, lt: LoopThread
) -> None:
    """Answered, timed out at the replica and left by their client: each call is counted
    in flight until it ends, once (a count that drifted up would make a lone call yield)."""
    gw = make_gateway(table(route([echo.url], timeout_ms=300)))
    assert call(gw, f"{P}/x")[0] == 200
    assert call(gw, f"{P}/slow?s=2")[0] == 408  # the replica did not answer in time
    assert echo.hold_started is not None
    hold_started = echo.hold_started
    s = socket.create_connection(("127.0.0.1", gw.port))
    s.sendall(f"GET {P}/hold HTTP/1.1\r\nHost: x\r\nAuthorization: {TOKEN}\r\n\r\n".encode())
    wait_until(lambda: lt.call(hold_started.is_set), 10, what="the replica holds")
    assert in_flight(gw) == 1
    s.close()  # the client leaves mid-call
    wait_until(lambda: in_flight(gw) == 0, 5, what="no call in flight")
    threads = [threading.Thread(target=call, args=(gw, f"{P}/x")) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert in_flight(gw) == 0
