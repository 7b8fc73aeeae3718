"""The connection protocol driven directly, with a fake transport, for orderings that a
real socket produces only by chance."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.app import Gateway
from gateway.route_table import StaticRouteSource
from gateway.server import HttpServer
from gateway.settings import GatewaySettings
from testing.waiting import wait_until_async
from tests.gateway.harness import SERVICE, TOKEN, route, table


class FakeTransport:
    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5555) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closing = True


def test_client_gone_before_its_handler_ran_returns_its_queue_place() -> None:
    """Request parsed, then the connection lost in the same loop turn: the coroutine
    that holds the service's queue place must still run its cleanup."""

    async def scenario() -> int:
        # A replica nobody listens on: the request takes the coroutine path (connect).
        gw = Gateway(
            GatewaySettings(connect_timeout_ms=200),
            StaticRouteSource(table(route(["http://127.0.0.1:9"], max_queue_size=1))),
        )
        await gw.start()
        await gw.wait_for_routes(5)
        server = HttpServer(gw.handle)
        for _ in range(3):
            conn = server.protocol()
            conn.connection_made(FakeTransport())  # type: ignore[arg-type]
            conn.data_received(
                f"GET /api/predict/{SERVICE}/v2 HTTP/1.1\r\nAuthorization: {TOKEN}\r\n\r\n".encode()
            )
            conn.connection_lost(None)
        entry = gw.routes.get(SERVICE)
        assert entry is not None
        await wait_until_async(lambda: entry.in_flight.count == 0, 10)
        await gw.close()
        return entry.in_flight.count

    assert asyncio.run(scenario()) == 0
