"""The listening side of the client-facing server: accepts connections (one
:class:`gateway.http.server.HttpConnection` each), runs the coroutines handlers return, and
closes idle keep-alive connections, slow heads and stalled bodies.

Apart from :mod:`gateway.http.server` because it holds coroutines: the per-request callbacks
there are compiled, coroutines stay interpreted (``docs/architecture.md``, "Compiled hot
path").
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any

from gateway.http.server import (
    BUFFER_HIGH,
    CallingHandler,
    Handler,
    Head,
    HttpConnection,
    Request,
    RequestHandler,
)
from gateway.http.splice import SPLICE_MIN

log = logging.getLogger(__name__)


class HttpServer:
    """Accepts connections for ``handler`` and closes idle keep-alive ones."""

    def __init__(
        self,
        handler: RequestHandler | Handler,
        *,
        keepalive_s: float = 75.0,
        buffer_bytes: int = BUFFER_HIGH,
        head_timeout_s: float = 60.0,
        body_timeout_s: float = 60.0,
        splice_min_bytes: int = SPLICE_MIN,
    ) -> None:
        # A native handler is called directly by the (compiled) connections.
        self.handler = handler if isinstance(handler, RequestHandler) else CallingHandler(handler)
        self.loop = asyncio.get_running_loop()
        self.keepalive_s = keepalive_s
        self.head_timeout_s = head_timeout_s
        self.body_timeout_s = body_timeout_s
        self.buffer_bytes = buffer_bytes
        self.splice_min = splice_min_bytes
        self.connections: set[HttpConnection] = set()
        self.heads: dict[tuple[str | None, bytes], Head] = {}  # see HttpConnection._shared_head
        self._servers: list[asyncio.Server] = []
        self._sweeper: asyncio.Task[None] | None = None
        self.sweeping = False  # read by each new connection, which starts it when not
        # Each accepted connection's protocol: the compiled class called at once (a method
        # here would add an interpreted frame per connection).
        self.protocol: Callable[[], HttpConnection] = functools.partial(HttpConnection, self)

    async def listen(
        self,
        host: str | None = None,
        port: int = 0,
        *,
        sock: socket.socket | None = None,
        reuse_port: bool = False,
        backlog: int = 1024,
    ) -> asyncio.Server:
        server: asyncio.Server
        if sock is not None:
            server = await self.loop.create_server(self.protocol, sock=sock, backlog=backlog)
        else:
            server = await self.loop.create_server(
                self.protocol, host, port, reuse_port=reuse_port or None, backlog=backlog
            )
        self._servers.append(server)
        return server

    def run_handler(
        self, conn: HttpConnection, req: Request, coro: Coroutine[Any, Any, None]
    ) -> asyncio.Task[None]:
        """Run the coroutine a handler returned for ``req`` as a task; the request finishes
        when it returns."""
        return self.loop.create_task(self._run(conn, req, coro))

    async def _run(
        self, conn: HttpConnection, req: Request, coro: Coroutine[Any, Any, None]
    ) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("unhandled error in the gateway's request handler")
            conn.close()
            return
        conn.handled(req)

    def sweep(self) -> None:
        """Start the sweeper (a connection came while none ran: it stops once all closed)."""
        if self._sweeper is None and self._servers:
            self._sweeper = self.loop.create_task(self._sweep())
            self.sweeping = True

    @property
    def sockets(self) -> list[socket.socket]:
        return [s for srv in self._servers for s in srv.sockets]

    async def _sweep(self) -> None:
        """Close keep-alive connections idle past ``keepalive_s``, heads still unfinished
        after ``head_timeout_s`` and bodies stalled for ``body_timeout_s`` (nginx's
        client_header_timeout and client_body_timeout: a slowloris holds nothing long).
        O(open connections) per tick, and only while there are some."""
        interval = min(5.0, self.keepalive_s / 2, self.head_timeout_s / 2, self.body_timeout_s / 2)
        try:
            while self.connections:
                await asyncio.sleep(interval)
                now = time.monotonic()  # the connections' clock (gateway.http.server)
                for conn in list(self.connections):
                    if conn.body_stalled(now, self.body_timeout_s):
                        conn._protocol_error(408, "request body timed out")
                        continue
                    slow_head = conn._in_head and now - conn.head_started > self.head_timeout_s
                    idle = conn.active is None and conn.last_active < now - self.keepalive_s
                    if slow_head or idle:
                        conn.close()
        finally:
            self._sweeper = None
            self.sweeping = False

    async def close(self, grace_s: float = 10.0) -> None:
        """Stop accepting, let requests in progress finish for up to ``grace_s``, close."""
        for srv in self._servers:
            srv.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        deadline = self.loop.time() + grace_s
        while any(c.active is not None for c in self.connections):
            if self.loop.time() > deadline:
                break
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn.close()
        for srv in self._servers:
            await srv.wait_closed()
