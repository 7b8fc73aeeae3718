"""How many small-file GETs a pull runs at once.

A small file's GET is mostly Python work (signing, ``requests``, parsing the answer) under
the one interpreter lock, then a wait for OSS. More GETs in flight than it takes to keep
the lock busy during those waits only make the threads hand the lock back and forth (on a
loopback, 8 threads cost a third more CPU per file than 2). How many that is depends on
OSS's latency: :class:`Throttle` lets one worker fetch the first files alone, times their
GETs, and from then on lets :func:`concurrency` workers fetch (2 or 3 on a loopback, all of
them at OSS's few milliseconds).
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

WARM_UP = 1  # the first GET also opens the connection (a TLS handshake, on OSS): not timed
PROBES = 3  # GETs then timed alone; the median is taken, so one hiccup does not count


def concurrency(ratios: list[float], limit: int) -> int:
    """GETs in flight from probes' wall time over CPU time (``ratios``): while one GET
    works, the others wait out the rest of its wall time, so the median ratio of them keep
    one thread's worth of CPU busy. Twice that, since the probes ran alone: in company each
    GET also waits its turn for the lock, and OSS's latency varies. 1 to ``limit``."""
    return max(1, math.ceil(min(limit, 2 * statistics.median(ratios))))


class Throttle:
    """Turns for the workers fetching small files: each holds one while it takes file after
    file (so a file ends without handing a turn to another thread), :meth:`timed` around
    each GET."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._allowed = 1
        self._running = 0
        self._seen = 0  # GETs finished while probing
        self._ratios: list[float] = []
        self._turn = threading.Condition()

    @property
    def allowed(self) -> int:
        return self._allowed

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Wait for a turn and hold it while the block runs."""
        with self._turn:
            self._turn.wait_for(lambda: self._running < self._allowed)
            self._running += 1
        try:
            yield
        finally:
            with self._turn:
                self._running -= 1
                self._turn.notify()

    @contextmanager
    def timed(self) -> Iterator[None]:
        """Time one GET, while probing (one that fails says nothing of the latency)."""
        if len(self._ratios) == PROBES:
            yield
            return
        wall, cpu = time.perf_counter(), time.thread_time()
        yield
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        with self._turn:
            self._seen += 1
            if self._seen <= WARM_UP or len(self._ratios) == PROBES:
                return
            self._ratios.append(wall / cpu if cpu > 0 else math.inf)
            if len(self._ratios) == PROBES:
                before, self._allowed = self._allowed, concurrency(self._ratios, self._limit)
                # Wake only as many waiters as may now run: a woken thread that must wait
                # again costs two context switches and a turn of the lock for nothing.
                self._turn.notify(self._allowed - before)
