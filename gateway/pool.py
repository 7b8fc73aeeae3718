"""Keep-alive connections to replicas by ``(host, port)``, and the one timer that checks
the deadlines of the exchanges in flight. The proxies take an idle connection per call
(:meth:`UpstreamPool.idle`, or :meth:`UpstreamPool.acquire` to connect) and hand it back
when the exchange ends (:meth:`UpstreamPool.release`).

Its coroutines (connecting, the sweep and the tick) are why it is apart from
:mod:`gateway.upstream`: the per-call callbacks there are compiled (see
``docs/architecture.md``, "Compiled hot path"), coroutines stay interpreted.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque

from gateway.upstream import Receiver, UpstreamConnection, UpstreamError

TICK_S = 0.05  # resolution of upstream timeouts


class UpstreamPool:
    """Idle keep-alive connections by ``(host, port)``; at most ``max_idle`` kept per
    replica, closed after ``keepalive_s`` unused."""

    def __init__(self, *, keepalive_s: float = 60.0, max_idle: int = 512) -> None:
        self.loop = asyncio.get_running_loop()
        self.keepalive_s = keepalive_s
        self.max_idle = max_idle
        self._idle: dict[tuple[str, int], deque[UpstreamConnection]] = {}
        # Replicas that left the route table (a delta at a time; small: a replica port or
        # pod IP that comes back is taken out again).
        self._unrouted: set[tuple[str, int]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        # Exchanges with a deadline, checked every TICK_S by one timer rather than one
        # timer per request (a timer handle per request cost more than the rest of it).
        self._watched: set[Receiver] = set()
        self._ticker: asyncio.Task[None] | None = None

    def watch(self, ex: Receiver) -> None:
        self._watched.add(ex)
        if self._ticker is None and not self._closed:
            self._ticker = self.loop.create_task(self._tick())

    def unwatch(self, ex: Receiver) -> None:
        self._watched.discard(ex)

    async def _tick(self) -> None:
        """Runs while exchanges are watched; idle, the gateway has no timer of its own."""
        try:
            while self._watched:
                await asyncio.sleep(TICK_S)
                now = self.loop.time()
                for ex in list(self._watched):
                    ex.check_deadline(now)
        finally:
            self._ticker = None

    def idle(self, host: str, port: int) -> UpstreamConnection | None:
        """An idle keep-alive connection to ``host:port``, if there is one."""
        idle = self._idle.get((host, port))
        while idle:
            conn = idle.pop()  # most recently used: least likely to have been closed
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def acquire(self, host: str, port: int, connect_timeout_s: float) -> UpstreamConnection:
        """An idle connection to ``host:port`` or a new one. Raises :class:`UpstreamError`
        (``kind="connect"``, nothing sent) if it cannot be established."""
        conn = self.idle(host, port)
        if conn is not None:
            return conn
        key = (host, port)
        try:
            async with asyncio.timeout(connect_timeout_s):
                _, conn = await self.loop.create_connection(
                    lambda: UpstreamConnection(self, key), host, port
                )
        except TimeoutError:
            raise UpstreamError("connect", "connect timed out") from None
        except OSError as e:
            raise UpstreamError(
                "connect", f"cannot connect: {e.strerror or type(e).__name__}"
            ) from None
        sock = conn.transport.get_extra_info("socket") if conn.transport else None
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def reroute(self, added: set[tuple[str, int]], released: set[tuple[str, int]]) -> None:
        """Close idle connections to replicas no route lists any more (and busy ones when
        they finish): Triton waits for open connections before it exits, so an idle
        keep-alive here would hold a stopping replica up for its whole exit timeout."""
        self._unrouted -= added
        self._unrouted |= released
        for key in released:
            idle = self._idle.pop(key, None)
            while idle:
                idle.popleft().close()

    def release(self, conn: UpstreamConnection) -> None:
        conn.exchange = None
        if conn.closed or self._closed or conn.key in self._unrouted:
            conn.close()
            return
        idle = self._idle.setdefault(conn.key, deque())
        if len(idle) >= self.max_idle:
            conn.close()
            return
        if conn._reading_paused:  # (checked here: this runs once per request)
            conn.resume_reading()
        conn.idle_since = self.loop.time()
        idle.append(conn)
        if self._sweeper is None:
            self._sweeper = self.loop.create_task(self._sweep())

    def forget(self, conn: UpstreamConnection) -> None:
        idle = self._idle.get(conn.key)
        if idle:
            with contextlib.suppress(ValueError):
                idle.remove(conn)

    async def _sweep(self) -> None:
        """Close connections idle past ``keepalive_s``; runs while any are idle."""
        try:
            while any(self._idle.values()):
                await asyncio.sleep(min(5.0, self.keepalive_s / 2))
                cutoff = self.loop.time() - self.keepalive_s
                for idle in self._idle.values():
                    while idle and idle[0].idle_since < cutoff:
                        idle.popleft().close()
        finally:
            self._sweeper = None

    async def close(self) -> None:
        self._closed = True
        for task in (self._sweeper, self._ticker):
            if task is not None:
                task.cancel()
        for idle in self._idle.values():
            while idle:
                idle.popleft().close()
