"""Upstream keep-alive pool: connections to replicas that left the route table are closed,
so a stopping Triton (which waits for open connections) is not held up by the gateway."""

from __future__ import annotations

import asyncio

import pytest

from gateway.http.pool import Idle, UpstreamPool
from gateway.http.upstream import UpstreamConnection, Watched
from testing.waiting import wait_until_async


async def test_reroute_closes_idle_and_finishing_connections_to_unrouted_replicas() -> None:
    closed: list[int] = []

    async def replica(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the gateway closes its side
        closed.append(1)
        writer.close()

    server = await asyncio.start_server(replica, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = UpstreamPool(keepalive_s=60)
    idle = await pool.acquire("127.0.0.1", port, 1.0)
    busy = await pool.acquire("127.0.0.1", port, 1.0)
    pool.release(idle, pool.time())

    pool.reroute({("127.0.0.1", port)}, set())  # routed: kept
    await asyncio.sleep(0.1)
    assert closed == [] and pool.idle(f"127.0.0.1:{port}") is idle
    pool.release(idle, pool.time())

    pool.reroute(set(), {("127.0.0.1", port)})  # the replica left the table
    await wait_until_async(lambda: closed == [1], 10)
    assert pool.idle(f"127.0.0.1:{port}") is None
    pool.release(busy, pool.time())  # a request in flight finished: not kept either
    await wait_until_async(lambda: closed == [1, 1], 10)

    pool.reroute({("127.0.0.1", port)}, set())  # back in the table: kept again, and closed
    back = await pool.acquire("127.0.0.1", port, 1.0)  # with the pool (not in a list the
    pool.release(back, pool.time())  # address had before it left)
    assert pool.idle(f"127.0.0.1:{port}") is back
    pool.release(back, pool.time())
    pool.close()
    await wait_until_async(lambda: closed == [1, 1, 1], 10)
    server.close()
    await server.wait_closed()


class Counting(Watched):
    """A receiver with a deadline, as the pool's timer sees one."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = 0

    def check_deadline(self, now: float) -> None:
        self.checks += 1


async def test_the_deadline_timer_runs_only_while_something_is_watched() -> None:
    pool = UpstreamPool()
    ex = Counting()
    pool.watch(ex)
    await wait_until_async(lambda: ex.checks >= 2, 5)
    pool.unwatch(ex)
    await wait_until_async(lambda: pool._ticker is None, 5)  # idle: no timer left
    pool.watch(ex)
    checks = ex.checks
    await wait_until_async(lambda: ex.checks > checks, 5)  # and back when needed
    pool.close()


class WatchesAnother(Counting):
    """A deadline check that starts another call (a pipelined request after a timeout)."""

    def __init__(self, pool: UpstreamPool) -> None:
        super().__init__()
        self.pool = pool

    def check_deadline(self, now: float) -> None:
        super().check_deadline(now)
        self.pool.watch(Counting())


async def test_a_deadline_check_that_watches_again_keeps_one_timer() -> None:
    pool = UpstreamPool()
    ex = WatchesAnother(pool)
    pool.watch(ex)
    await asyncio.sleep(0.5)  # ten ticks of 50 ms
    pool.close()
    assert 5 <= ex.checks <= 12  # one chain; two would double, and so on


async def test_idle_connections_are_closed_and_then_the_sweeper_stops() -> None:
    closed: list[int] = []

    async def replica(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        closed.append(1)
        writer.close()

    server = await asyncio.start_server(replica, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = UpstreamPool(keepalive_s=0.2)
    assert pool._sweeper is None
    pool.release(await pool.acquire("127.0.0.1", port, 1.0), pool.time())
    assert pool._sweeper is not None
    await wait_until_async(lambda: closed == [1], 10)  # idle past keepalive_s: closed
    await wait_until_async(lambda: pool._sweeper is None, 10)  # nothing idle: no timer
    pool.close()
    server.close()
    await server.wait_closed()


async def test_the_idle_list_is_a_stack_whose_oldest_are_swept_and_any_removed() -> None:
    pool = UpstreamPool()
    a, b, c = (UpstreamConnection(pool, ("127.0.0.1", 1)) for _ in range(3))
    for since, conn in enumerate((a, b, c), start=1):
        conn.idle_since = float(since)
    idle = Idle()
    assert idle.pop() is None
    for conn in (a, b, c):
        idle.push(conn)
    assert len(idle) == 3 and idle.pop() is c  # most recently used first
    idle.push(c)
    assert [idle.idle_since(i) for i in range(len(idle))] == [1.0, 2.0, 3.0]
    assert idle.take(1) == [a]  # the oldest, as the sweep takes them
    idle.remove(c)
    assert len(idle) == 1 and idle.pop() is b and idle.pop() is None
    idle.push(a)
    assert idle.take(len(idle)) == [a] and len(idle) == 0
    pool.close()


@pytest.mark.parametrize(
    ("watched", "unwatched"),
    [
        (4, []),
        (4, [0]),  # the first watched (the list's last)
        (4, [3]),  # the last watched (the list's first)
        (4, [1, 2]),  # from the middle
        (4, [3, 0, 2, 1]),  # all
        (1, [0, 0]),  # twice: the second does nothing
    ],
)
async def test_a_tick_checks_exactly_what_is_still_watched(
    watched: int, unwatched: list[int]
) -> None:
    pool = UpstreamPool()
    calls = [Counting() for _ in range(watched)]
    for ex in calls:
        pool.watch(ex)
    pool.watch(calls[0])  # watched already: still checked once per tick
    for i in unwatched:
        pool.unwatch(calls[i])
    pool._tick()
    assert [ex.checks for ex in calls] == [0 if i in unwatched else 1 for i in range(watched)]
    for ex in calls:  # and back, in any order
        pool.watch(ex)
    pool._tick()
    assert all(ex.checks == (1 if i in unwatched else 2) for i, ex in enumerate(calls))
    pool.close()
