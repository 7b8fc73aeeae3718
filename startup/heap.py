"""A long-running process's start-up heap kept out of the cyclic collector's full passes.

A full collection walks every tracked object, during which every call in flight waits;
a server's imports make most of them. What brings one is garbage in reference cycles that
lived long enough to be old: closed client connections did until they stopped leaving
cycles (``gateway.http.server.HttpConnection.connection_lost``); a closed replica
connection, a call on the coroutine path, a replaced route table still may. Frozen, the
start-up objects are skipped: a pass walks only what came since. Call it once, after the
imports and before serving (the figures: docs/performance.md)."""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect once, then move every object tracked now out of the collector's reach; return
    how many. Call it once, before serving: what is frozen is never collected, so a later call
    would keep alive for good whatever cycles were garbage at that moment."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
