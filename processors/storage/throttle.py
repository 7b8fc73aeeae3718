"""How many small-file GETs a pull runs at once.

A small file's GET is mostly Python work (signing, ``requests``, parsing the answer) under
the one interpreter lock, then a wait for OSS. More GETs in flight than it takes to keep
the lock busy during those waits only make the threads hand the lock back and forth (on a
loopback, 8 threads cost a third more CPU per file than 2). How many that is depends on
OSS's latency: :class:`Throttle` lets the first GETs run one at a time, times them, and
from then on lets :func:`concurrency` of them run (2 or 3 on a loopback, all the workers
at OSS's few milliseconds).
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
    def slot(self) -> Iterator[None]:
        """Wait for a turn and hold it while the block runs (timed, while probing)."""
        with self._turn:
            self._turn.wait_for(lambda: self._running < self._allowed)
            self._running += 1
        wall, cpu = time.perf_counter(), time.thread_time()
        finished = False
        try:
            yield
            finished = True
        finally:
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            with self._turn:
                self._running -= 1
                before = self._allowed
                if finished and len(self._ratios) < PROBES:
                    self._probed(wall, cpu)
                # Wake only as many waiters as may now run: a woken thread that must wait
                # again costs two context switches and a turn of the lock for nothing.
                self._turn.notify(1 + self._allowed - before)

    def _probed(self, wall: float, cpu: float) -> None:
        self._seen += 1
        if self._seen > WARM_UP:
            self._ratios.append(wall / cpu if cpu > 0 else math.inf)
            if len(self._ratios) == PROBES:
                self._allowed = concurrency(self._ratios, self._limit)
