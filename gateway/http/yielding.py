"""Giving up the CPU after a read the gateway passed on, in both doors (HTTP/1.1 replica
connections, :mod:`gateway.http.upstream`; the gRPC relay, :mod:`gateway.grpc.relay`).

A replica on the same core answers each call as it gets it, and a gateway that reads each
answer at once pays a wake-up, a read and a write per call, each in caches the replica
just took over. Yielding once a read is passed on lets the replica answer (and the callers
send) several calls first; the next wake-up carries them all. On a core of its own the
yield returns at once, and one call in flight has nothing to batch, so a lone call never
waits for another process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final


def _no_yield() -> None:
    return None


# Not on every platform (it is on Linux, where the gateway's image runs).
sched_yield: Final[Callable[[], None]] = getattr(os, "sched_yield", _no_yield)


def cedes_cpu(calls: int, yield_at: int) -> bool:
    """Whether to give up the CPU after a read, with ``calls`` in flight (besides any that
    read ended): from ``yield_at`` on, never when it is 0; a lone call never yields (what
    it saves, on a core shared with Triton: docs/performance.md)."""
    return 0 < yield_at <= calls
