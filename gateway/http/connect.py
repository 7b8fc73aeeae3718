"""Opening a connection to a replica: the coroutine of :class:`gateway.http.pool.UpstreamPool`,
apart from it because the pool is compiled and coroutines stay interpreted
(``gateway/native.py``).
"""

from __future__ import annotations

import asyncio
import socket

from gateway.http.upstream import Pool, UpstreamConnection, UpstreamError


async def connect(pool: Pool, key: tuple[str, int], timeout_s: float) -> UpstreamConnection:
    """A new connection to ``key`` (host, port). Raises :class:`UpstreamError`
    (``kind="connect"``, nothing sent) if it cannot be established."""
    host, port = key
    try:
        async with asyncio.timeout(timeout_s):
            _, conn = await pool.loop.create_connection(
                lambda: UpstreamConnection(pool, key), host, port
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
