"""Keep-alive connections to replicas by address (``host:port``, see
:func:`gateway.routing.balancer.address`), and the one timer that checks the deadlines of the
exchanges in flight. The proxies take an idle connection per call
(:meth:`UpstreamPool.idle`, or :meth:`UpstreamPool.acquire` to connect) and hand it back
when the exchange ends (:meth:`UpstreamPool.release`).

Compiled with the proxy (``gateway/native.py``): its timers are loop callbacks, and the one
coroutine, connecting, is :func:`gateway.http.connect.connect` (interpreted).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from gateway.http.connect import connect
from gateway.http.upstream import Pool, UpstreamConnection, Watched
from gateway.routing.balancer import address

TICK_S = 0.05  # resolution of upstream timeouts


class Idle:
    """One replica's idle connections, oldest first. The list never shrinks (``n`` of its
    slots are in use): a list that goes from one item to none and back at every call is
    reallocated at every call."""

    __slots__ = ("n", "slots")

    def __init__(self) -> None:
        self.slots: list[UpstreamConnection | None] = []
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def push(self, conn: UpstreamConnection) -> None:
        if self.n < len(self.slots):
            self.slots[self.n] = conn
        else:
            self.slots.append(conn)
        self.n += 1

    def pop(self) -> UpstreamConnection | None:
        """The most recently used (least likely to have been closed)."""
        if not self.n:
            return None
        self.n -= 1
        conn = self.slots[self.n]
        self.slots[self.n] = None
        return conn

    def take(self, count: int) -> list[UpstreamConnection]:
        """Remove and return the ``count`` oldest."""
        taken = [c for c in self.slots[:count] if c is not None]
        del self.slots[:count]
        self.n -= count
        return taken

    def remove(self, conn: UpstreamConnection) -> None:
        for i in range(self.n):
            if self.slots[i] is conn:
                del self.slots[i]
                self.n -= 1
                return

    def idle_since(self, i: int) -> float:
        conn = self.slots[i]
        return conn.idle_since if conn is not None else 0.0


class UpstreamPool(Pool):
    """Idle keep-alive connections by address; at most ``max_idle`` kept per
    replica, closed after ``keepalive_s`` unused."""

    def __init__(
        self, *, keepalive_s: float = 60.0, max_idle: int = 512, yield_at: int = 0
    ) -> None:
        super().__init__(asyncio.get_running_loop(), yield_at)
        self.keepalive_s = keepalive_s
        self.max_idle = max_idle
        self._sweep_s = min(5.0, keepalive_s / 2)
        self._idle: dict[str, Idle] = {}
        # The address last looked up and its connections, before the dict: one object per
        # address (balancer.address interns it), so a call's take and release compare
        # identities where the dict would compare strings.
        self._last_addr = ""
        self._last_idle: Idle | None = None
        # Replicas that left the route table (a delta at a time; small: a replica port or
        # pod IP that comes back is taken out again).
        self._unrouted: set[str] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False
        # Exchanges with a deadline, checked every TICK_S by one timer rather than one
        # timer per request (a timer handle per request cost more than the rest of it).
        self._watched: Watched | None = None  # the first; linked through them
        self._ticker: asyncio.TimerHandle | None = None

    def watch(self, ex: Watched) -> None:
        if ex.watching:
            return
        ex.watching = True
        first = self._watched
        ex.watch_prev, ex.watch_next = None, first
        if first is not None:
            first.watch_prev = ex
        self._watched = ex
        self._arm_ticker()

    def _arm_ticker(self) -> None:
        """One tick chain at most: a deadline check may start the next pipelined call,
        which watches again, while :meth:`_tick` is still running."""
        if self._ticker is None and self._watched is not None and not self._closed:
            self._ticker = self.loop.call_later(TICK_S, self._tick)

    def unwatch(self, ex: Watched) -> None:
        if not ex.watching:
            return
        ex.watching = False
        before, after = ex.watch_prev, ex.watch_next
        if before is None:
            self._watched = after
        else:
            before.watch_next = after
        if after is not None:
            after.watch_prev = before
        ex.watch_prev = ex.watch_next = None

    def _tick(self) -> None:
        """Armed while exchanges are watched; idle, the gateway has no timer of its own."""
        self._ticker = None  # (first: should a check raise, the next watch arms it again)
        now = self.time()
        due = []  # (a check may unwatch itself, or watch another call)
        ex = self._watched
        while ex is not None:
            due.append(ex)
            ex = ex.watch_next
        for ex in due:
            ex.check_deadline(now)
        self._arm_ticker()

    def idle(self, addr: str) -> UpstreamConnection | None:
        """An idle keep-alive connection to ``addr`` (:func:`gateway.routing.balancer.address`),
        if there is one."""
        idle = self._stack(addr, False)
        if idle is None:
            return None
        conn = idle.pop()
        while conn is not None:
            if not conn.closed and not conn.is_closing():
                return conn
            conn = idle.pop()
        return None

    def acquire(
        self, host: str, port: int, connect_timeout_s: float
    ) -> Awaitable[UpstreamConnection]:
        """An idle connection to ``host:port`` or a new one (see :func:`connect`)."""
        conn = self.idle(address(host, port))
        if conn is None:
            return connect(self, (host, port), connect_timeout_s)
        done: asyncio.Future[UpstreamConnection] = self.loop.create_future()
        done.set_result(conn)
        return done

    def reroute(self, added: set[tuple[str, int]], released: set[tuple[str, int]]) -> None:
        """Close idle connections to replicas no route lists any more (and busy ones when
        they finish): Triton waits for open connections before it exits, so an idle
        keep-alive here would hold a stopping replica up for its whole exit timeout."""
        gone = {address(host, port) for host, port in released}
        self._unrouted -= {address(host, port) for host, port in added}
        self._unrouted |= gone
        self._last_idle = None
        for addr in gone:
            idle = self._idle.pop(addr, None)
            if idle is not None:
                for conn in idle.take(len(idle)):
                    conn.close()

    def release(self, conn: UpstreamConnection, now: float) -> None:
        conn.exchange = None
        addr = conn.address
        if conn.closed or self._closed or (self._unrouted and addr in self._unrouted):
            conn.close()
            return
        idle = self._stack(addr, True)
        assert idle is not None
        if len(idle) >= self.max_idle:
            conn.close()
            return
        if conn._reading_paused:  # (checked here: this runs once per request)
            conn.resume_reading()
        conn.idle_since = now
        idle.push(conn)
        self._arm_sweeper()

    def _stack(self, addr: str, make: bool) -> Idle | None:
        """``addr``'s idle connections (made if ``make``)."""
        idle = self._last_idle
        if idle is not None and addr is self._last_addr:
            return idle
        idle = self._idle.get(addr)
        if idle is None:
            if not make:
                return None
            idle = self._idle[addr] = Idle()
        self._last_addr, self._last_idle = addr, idle
        return idle

    def forget(self, conn: UpstreamConnection) -> None:
        idle = self._idle.get(conn.address)
        if idle is not None:
            idle.remove(conn)

    def _sweep(self) -> None:
        """Close connections idle past ``keepalive_s``; armed while any are idle."""
        self._sweeper = None  # (first, as in _tick)
        cutoff = self.time() - self.keepalive_s
        for idle in self._idle.values():
            stale = 0
            while stale < len(idle) and idle.idle_since(stale) < cutoff:
                stale += 1
            for conn in idle.take(stale):
                conn.close()
        self._arm_sweeper()

    def _arm_sweeper(self) -> None:
        if self._sweeper is None and not self._closed and any(map(len, self._idle.values())):
            self._sweeper = self.loop.call_later(self._sweep_s, self._sweep)

    def close(self) -> None:
        self._closed = True
        for timer in (self._sweeper, self._ticker):
            if timer is not None:
                timer.cancel()
        self._sweeper = self._ticker = None
        for idle in self._idle.values():
            for conn in idle.take(len(idle)):
                conn.close()
